import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { inspectStoreAt } from "../src/retention/store/components.js";
import { listLeases } from "../src/retention/store/lease.js";
import { tempDir } from "./helpers.js";

/**
 * Run `loop` in a real node process (its setup once, then its body as fast
 * as it can for 20 s, with `at` = `argument`) while this process calls `check` 40,000 times; the number of checks that
 * threw, and the first error.
 */
async function raceAgainst(
  loop: { setup: string; body: string },
  argument: string,
  check: () => void,
): Promise<{ failures: number; first: unknown }> {
  const racer = spawn(
    process.execPath,
    [
      "-e",
      `const fs = require("node:fs"); const at = process.argv[1]; ` +
        `${loop.setup}; process.stdout.write("ready\\n"); for (const end = ` +
        `Date.now() + 20000; Date.now() < end; ) { ${loop.body} }`,
      argument,
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  await new Promise<void>((resolve) => racer.stdout.once("data", () => resolve()));
  let failures = 0;
  let first: unknown;
  try {
    for (let round = 0; round < 40_000; round++) {
      try {
        check();
      } catch (error) {
        failures += 1;
        first ??= error;
      }
    }
  } finally {
    racer.kill();
  }
  return { failures, first };
}

/**
 * A publication that fails takes back the store root it created, its
 * .gitignore first (removeCreatedStore), and another creates it again: a
 * reader inspecting the store meanwhile must see the .gitignore whole or
 * missing, never fail on a name that went between two calls. Found by
 * test/lifecycle-gc.test.ts's race of gc and prepare, once in a full run.
 * Here a real process removes and restores the file as fast as it can while
 * this one inspects.
 */
test(
  "Given a store root whose .gitignore another process removes and " +
    "restores, When it is inspected many times meanwhile, Then every " +
    "inspection succeeds",
  async () => {
    const scope = tempDir("oats-gitignore-race-");
    const root = join(scope, ".agents", "leases");
    mkdirSync(root, { recursive: true });
    writeFileSync(join(root, ".gitignore"), "*\n");
    const { failures, first } = await raceAgainst(
      {
        setup: `fs.writeFileSync(at + "/.staged", "*\\n")`,
        body: `fs.unlinkSync(at + "/.gitignore"); fs.linkSync(at + "/.staged", at + "/.gitignore");`,
      },
      root,
      () => void inspectStoreAt(scope, [".agents", "leases"]),
    );
    assert.equal(failures, 0, `first failure: ${String(first)}`);
  },
);

/**
 * A publisher takes back the leases directory it created when its last
 * lease drops, while gc may be listing the leases: the listing must then
 * be empty, not fail. Found by the same race of gc and prepare, in CI.
 */
test(
  "Given a leases directory another process removes and creates again, " +
    "When the leases are listed many times meanwhile, Then every listing succeeds",
  async () => {
    const scope = tempDir("oats-leases-race-");
    mkdirSync(join(scope, ".agents"));
    // As oats does it: the .gitignore is linked into place whole (ensureGitignore) and removed before the directory.
    const { failures, first } = await raceAgainst(
      {
        setup: `fs.writeFileSync(at + "/.agents/staged-gitignore", "*\\n")`,
        body:
          `fs.mkdirSync(at + "/.agents/leases"); fs.linkSync(at + ` +
          `"/.agents/staged-gitignore", at + "/.agents/leases/.gitignore"); ` +
          `fs.unlinkSync(at + "/.agents/leases/.gitignore"); fs.rmdirSync(at + ` +
          `"/.agents/leases");`,
      },
      scope,
      () => assert.deepEqual(listLeases(scope), { live: [], abandoned: [] }),
    );
    assert.equal(failures, 0, `first failure: ${String(first)}`);
  },
);
