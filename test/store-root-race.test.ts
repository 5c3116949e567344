import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { inspectStoreAt } from "../src/retention/store/components.js";
import { listLeases } from "../src/retention/store/lease.js";
import { tempDir } from "./helpers.js";

/**
 * A publication that fails takes back the store root it created, its
 * .gitignore first (removeCreatedStore), and another creates it again: a
 * reader inspecting the store meanwhile must see the .gitignore whole or
 * missing, never fail on a name that went between two calls. Found by
 * test/lifecycle-gc.test.ts's race of gc and prepare, once in a full run.
 * Here a real process removes and restores the file as fast as it can while
 * this one inspects.
 */
test("Given a store root whose .gitignore another process removes and restores, When it is inspected many times meanwhile, Then every inspection succeeds", async () => {
  const scope = tempDir("oats-gitignore-race-");
  const root = join(scope, ".agents", "leases");
  mkdirSync(root, { recursive: true });
  writeFileSync(join(root, ".gitignore"), "*\n");
  const toggler = spawn(
    process.execPath,
    [
      "-e",
      `const fs = require("node:fs");
       const path = process.argv[1] + "/.gitignore", staged = process.argv[1] + "/.staged";
       fs.writeFileSync(staged, "*\\n");
       process.stdout.write("ready\\n");
       for (const end = Date.now() + 20000; Date.now() < end; ) { fs.unlinkSync(path); fs.linkSync(staged, path); }`,
      root,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  await new Promise<void>((resolve) => toggler.stdout.once("data", () => resolve()));
  let failures = 0;
  let first: unknown;
  try {
    for (let round = 0; round < 40_000; round++) {
      try {
        inspectStoreAt(scope, [".agents", "leases"]);
      } catch (error) {
        failures += 1;
        first ??= error;
      }
    }
  } finally {
    toggler.kill();
  }
  assert.equal(failures, 0, `first failure: ${String(first)}`);
});

/**
 * A publisher takes back the leases directory it created when its last
 * lease drops, while gc may be listing the leases: the listing must then
 * be empty, not fail. Found by the same race of gc and prepare, in CI.
 */
test("Given a leases directory another process removes and creates again, When the leases are listed many times meanwhile, Then every listing succeeds", async () => {
  const scope = tempDir("oats-leases-race-");
  mkdirSync(join(scope, ".agents"));
  // As oats does it: the .gitignore is linked into place whole (ensureGitignore) and removed before the directory.
  const toggler = spawn(
    process.execPath,
    [
      "-e",
      `const fs = require("node:fs");
       const dir = process.argv[1] + "/.agents/leases", staged = process.argv[1] + "/.agents/staged-gitignore";
       fs.writeFileSync(staged, "*\\n");
       process.stdout.write("ready\\n");
       for (const end = Date.now() + 20000; Date.now() < end; ) {
         fs.mkdirSync(dir); fs.linkSync(staged, dir + "/.gitignore");
         fs.unlinkSync(dir + "/.gitignore"); fs.rmdirSync(dir);
       }`,
      scope,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  await new Promise<void>((resolve) => toggler.stdout.once("data", () => resolve()));
  let failures = 0;
  let first: unknown;
  try {
    for (let round = 0; round < 40_000; round++) {
      try {
        assert.deepEqual(listLeases(scope), { live: [], abandoned: [] });
      } catch (error) {
        failures += 1;
        first ??= error;
      }
    }
  } finally {
    toggler.kill();
  }
  assert.equal(failures, 0, `first failure: ${String(first)}`);
});
