import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { retainCapabilityArtifact, retainTree } from "../src/index.js";
import { setFaultHook } from "../src/retention/store/faults.js";
import { fixtureCopy, fixtureLock, snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";
import type { JsonValue } from "../src/core/index.js";

/**
 * A refusal found only after staging began (the tree is not what the lock
 * says) must still leave the scope exactly as it was: the store directories
 * and .gitignore this call created are taken back.
 */

function lockWithIntegrity(integrity: string): JsonValue {
  const lock = fixtureLock() as { capabilities: Record<string, { integrity: string }> };
  lock.capabilities["demo.hello"]!.integrity = integrity;
  return lock;
}

test(
  "Given an empty scope, When the tree differs from the lock's integrity, " + "Then the refusal leaves the scope empty",
  async () => {
    const scope = tempDir();
    await assert.rejects(
      retainCapabilityArtifact(scope, fixtureCopy(), "demo.hello", lockWithIntegrity(`sha256-${"0".repeat(64)}`)),
      refusal("integrity-mismatch", "source-differs"),
    );
    assert.deepEqual(readdirSync(scope), []);
  },
);

test(
  "Given a store that holds another key, When a retain under a new key " +
    "fails, Then only that key's directories are taken back",
  async () => {
    const scope = tempDir();
    await retainTree(scope, { kind: "capture", key: "first", source: fixtureCopy() });
    const before = snapshotTree(scope);
    await assert.rejects(
      retainTree(scope, {
        kind: "capture",
        key: "second",
        source: fixtureCopy(),
        expect: `oats.tree-exec.v1:sha256-${"1".repeat(64)}`,
      }),
      { code: "integrity-mismatch" },
    );
    assert.deepEqual(snapshotTree(scope), before);
    assert.ok(existsSync(join(scope, ".agents/captures/artifacts/.gitignore")));
  },
);

test(
  "Given a scope that already has .agents, When the first capture retain " +
    "fails, Then .agents stays and only what the call created goes",
  async () => {
    const scope = tempDir();
    mkdirSync(join(scope, ".agents"));
    const before = snapshotTree(scope);
    setFaultHook((step) => {
      if (step === "fsync") throw new Error("injected fsync failure");
    });
    try {
      await assert.rejects(
        retainTree(scope, { kind: "capture", key: "nightly", source: fixtureCopy() }),
        (error: unknown) => {
          assert.ok(error instanceof OatsError);
          assert.equal(error.details.step, "fsync");
          return true;
        },
      );
    } finally {
      setFaultHook(null);
    }
    assert.deepEqual(snapshotTree(scope), before);
  },
);
