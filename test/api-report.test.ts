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

type Declaration = { key: string; kind: string; documented: boolean; unknownParameters: string[] };

describe("the surface's quality, read from the report", async () => {
  const { surface } = (await import(join(REPO, "scripts/api-report.mjs"))) as {
    surface(): { declarations: Map<string, Declaration> };
  };
  const declarations = [...surface().declarations.values()];

  test("no public function takes `unknown`, but where its TSDoc says it takes any JSON value", () => {
    const found = declarations.filter((declaration) => declaration.unknownParameters.length > 0);
    assert.deepEqual(
      found.map((declaration) => `${declaration.key}(${declaration.unknownParameters.join(", ")})`),
      [],
      "type the input: the shape its caller holds (an ArtifactRefInput, a JsonValue document, ...)",
    );
  });

  test("every public function and class has TSDoc", () => {
    const found = declarations.filter(
      (declaration) => (declaration.kind === "function" || declaration.kind === "class") && !declaration.documented,
    );
    assert.deepEqual(
      found.map((declaration) => declaration.key).sort(),
      [],
      "document it: what it does, what it refuses (which codes), @param/@returns where useful",
    );
  });
});
