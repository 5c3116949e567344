import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { digestTree } from "../src/index.js";
import { CHUNK_SIZE, chunkBuffersAllocated, readLeavesInOrder, type FileConsumer } from "../src/engine/file-reader.js";
import type { FileEntry } from "../src/engine/index.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { patterned, tempDir } from "./helpers.js";

/**
 * The reader's 1 MiB buffers are reused across files and passes
 * (file-reader.ts, "chunkPool"): a fresh one costs a page fault per page.
 * Reuse must never hand a consumer bytes a later read has overwritten: a
 * buffer goes back only when its reads have settled and its consumer call
 * has finished, however slowly the consumer answers.
 */

/** Large files (heads, double-buffered rests, prefetched heads) between small ones, each with its own bytes. */
function mixedTree(seed: number): string {
  const root = tempDir("oats-pool-");
  mkdirSync(join(root, "d"));
  for (let i = 0; i < 6; i++) {
    writeFileSync(
      join(root, `d/large-${i}`),
      patterned(CHUNK_SIZE + 1000 * (i + 1) + (i % 2) * 2 * CHUNK_SIZE, seed + i),
    );
    // The first small file after a large one is prefetched into a pooled buffer, the second read into the
    // small-file buffer.
    writeFileSync(join(root, `d/large-${i}-small-a`), patterned(3000 + i, seed + 100 + i));
    writeFileSync(join(root, `d/large-${i}-small-b`), patterned(5000 + i, seed + 200 + i));
  }
  return root;
}

const sha = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

test(
  "Given trees of large files digested one after another When the second " +
    "is read Then no new chunk buffer is allocated (the first tree's are reused)",
  async () => {
    const first = mixedTree(1);
    const second = mixedTree(2);
    await digestTree(first);
    const afterFirst = chunkBuffersAllocated();
    const again = await digestTree(second);
    assert.equal(
      chunkBuffersAllocated(),
      afterFirst,
      "the second tree's 6 large files took their buffers from the pool",
    );
    assert.notEqual(again["oats.tree-exec.v1"], (await digestTree(first))["oats.tree-exec.v1"]);
  },
);

/** A consumer that hashes each file's pieces only after a timer has run: a buffer given back early is refilled by
 * then. */
function lateConsumer(seen: Map<string, ReturnType<typeof createHash>>): FileConsumer {
  let current: ReturnType<typeof createHash> | null = null;
  const later = () => new Promise<void>((resolve) => setTimeout(resolve, 2));
  return {
    async start(entry: FileEntry) {
      await later();
      current = createHash("sha256");
      seen.set(entry.path, current);
    },
    async chunk(data: Buffer) {
      const hash = current!;
      await later();
      hash.update(data);
    },
    async end() {
      await later();
      current = null;
    },
    symlink() {},
  };
}

test(
  "Given two reads at once on one thread, each with a consumer that " +
    "answers late When both trees are read Then every file's bytes are " +
    "exactly the file's, though both draw on one pool",
  async () => {
    const roots = [mixedTree(3), mixedTree(4)];
    for (let round = 0; round < 2; round++) {
      const seen = roots.map(() => new Map<string, ReturnType<typeof createHash>>());
      await Promise.all(
        roots.map(async (root, i) => readLeavesInOrder((await walkTree(root)).leaves, lateConsumer(seen[i]!))),
      );
      roots.forEach((root, i) => {
        assert.equal(seen[i]!.size, 18);
        for (const [path, hash] of seen[i]!)
          assert.equal(hash.digest("hex"), sha(readFileSync(join(root, path))), `${root} ${path}, round ${round}`);
      });
    }
  },
);
