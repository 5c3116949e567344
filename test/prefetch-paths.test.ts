/**
 * The read-ahead gets the listing's paths as packed UTF-8 bytes (in shared
 * memory for the workers, not an array of strings cloned into each; copied
 * by the native threads). It must still open every file of the listing:
 * after it has run over a cold tree, the reader finds it all in the page
 * cache. Both ways: the native threads and the worker threads.
 */
import assert from "node:assert/strict";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { setNativeReads } from "../src/engine/native-reads.js";
import { digestListing } from "../src/retention/digest/tree.js";
import { prefetchMode, setPrefetchMode, startPrefetch } from "../src/engine/prefetch.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { dropPageCache, holdPageCacheLock, tempDir } from "./helpers.js";

holdPageCacheLock();

afterEach(() => setNativeReads(true));

for (const { way, native } of [
  { way: "native threads", native: true },
  { way: "worker threads", native: false },
] as const) {
  test(
    `${way}: Given a cold tree with multi-byte names and symlinks, When the ` +
      `read-ahead has run over its listing, Then reading it does no block reads`,
    async (t) => {
      setNativeReads(native);
      const root = tempDir("oats-prefetch-paths-");
      for (let d = 0; d < 5; d++) mkdirSync(join(root, `dïr-${d}`));
      for (let i = 0; i < 800; i++) {
        writeFileSync(join(root, `dïr-${i % 5}`, `fïle-€-${i}.txt`), `${i}\n${"y".repeat(3000 + i)}`);
        if (i % 100 === 0) symlinkSync(`fïle-€-${i}.txt`, join(root, `dïr-${i % 5}`, `lïnk-${i}`));
      }
      const listing = await walkTree(root);
      const warm = await digestListing(listing, ["oats.tree-exec.v1"]);
      if (!dropPageCache(t)) return;
      const prefetcher = startPrefetch(listing.leaves, 0);
      assert.ok(prefetcher);
      prefetcher.advance(listing.leaves.length);
      // The workers are unreferenced (they never keep a process alive); this wait must.
      const alive = setInterval(() => undefined, 1000);
      try {
        await prefetcher.finished;
      } finally {
        clearInterval(alive);
      }
      const mode = prefetchMode();
      setPrefetchMode("never");
      try {
        const before = process.resourceUsage().fsRead;
        const digests = await digestListing(listing, ["oats.tree-exec.v1"]);
        const blockReads = process.resourceUsage().fsRead - before;
        assert.deepEqual(digests, warm);
        // Cold, these 800 files of 3-4 KiB take at least 8 units each (6,400).
        assert.ok(blockReads < 256, `the workers warmed every file (${blockReads} block reads after them)`);
      } finally {
        setPrefetchMode(mode);
      }
    },
  );
}
