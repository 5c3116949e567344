/**
 * The package's curated surface (dist/; `npm run build` first): every entry
 * package.json names lists its exports one by one, each hands out the same
 * OatsError and code table, and the root entry publishes nothing internal.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import { REPO } from "./helpers.js";

type Conditions = { types: string; import: string; require: string };
const EXPORTS = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")).exports as Record<
  string,
  Conditions | string
>;
const ENTRIES = Object.entries(EXPORTS).filter((entry): entry is [string, Conditions] => typeof entry[1] !== "string");
const LAYERS = ["retention", "resolution", "captures", "evidence", "fleet"];
/** Names a layer keeps to itself: the root entry must not publish them. */
const INTERNAL = [
  "PROC_SUPER_MAGIC",
  "PROC_USER_INIT_INO",
  "parseIdMap",
  "isInitialIdMap",
  "assertInitialUserNamespace",
  "footerOffset",
  "formatFooter",
  "LineCapture",
  "processStart",
  "groupMembers",
  "readRecordBytes",
  "pae",
  "foldKey",
  "gitEnvironment",
  "withExtractionDir",
  "blobPath",
  "entryHash",
];

async function load(path: string): Promise<Record<string, unknown>> {
  return (await import(pathToFileURL(join(REPO, path)).href)) as Record<string, unknown>;
}

describe("the curated surface", () => {
  test("one subpath per layer, each with types, ESM and CommonJS", () => {
    assert.deepEqual(
      ENTRIES.map(([key]) => key),
      [".", ...LAYERS.map((layer) => `./${layer}`)],
    );
    for (const [key, conditions] of ENTRIES) {
      // import first, then require (whose .cjs TypeScript types by the .d.cts beside it), then types for the rest.
      assert.deepEqual(Object.keys(conditions), ["import", "require", "types"], `${key}: import, require, types`);
      assert.ok(
        existsSync(join(REPO, conditions.require.replace(/\.cjs$/, ".d.cts"))),
        `${key}: CommonJS declarations`,
      );
    }
  });

  test("no entry re-exports a module whole: every name is listed", () => {
    for (const [, conditions] of ENTRIES) {
      const source = conditions.import.replace(/^\.\/dist\//, "src/").replace(/\.js$/, ".ts");
      const text = readFileSync(join(REPO, source), "utf8");
      assert.doesNotMatch(text, /export\s+\*/, `${source} has an export *`);
    }
  });

  test("OatsError, isOatsError and the code table come from every entry, one class for all", async () => {
    const root = await load("dist/index.js");
    for (const [key, conditions] of ENTRIES) {
      const entry = await load(conditions.import);
      for (const name of ["OatsError", "isOatsError", "ERROR_CODES", "ERROR_KINDS"])
        assert.equal(entry[name], root[name], `${key} exports ${name}`);
      assert.equal(typeof entry["OatsError"], "function", `${key} exports OatsError`);
    }
  });

  test("the root entry publishes nothing internal", async () => {
    const root = await load("dist/index.js");
    const leaked = INTERNAL.filter((name) => name in root);
    assert.deepEqual(leaked, []);
  });
});
