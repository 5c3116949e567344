/**
 * The `npm start` demo (scripts/demo.mjs): it exits 0 after showing the typed refusal, and the command lines it
 * prints paste into a shell and work, the approve line's `--reason` included.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO } from "./helpers.js";

const BIN = join(REPO, "dist/cli/bin.js");

describe("npm start", () => {
  test("the demo exits 0 after showing the typed refusal, and its approve line pastes into a shell", (t) => {
    const run = spawnSync(process.execPath, [join(REPO, "scripts/demo.mjs")], {
      cwd: REPO,
      encoding: "utf8",
      env: { ...process.env, OATS_DEMO_KEEP: "1" },
    });
    const kept = run.stdout.match(/^kept \(OATS_DEMO_KEEP=1\): A=(\S+) B=(\S+), the inputs and OATS_STATE_DIR=(\S+)$/m);
    t.after(() => {
      for (const dir of kept ? [kept[1]!, kept[2]!, `${kept[2]!}-inputs`] : [])
        rmSync(dir, { recursive: true, force: true });
    });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /oats: integrity-mismatch: /);
    assert.match(run.stdout, /\(exit 5\)/);
    assert.match(run.stdout, /Everything behaved as expected/);
    assert.ok(kept, "OATS_DEMO_KEEP=1 names what it kept");
    const [, scopeA, scopeB, stateDir] = kept;
    // The demo's first lines set A and B as a shell would.
    assert.match(run.stdout, new RegExp(`^ {2}A=${scopeA}\\b`, "m"));
    assert.match(run.stdout, new RegExp(`^ {2}B=${scopeB}\\b`, "m"));

    const approve = run.stdout.match(/^ {2}\$ (oats --scope .* approve composition .*)$/m)?.[1];
    assert.ok(approve, "the demo prints the approve line it runs");
    assert.match(approve, /--reason 'reviewed in the demo'$/, "the reason is quoted");
    // Pasted into a shell: `oats` is the built CLI, A and B the demo's scopes.
    const shell = spawnSync(
      "sh",
      ["-c", `oats() { "$NODE" "$BIN" "$@"; }\nA=$1\nB=$2\n${approve}`, "sh", scopeA!, scopeB!],
      {
        encoding: "utf8",
        env: { ...process.env, NODE: process.execPath, BIN, OATS_STATE_DIR: stateDir },
      },
    );
    assert.equal(shell.status, 0, shell.stdout + shell.stderr);
    assert.match(shell.stdout, /^approved composition hello-nightly oats\.json\.v1:sha256-/);
    const ledger = spawnSync(process.execPath, [BIN, "--scope", scopeA!, "--json", "approvals"], {
      encoding: "utf8",
      env: { ...process.env, OATS_STATE_DIR: stateDir },
    });
    const approvals = JSON.parse(ledger.stdout).result.approvals as { entry: { reason: string } }[];
    assert.deepEqual(
      approvals.map((a) => a.entry.reason),
      ["reviewed in the demo"],
      "the pasted line recorded the whole reason",
    );
  });
});
