/**
 * A retain of a warm source starts no read-ahead workers (each is an
 * isolate: some 14 MiB of RSS). Creating the staged files makes the kernel
 * read inode-table blocks, which the process's block-read count includes;
 * that must not pass for a cold source (file-reader.ts, COLD_BLOCK_READS).
 */
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { digestTree, retainTree } from "../src/index.js";
import { prefetchesStarted } from "../src/retention/digest/prefetch.js";
import { dropPageCache, tempDir } from "./helpers.js";

test("Given a warm source of 5,000 files and cold store metadata, When it is retained, Then the block reads of creating files start no read-ahead workers", async (t) => {
  const source = tempDir("oats-warm-src-");
  for (let d = 0; d < 10; d++) mkdirSync(join(source, `d${d}`));
  for (let i = 0; i < 5000; i++) writeFileSync(join(source, `d${i % 10}`, `f${i}.txt`), "x".repeat(100 + (i % 2000)));
  if (!dropPageCache(t)) return;
  // Warm the source again; the filesystem's inode tables for new files stay cold.
  const digests = await digestTree(source);
  const before = prefetchesStarted();
  const blockReads = process.resourceUsage().fsRead;
  const receipt = await retainTree(tempDir(), { kind: "capture", key: "warm", source });
  const read = process.resourceUsage().fsRead - blockReads;
  if (read === 0) {
    t.skip("the retain caused no block reads on this filesystem, so nothing could be mistaken for a cold source");
    return;
  }
  assert.equal(receipt.status, "retained");
  assert.equal(receipt.integrity.value, digests["oats.tree-exec.v1"]);
  assert.equal(prefetchesStarted(), before, `no workers for a warm source (${read} block reads while creating the copy)`);
});
