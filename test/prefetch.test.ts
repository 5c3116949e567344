import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, renameSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, test } from "node:test";
import { digestTree } from "../src/index.js";
import { setNativeReads } from "../src/engine/native-reads.js";
import { prefetchesStarted, setPrefetchMode, startPrefetch } from "../src/engine/prefetch.js";
import { setReadHook } from "../src/engine/read-hook.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { dropPageCache, holdPageCacheLock, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

holdPageCacheLock();

/**
 * The read-ahead (src/engine/prefetch.ts) only warms the page
 * cache: a digest read with it is the digest read without it, the reader's
 * checks still refuse what changed, and a leaf swapped for something
 * hostile after the walk (a FIFO no one writes, a symlink to one) neither
 * hangs it nor is followed. Every test runs both ways: the native threads
 * (native/prefetch.c) and, as without the addon, the worker threads.
 */

afterEach(() => {
  setPrefetchMode("auto");
  setReadHook(null);
  setNativeReads(true);
});

const WAYS = [
  { way: "native threads", native: true },
  { way: "worker threads", native: false },
] as const;

const FILES = 700; // above PREFETCH_MIN_FILES, so "auto" may start workers

function bigTree(): string {
  const root = tempDir("oats-prefetch-");
  for (let d = 0; d < 7; d++) mkdirSync(join(root, `dir-${d}`, "sub"), { recursive: true });
  for (let i = 0; i < FILES; i++) {
    const path = join(root, `dir-${i % 7}`, i % 3 ? "sub" : "", `file-${String(i).padStart(4, "0")}.js`);
    writeFileSync(path, `// ${i}\n${"x".repeat(i * 7)}\n`);
    if (i % 10 === 0) chmodSync(path, 0o755);
  }
  writeFileSync(join(root, "large.bin"), Buffer.alloc(600 << 10, 7)); // read in chunks, past the workers' limit
  symlinkSync("dir-0/file-0000.js", join(root, "link"));
  return root;
}

for (const { way, native } of WAYS) {
  test(`${way}: a digest read with the read-ahead is the digest read without it`, async () => {
    setNativeReads(native);
    const root = bigTree();
    setPrefetchMode("never");
    const without = await digestTree(root);
    const before = prefetchesStarted();
    setPrefetchMode("always");
    const withWorkers = await digestTree(root);
    assert.equal(prefetchesStarted(), before + 1);
    assert.deepEqual(withWorkers, without);
  });

  test(
    `${way}: with the read-ahead running, a file changed between its read ` + `and its check is still refused`,
    async () => {
      setNativeReads(native);
      const root = bigTree();
      await sleep(30); // past the coarse clock tick of the files' creation, so the rewrite moves mtime
      setPrefetchMode("always");
      const target = "dir-3/sub/file-0010.js";
      setReadHook((path) => {
        if (path === target) writeFileSync(join(root, target), "rewritten while read\n");
      });
      await assert.rejects(
        digestTree(root),
        refusal("invalid-artifact", { reason: "changed-while-reading", path: target }),
      );
    },
  );

  test(`${way}: a leaf swapped for a FIFO or a symlink after the walk does not hang the read-ahead`, async (t) => {
    setNativeReads(native);
    const root = bigTree();
    const listing = await walkTree(root);
    const files = listing.leaves.filter((leaf) => leaf.type === "file");
    const fifo = files[5]!.absolute;
    const linkedFifo = files[50]!.absolute;
    const outside = join(tempDir("oats-prefetch-outside-"), "fifo");
    try {
      unlinkSync(fifo);
      execFileSync("mkfifo", [fifo]);
      execFileSync("mkfifo", [outside]);
    } catch (error) {
      t.skip(`mkfifo is not available here: ${String(error)}`);
      return;
    }
    unlinkSync(linkedFifo);
    symlinkSync(outside, linkedFifo);
    // The directory of a later file swapped for a symlink to the FIFO's directory.
    const swappedDir = join(root, "dir-6");
    renameSync(swappedDir, `${swappedDir}.moved`);
    symlinkSync(join(outside, ".."), swappedDir);
    const prefetcher = startPrefetch(listing.leaves, 0);
    assert.ok(prefetcher, "the workers started");
    prefetcher.advance(listing.leaves.length);
    // A blocking open of either FIFO would never return: the workers would never exit.
    const outcome = await Promise.race([prefetcher.finished.then(() => "finished"), sleep(20_000).then(() => "hung")]);
    prefetcher.stop();
    assert.equal(outcome, "finished");
    // The reader, not the workers, is what refuses the swap.
    setPrefetchMode("always");
    await assert.rejects(digestTree(root), refusal("invalid-artifact"));
  });

  test(`${way}: the read-ahead stops when the reader stops early, however far behind they are`, async () => {
    setNativeReads(native);
    // More leaves than the workers' window, so they wait for a reader that never comes.
    const root = tempDir("oats-prefetch-wide-");
    for (let i = 0; i < 3000; i++) writeFileSync(join(root, `f-${String(i).padStart(4, "0")}`), String(i));
    const listing = await walkTree(root);
    const prefetcher = startPrefetch(listing.leaves, 0);
    assert.ok(prefetcher);
    // The reader never advances: the workers wait at the window's edge until told to stop.
    prefetcher.stop();
    const outcome = await Promise.race([prefetcher.finished.then(() => "finished"), sleep(20_000).then(() => "hung")]);
    assert.equal(outcome, "finished");
  });

  test(`${way}: a cold page cache starts the read-ahead on its own (auto), and the digest is unchanged`, async (t) => {
    setNativeReads(native);
    const root = bigTree();
    const warm = await digestTree(root);
    if (!dropPageCache(t)) return;
    const before = prefetchesStarted();
    const cold = await digestTree(root);
    assert.equal(prefetchesStarted(), before + 1, "a cold read started the read-ahead");
    assert.deepEqual(cold, warm);
    // Warm again: no block reads, no workers.
    await digestTree(root);
    assert.equal(prefetchesStarted(), before + 1, "a warm read did not");
  });
}
