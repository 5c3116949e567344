/**
 * `oats approve` of a tree retained nowhere in the scope and `oats revoke` of
 * a subject never approved are refused unless --force; what was approved or
 * revoked is printed. Real child processes (dist/cli/bin.js; build first),
 * store snapshots around every refusal.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, test } from "node:test";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, runOats, snapshotTree, tempDir } from "./helpers.js";

const EXEC = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
const OTHER = `oats.tree-exec.v1:sha256-${"1".repeat(64)}`;

type Envelope = { ok: boolean; result?: Record<string, any>; error?: { code: string; details: Record<string, any> } };

function json(args: string[]) {
  const run = runOats(["--json", ...args]);
  return { status: run.status, envelope: JSON.parse(run.stdout) as Envelope, stderr: run.stderr };
}

function scopeWithCapture(): string {
  const scope = tempDir("oats-decide-");
  assert.equal(runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", "demo.y", "--kind", "capture"]).status, 0);
  return scope;
}

describe("approve: a tree retained nowhere in the scope is refused unless --force", () => {
  test("a retained tree is approved, and the output names the revision that was approved", () => {
    const scope = scopeWithCapture();
    const run = json(["--scope", scope, "approve", "capture", "demo.y", EXEC, "--reason", "reviewed"]);
    assert.equal(run.status, 0, run.stderr);
    assert.equal(
      run.envelope.result!["retained"],
      join(scope, ".agents/captures/artifacts/demo.y/tree-exec-v1", EXEC.split(":")[1]!),
    );
    assert.equal(run.envelope.result!["forced"], false);
    const human = runOats(["--scope", scope, "approve", "capture", "demo.y", EXEC, "--reason", "again"]);
    assert.match(
      human.stdout,
      /^approved capture demo\.y oats\.tree-exec\.v1:sha256-\S+\n {2}retained {2}\/.*\n {2}seq 2 by /,
    );
  });

  test(
    "a mistyped key or digest: artifact-not-found (exit 3, reason " +
      "not-retained), naming where the digest is retained; nothing written, " +
      "nothing audited",
    () => {
      const scope = scopeWithCapture();
      for (const [key, integrity, elsewhere] of [
        ["demo.typo", EXEC, [{ kind: "capture", key: "demo.y" }]],
        ["demo.y", OTHER, []],
      ] as const) {
        const before = snapshotTree(scope);
        const run = json(["--scope", scope, "approve", "capture", key, integrity, "--reason", "typo"]);
        assert.equal(run.status, 3, JSON.stringify(run.envelope));
        assert.equal(run.envelope.error!.code, "artifact-not-found");
        assert.equal(run.envelope.error!.details["reason"], "not-retained");
        assert.deepEqual(
          run.envelope.error!.details["elsewhere"].map((row: { kind: string; key: string }) => ({
            kind: row.kind,
            key: row.key,
          })),
          elsewhere,
        );
        assert.deepEqual(snapshotTree(scope), before, "no ledger entry, no audit entry");
      }
      const human = runOats(["--scope", scope, "approve", "capture", "demo.typo", EXEC, "--reason", "typo"]);
      assert.match(human.stderr, /retained nowhere in this scope; the same digest is retained as capture demo\.y/);
      assert.match(human.stderr.split("\n")[1]!, /repeat with --force/);
    },
  );

  test("--force approves ahead of retention, and says so", () => {
    const scope = scopeWithCapture();
    const run = json(["--scope", scope, "approve", "capture", "demo.later", OTHER, "--reason", "ahead", "--force"]);
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.envelope.result!["retained"], null);
    assert.equal(run.envelope.result!["forced"], true);
    assert.equal(run.envelope.result!["entry"]["subject"]["key"], "demo.later");
    const human = runOats([
      "--scope",
      scope,
      "approve",
      "capture",
      "demo.later2",
      OTHER,
      "--reason",
      "ahead",
      "--force",
    ]);
    assert.match(human.stdout, /not retained in this scope: approved ahead of retention \(--force\)/);
  });

  test("a capability retained under its lock's legacy name only counts as retained for its exec digest", () => {
    const scope = tempDir("oats-decide-");
    assert.equal(
      runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK]).status,
      0,
    );
    const run = json(["--scope", scope, "approve", "capability", "demo.hello", EXEC, "--reason", "locked tree"]);
    assert.equal(run.status, 0, JSON.stringify(run.envelope));
    assert.match(run.envelope.result!["retained"], /\/demo\.hello\/sha256-a79c/);
  });

  test("the grammar is checked first: a legacy digest is still invalid-artifact-reference, not not-retained", () => {
    const scope = scopeWithCapture();
    const run = json(["--scope", scope, "approve", "capture", "demo.y", EXEC.split(":")[1]!, "--reason", "legacy"]);
    assert.equal(run.envelope.error!.code, "invalid-artifact-reference");
  });
});

describe("revoke: a subject never approved is refused unless --force", () => {
  test("revoking an approval prints which decision it revokes", () => {
    const scope = scopeWithCapture();
    assert.equal(runOats(["--scope", scope, "approve", "capture", "demo.y", EXEC, "--reason", "ok"]).status, 0);
    const run = json(["--scope", scope, "revoke", "capture", "demo.y", EXEC, "--reason", "pulled"]);
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.envelope.result!["revokes"]["seq"], 1);
    assert.equal(run.envelope.result!["revokes"]["action"], "approve");
    const human = runOats(["--scope", scope, "revoke", "capture", "demo.y", EXEC, "--reason", "again"]);
    assert.match(human.stdout, /\n {2}revokes {3}seq 2 \(revoke by /);
  });

  test("never approved: invalid-input (exit 4, reason never-approved), nothing written; --force records it", () => {
    const scope = scopeWithCapture();
    const before = snapshotTree(scope);
    const run = json(["--scope", scope, "revoke", "capture", "demo.y", EXEC, "--reason", "typo"]);
    assert.equal(run.status, 4, JSON.stringify(run.envelope));
    assert.equal(run.envelope.error!.code, "invalid-input");
    assert.equal(run.envelope.error!.details["reason"], "never-approved");
    assert.deepEqual(snapshotTree(scope), before);
    assert.match(
      runOats(["--scope", scope, "revoke", "capture", "demo.y", EXEC, "--reason", "typo"]).stderr.split("\n")[1]!,
      /repeat with --force/,
    );
    const forced = json(["--scope", scope, "revoke", "capture", "demo.y", EXEC, "--reason", "pre-emptive", "--force"]);
    assert.equal(forced.status, 0, forced.stderr);
    assert.equal(forced.envelope.result!["revokes"], null);
    assert.equal(forced.envelope.result!["forced"], true);
  });
});
