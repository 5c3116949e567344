/**
 * The upstream oats v0.21 corpus (fixtures/interop/upstream-oats-0.21): real,
 * unedited install outputs. Every capability of every case retains under its
 * lock row and verifies afterwards, through the CLI, and every package payload
 * digests to its row's integrity. The tests work on a private copy, so that
 * nothing here writes into the repository; a missing corpus fails the file
 * rather than running no case.
 *
 * The corpus's relative symlinks (`current` and `helper-link.mjs` under `docs/` in
 * every tree, as its README describes) are symlinks in the repository too:
 * a checkout that flattened them into files (core.symlinks=false) would
 * change every digest, and the first test says so.
 */
import assert from "node:assert/strict";
import { cpSync, lstatSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { OatsError, parseLock } from "../src/index.js";
import { FIXTURES, runOats, tempDir } from "./helpers.js";

const FIXTURE_CORPUS = join(FIXTURES, "interop/upstream-oats-0.21");
const CASES = readdirSync(FIXTURE_CORPUS, { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name);
/** The files the corpus README describes as relative symlinks, per capability tree. */
const LINKS = ["current", join("docs", "helper-link.mjs")];

const CORPUS = join(tempDir("oats-interop-corpus-"), "corpus");
cpSync(FIXTURE_CORPUS, CORPUS, { recursive: true, verbatimSymlinks: true });

function lockOf(name: string): {
  packages: Record<string, { integrity: string }>;
  capabilities: Record<string, { integrity: string }>;
} {
  return JSON.parse(readFileSync(join(CORPUS, name, "oats-lock.json"), "utf8"));
}

describe("upstream oats v0.21 install outputs", () => {
  test("the corpus is present with both cases, its relative links still links", () => {
    assert.deepEqual([...CASES].sort(), ["git-source", "path-source"]);
    for (const name of CASES) {
      const trees = [
        ...readdirSync(join(CORPUS, name, "installed")).map((id) => join(name, "installed", id)),
        ...readdirSync(join(CORPUS, name, "package", "caps")).map((cap) => join(name, "package", "caps", cap)),
      ];
      for (const tree of trees) {
        for (const link of LINKS) assert.ok(lstatSync(join(CORPUS, tree, link)).isSymbolicLink(), `${tree}/${link}`);
      }
    }
  });

  for (const name of CASES) {
    const lockPath = join(CORPUS, name, "oats-lock.json");
    const lock = lockOf(name);
    for (const [id, row] of Object.entries(lock.capabilities)) {
      test(`${name}: ${id} retains under its lock row's integrity and verifies`, () => {
        const scope = tempDir("oats-interop-");
        const retained = runOats([
          "--scope",
          scope,
          "--json",
          "retain",
          join(CORPUS, name, "installed", id),
          "--id",
          id,
          "--lock",
          lockPath,
        ]);
        assert.equal(retained.status, 0, retained.stdout + retained.stderr);
        const receipt = JSON.parse(retained.stdout).result;
        assert.deepEqual(receipt.integrity, { format: "oats.tree-legacy.v0", value: row.integrity });
        assert.equal(receipt.dir, join(scope, ".agents", "capabilities", "artifacts", id, row.integrity));
        const verified = runOats(["--scope", scope, "--json", "verify", id, "--lock", lockPath]);
        assert.equal(verified.status, 0, verified.stdout + verified.stderr);
        assert.equal(JSON.parse(verified.stdout).result.status, "verified");
      });
    }
    for (const [pkg, row] of Object.entries(lock.packages)) {
      test(`${name}: package ${pkg} digests to its row's integrity`, () => {
        const digest = runOats(["--json", "digest", join(CORPUS, name, "package"), "--format", "oats.tree-legacy.v0"]);
        assert.equal(digest.status, 0, digest.stderr);
        assert.equal(JSON.parse(digest.stdout).result.integrity.value, row.integrity);
      });
    }
  }
});

describe("upstream lock grammar", () => {
  const base = () => ({
    lockfileVersion: 2,
    packages: {
      p: {
        source: "path:/srv/p",
        path: ".",
        version: "1.0.0",
        commit: "local",
        integrity: `sha256-${"a".repeat(64)}`,
        dependencies: [],
      },
    },
    capabilities: {
      "c.x": { version: "1.0.0", package: "p", path: "caps/x", integrity: `sha256-${"b".repeat(64)}`, trusted: false },
    },
  });
  const refused = (mutate: (lock: ReturnType<typeof base>) => void, field: string) => {
    const lock = base();
    mutate(lock);
    assert.throws(
      () => parseLock(lock),
      (error: unknown) => error instanceof OatsError && error.code === "invalid-lock" && error.message.includes(field),
    );
  };

  test(
    "accepts what upstream writes: commit local for a path: source, path " +
      "'.', catalog selectors, http and scp-style git URLs",
    () => {
      parseLock(base());
      for (const source of [
        "catalog:tools",
        "catalog:tools@^2",
        "git:http://host/org/repo@v1",
        "git:https://host/org/repo",
        "git:git@host:org/repo@v1",
      ]) {
        const lock = base();
        lock.packages.p.source = source;
        lock.packages.p.commit = "0123456789abcdef0123456789abcdef01234567";
        parseLock(lock);
      }
    },
  );

  test("refuses commit local for a source that has commits", () => {
    refused((lock) => (lock.packages.p.source = "git:https://host/org/repo@v1"), "packages.p.commit");
  });

  test("refuses an abbreviated commit, a #fragment in a source and a non-canonical path", () => {
    refused((lock) => (lock.packages.p.commit = "0123456"), "packages.p.commit");
    refused((lock) => (lock.packages.p.source = "git:https://host/org/repo#souls/a"), "packages.p.source");
    refused((lock) => (lock.packages.p.path = "./caps"), "packages.p.path");
    refused((lock) => (lock.capabilities["c.x"].path = "caps/./x"), "capabilities.c.x.path");
  });
});
