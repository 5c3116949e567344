/**
 * The API report (api/oats.api.md) and the API reference (docs/api.md) are generated from the built
 * declarations of every entry by scripts/api-report.mjs (`npm run docs`; `npm run build` first): a change
 * of the package's surface that the report does not carry fails here.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO } from "./helpers.js";

describe("the API report", () => {
  const generated = JSON.parse(
    execFileSync(process.execPath, [join(REPO, "scripts/api-report.mjs"), "--print"], {
      encoding: "utf8",
      maxBuffer: 64 << 20,
    }),
  ) as { report: string; reference: string };

  test("api/oats.api.md is what `npm run docs` writes from the built declarations", () => {
    assert.equal(readFileSync(join(REPO, "api/oats.api.md"), "utf8"), generated.report, "run `npm run docs`");
  });

  test("docs/api.md, the API reference, is what `npm run docs` writes", () => {
    assert.equal(readFileSync(join(REPO, "docs/api.md"), "utf8"), generated.reference, "run `npm run docs`");
  });

  test("the report names every entry package.json exports", () => {
    for (const entry of ["oats-retention", "oats-retention/retention", "oats-retention/fleet"])
      assert.ok(generated.report.includes(`\n## ${entry}\n`), entry);
    assert.match(generated.report, /- class `OatsError`: src\/core\/errors\.ts/);
  });
});
