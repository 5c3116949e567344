/**
 * gc keeps a source's pinned identity blob while any revision of that source
 * stays, whatever keeps it: a root, the grace period, or damage that gc
 * reports instead of collecting. gc decides this as it walks the store, one
 * revision at a time (src/lifecycle/gc.ts); test/lifecycle-gc.test.ts covers
 * the pinned and the collected revision.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { gc, pinSourceIdentity, retainTree, sourceIdentityKey, type GcReport } from "../src/index.js";
import { tempDir } from "./helpers.js";

const refs = (report: GcReport, list: "collect" | "young" | "damaged") => report[list].map((item) => item.ref).sort();

async function sourceScope(): Promise<{ scope: string; key: string; ref: string; dir: string }> {
  const scope = tempDir("oats-gc-identity-");
  const tree = join(tempDir("oats-gc-identity-tree-"), "soul");
  mkdirSync(tree, { recursive: true });
  writeFileSync(join(tree, "soul.txt"), "a soul\n");
  const identity = "git:https://example.org/org/souls#souls/b";
  const key = sourceIdentityKey(identity);
  const receipt = await retainTree(scope, { kind: "source", key, source: tree });
  pinSourceIdentity(scope, identity);
  return { scope, key, ref: `source:${key}@oats.tree-exec.v1:${receipt.execIntegrity.value}`, dir: receipt.dir };
}

test("a young source revision keeps its identity blob", async () => {
  const { scope, ref } = await sourceScope();
  const report = await gc(scope);
  assert.deepEqual(refs(report, "young"), [ref]);
  assert.deepEqual(refs(report, "collect"), []);
});

test("a damaged source revision keeps its identity blob, unless damaged revisions are collected", async () => {
  const { scope, key, ref, dir } = await sourceScope();
  chmodSync(dir, 0o755);
  writeFileSync(join(dir, "soul.txt"), "another soul\n");
  const report = await gc(scope, { graceMs: 0 });
  assert.deepEqual(refs(report, "damaged"), [ref]);
  assert.deepEqual(refs(report, "collect"), []);
  const included = await gc(scope, { graceMs: 0, includeDamaged: true });
  assert.deepEqual(refs(included, "collect"), [`sha256-${key}`, ref].sort());
});
