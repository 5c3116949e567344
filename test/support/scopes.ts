/**
 * Scopes that already hold something, for the tests that check a refused
 * request leaves a store exactly as it was: "unchanged" means more on a
 * populated store than on an empty directory.
 *
 * A module of its own rather than ../helpers.ts, which every test imports:
 * this one loads the library (src/retention), helpers.ts loads none of it.
 */
import { retainCapabilityArtifact } from "../../src/retention/index.js";
import { FIXTURE_PAYLOAD, fixtureLock, tempDir } from "../helpers.js";

/** A fresh scope whose store holds the hello fixture as the lock-named capability revision demo.hello. */
export async function populatedScope(): Promise<string> {
  const scope = tempDir("oats-scope-");
  await retainCapabilityArtifact(scope, FIXTURE_PAYLOAD, "demo.hello", fixtureLock());
  return scope;
}
