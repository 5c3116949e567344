/**
 * Scopes for the tests that check what a request leaves of a store: one
 * that already holds something ("unchanged" means more on a populated store
 * than on an empty directory), and fsck that must change nothing.
 *
 * A module of its own rather than ../helpers.ts, which every test imports:
 * this one loads the library (src/retention, src/scope), helpers.ts none of it.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { retainCapabilityArtifact } from "../../src/retention/index.js";
import { fsckScope, type ScopeFsckReport } from "../../src/scope/index.js";
import { FIXTURE_PAYLOAD, fixtureLock, snapshotTree, tempDir } from "../helpers.js";

/** A path under the scope's .agents directory. */
export const agents = (scope: string, ...parts: string[]) => join(scope, ".agents", ...parts);

/** A fresh scope whose store holds the hello fixture as the lock-named capability revision demo.hello. */
export async function populatedScope(): Promise<string> {
  const scope = tempDir("oats-scope-");
  await retainCapabilityArtifact(scope, FIXTURE_PAYLOAD, "demo.hello", fixtureLock());
  return scope;
}

/** fsck of the whole scope, which must leave it byte-for-byte as it was. */
export async function fsckUnchanged(scope: string): Promise<ScopeFsckReport> {
  const before = snapshotTree(scope);
  const report = await fsckScope(scope);
  assert.deepEqual(snapshotTree(scope), before, "fsck changes nothing");
  return report;
}
