/**
 * Docs are design, not history: no comment, document or test title names a work session, an issue number, a
 * wall-clock run or a date. History lives in git and in CHANGELOG.md, which this test does not read.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO } from "./helpers.js";

/** Where code comments, documents and test titles live (fixtures/ is data, CHANGELOG.md is the history). */
const SCANNED = /^(src|bench|scripts|docs|test|native|man|\.ci)\/|^README\.md$/;
const TEXT = /\.(ts|mts|mjs|cjs|js|md|json|c|h|sh|py|ya?ml|txt|1)$|^\.ci\/run$/;

/** What history looks like in a text. */
const HISTORY: { what: string; pattern: RegExp }[] = [
  { what: "an issue number", pattern: /\b[Ii]ssues? #?\d+|\bissue-\d+|\b(PR|[Pp]ull request) #?\d+/g },
  { what: "a work session", pattern: /\b[Ss]essions? #?\d+|\b[Rr]ounds? #?\d+/g },
  // The allow-list, both data rather than history: a date followed by `T` and an hour is an ISO timestamp (a record's
  // or a log line's, in tests and in the documents' examples), and `draft 2020-12` (or draft/2020-12, draft-2020-12)
  // (JSON Schema 2020-12) names the JSON Schema dialect the generated schemas declare.
  { what: "a date", pattern: /(?<!(draft|Schema)[ /-])\b20\d\d-[01]\d(-[0-3]\d)?\b(?![-T]\d)/g },
  { what: "a time of day of a run", pattern: /\b\d\d:\d\d(-\d\d:\d\d)? UTC\b/g },
  { what: "a commit of main", pattern: /\bmain at [0-9a-f]{7,}\b/g },
  { what: "a note to whoever merges the work", pattern: /\b[Hh]elper [\w-]+'s\b|\bthe lead\b/g },
];

export function historyIn(text: string): string[] {
  const found: string[] = [];
  for (const { what, pattern } of HISTORY) for (const m of text.matchAll(pattern)) found.push(`${what}: ${m[0]}`);
  return found;
}

function scannedFiles(): string[] {
  return execFileSync("git", ["ls-files", "-z"], { cwd: REPO, encoding: "utf8" })
    .split("\0")
    .filter((path) => SCANNED.test(path) && TEXT.test(path) && existsSync(join(REPO, path)));
}

describe("docs are design, not history", () => {
  test("no code comment, document or test title names an issue, a session, a run's time or a date", () => {
    const offenders: string[] = [];
    const files = scannedFiles();
    assert.ok(files.length > 300, "the scan reads the tracked sources, tests and documents");
    for (const path of files) {
      const lines = readFileSync(join(REPO, path), "utf8").split("\n");
      lines.forEach((line, index) => {
        for (const found of historyIn(line)) offenders.push(`${path}:${index + 1}: ${found}`);
      });
    }
    assert.deepEqual(offenders, []);
  });

  test("the patterns catch history and let timestamps and the schema dialect through", () => {
    // Built from pieces, so this file holds no history for the scan above to find.
    const year = String(2000 + 26);
    for (const history of [
      `(iss${"ue"} 41)`,
      `Iss${"ue"} 9, item 4`,
      `sess${"ion"} 12`,
      `r${"ound"} 3 of the work`,
      `measured ${year}-12-06`,
      `(${year}-12)`,
      `at 05:10-05:16 ${"UTC"}`,
      `from ma${"in"} at 7b4661e`,
      `<!-- Hel${"per"} conf's section: keep it last -->`,
    ])
      assert.notDeepEqual(historyIn(history), [], history);
    for (const data of [
      `${year}-12-01T03:40:00.123456Z out fetching index`,
      `"pinnedAt": "${year}-01-01T00:00:00.000Z"`,
      `"$schema": "https://json-schema.org/draft/2020-12/schema"`,
      `target: "draft-2020-12"`,
      "zod 4's z.toJSONSchema (draft 2020-12",
      "the subset of JSON Schema 2020-12 they use",
      "step 5b, row 15a, 8 x 128 MiB, ROUNDS 5",
    ])
      assert.deepEqual(historyIn(data), [], data);
  });
});
