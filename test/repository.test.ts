/**
 * The repository stands on its own: a clone with nothing beside it holds
 * everything its tests read and every document its code cites.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO } from "./helpers.js";

/** The tracked files, as git lists them (a clone holds exactly these). */
function trackedFiles(): string[] {
  return execFileSync("git", ["ls-files", "-z"], { cwd: REPO, encoding: "utf8" })
    .split("\0")
    .filter((path) => path !== "" && existsSync(join(REPO, path)));
}

const TEXT = /\.(ts|mts|mjs|cjs|js|md|json|c|h|sh|ya?ml|txt)$|^\.ci\/run$|(^|\/)README$/;

/** What a clone lacks: the folder beside the repository, and any absolute path of this machine's work tree. */
const OUTSIDE = [/\.\.\/shared\b/, /\bshared\/(spec|interop|hooks)\b/, /\bCONTRACT\.md\b/, /\/work\/(main|shared)\b/];

describe("a self-contained repository", () => {
  test("no tracked file names a path outside the repository", () => {
    const offenders: string[] = [];
    for (const path of trackedFiles()) {
      if (!TEXT.test(path)) continue;
      const text = readFileSync(join(REPO, path), "utf8");
      for (const pattern of OUTSIDE) {
        const match = pattern.exec(text);
        if (match) offenders.push(`${path}: ${match[0]}`);
      }
    }
    assert.deepEqual(offenders, []);
  });

  test("every repository path that code and documents cite exists", () => {
    const top = "(?:src|test|docs|bench|scripts|fixtures|native)";
    const cited = new RegExp(String.raw`\b(${top}\/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.(?:ts|mjs|md|json|c|sh))\b`, "g");
    // Written by a run, never tracked.
    const generated = new Set(["bench/results.json"]);
    const missing: string[] = [];
    for (const path of trackedFiles()) {
      if (!TEXT.test(path) || path.startsWith("fixtures/")) continue;
      for (const match of readFileSync(join(REPO, path), "utf8").matchAll(cited)) {
        const target = match[1]!;
        if (!generated.has(target) && !existsSync(join(REPO, target))) missing.push(`${path}: ${target}`);
      }
    }
    assert.deepEqual([...new Set(missing)], []);
  });

  test("every built module the bench and the scripts load by path exists after the build", () => {
    const byPath = /join\(DIST((?:,\s*"[^"]+")+)\)/g;
    const missing: string[] = [];
    let seen = 0;
    for (const path of trackedFiles()) {
      if (!/^(bench|scripts)\/.*\.mjs$/.test(path)) continue;
      for (const match of readFileSync(join(REPO, path), "utf8").matchAll(byPath)) {
        const parts = [...match[1]!.matchAll(/"([^"]+)"/g)].map((part) => part[1]!);
        seen += 1;
        if (!existsSync(join(REPO, "dist", ...parts))) missing.push(`${path}: dist/${parts.join("/")}`);
      }
    }
    assert.ok(seen > 0, "the bench loads built modules by path");
    assert.deepEqual([...new Set(missing)], []);
  });

  test("the contract the code cites is the project's own document", () => {
    const contract = readFileSync(join(REPO, "docs/design/contract.md"), "utf8");
    for (const section of ["## 1. Words", "## 2. Digest formats", "## 6. Refusals and exit codes", "## 7. The CLI"]) {
      assert.ok(contract.includes(section), section);
    }
  });
});
