/**
 * The suite's own rule: nothing under test/conformance/properties (nor the
 * interface and harness the properties stand on) imports or names an
 * implementation module; only drivers do. A property that reached into
 * src/ or dist/ would test the implementation's view of itself.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

const HERE = import.meta.dirname;

/** Any mention of src/ or dist/ as a path segment, or an import that leaves test/conformance. */
const FORBIDDEN = [
  /(?:^|[\s"'`(/.])(?:src|dist)\//m,
  /from\s+["'](?:\.\.\/){2,}/,
  /import\(\s*["'](?:\.\.\/){2,}/,
  /["']oats-retention(?:\/[^"']*)?["']/,
];

export function violations(files: ReadonlyArray<{ name: string; text: string }>): string[] {
  return files.flatMap(({ name, text }) =>
    FORBIDDEN.filter((pattern) => pattern.test(text)).map((pattern) => `${name} matches ${pattern}`),
  );
}

function sources(dir: string, prefix = ""): Array<{ name: string; text: string }> {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.isDirectory()) return sources(join(dir, entry.name), `${prefix}${entry.name}/`);
    return entry.name.endsWith(".ts")
      ? [{ name: `${prefix}${entry.name}`, text: readFileSync(join(dir, entry.name), "utf8") }]
      : [];
  });
}

describe("conformance suite isolation", () => {
  test(
    "Given the properties folder, the driver interface and the harness, When " +
      "their sources are searched, Then none imports or names an " +
      "implementation module (src/, dist/, the package)",
    () => {
      const files = [
        ...sources(join(HERE, "properties"), "properties/"),
        ...["driver.ts", "harness.ts"].map((name) => ({ name, text: readFileSync(join(HERE, name), "utf8") })),
      ];
      assert.ok(files.length >= 10, `the properties are found: ${files.map((file) => file.name).join(", ")}`);
      assert.deepEqual(violations(files), []);
    },
  );

  test("Given sources that reach the implementation, When checked, Then each is caught (the check has teeth)", () => {
    for (const text of [
      'import { readRun } from "../../../src/index.js";',
      'const m = await import("../../../dist/index.js");',
      "// see src/evidence/log-format.ts",
      'import { x } from "oats-retention";',
      'import { y } from "oats-retention/retention";',
    ]) {
      assert.equal(violations([{ name: "sample.ts", text }]).length > 0, true, text);
    }
    assert.deepEqual(
      violations([
        {
          name: "ok.ts",
          text:
            'import { sh } from "./support.js";\nimport type { Driver } from ' +
            '"../driver.js";\n// the log format as the contract states it',
        },
      ]),
      [],
    );
  });
});
