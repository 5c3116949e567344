/**
 * The CLI reference (docs/cli.md) and the man page (man/oats.1) are generated from the built program's own help
 * by scripts/cli-docs.mjs (`npm run docs`): they say what the command definitions say now, or this fails.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO } from "./helpers.js";

describe("the generated CLI reference", () => {
  const generated = JSON.parse(
    execFileSync(process.execPath, [join(REPO, "scripts/cli-docs.mjs"), "--print"], { encoding: "utf8" }),
  ) as { markdown: string; man: string };

  test("docs/cli.md is what `npm run docs` writes from the program's help", () => {
    assert.equal(readFileSync(join(REPO, "docs/cli.md"), "utf8"), generated.markdown, "run `npm run docs`");
  });

  test("man/oats.1 is what `npm run docs` writes, and the package ships it as its man page", () => {
    assert.equal(readFileSync(join(REPO, "man/oats.1"), "utf8"), generated.man, "run `npm run docs`");
    const pkg = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { man?: string[]; files: string[] };
    assert.deepEqual(pkg.man, ["./man/oats.1"]);
    assert.ok(pkg.files.includes("man"), "man/ is in the package");
  });

  test("every command and subcommand of the program has its section", () => {
    for (const heading of ["## oats retain", "## oats dispatch", "### oats run seal", "### oats audit verify"]) {
      assert.ok(generated.markdown.includes(`${heading}\n`), heading);
    }
  });
});
