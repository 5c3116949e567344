import assert from "node:assert/strict";
import { closeSync, constants, mkdirSync, openSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, test, type TestContext } from "node:test";
import { digestListing } from "../src/retention/digest/tree.js";
import { nativeReads, setNativeReads } from "../src/engine/native-reads.js";
import {
  directoryWarmingsStarted,
  prefetchesStarted,
  setPrefetchMode,
  warmDirectories,
  type Prefetcher,
} from "../src/engine/prefetch.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { dropPageCache, holdPageCacheLock, tempDir, addonSkip } from "./helpers.js";

holdPageCacheLock();

/**
 * The read-ahead threads in C against a really cold page cache: the
 * directory threads (native/warm-directories.c) list every directory of
 * the tree and nothing outside it or below the depth limit; a cold walk
 * starts them on its own and tells the reads to start theirs at once
 * (walk.ts, file-reader.ts); a warm walk starts nothing. The leaf threads
 * (native/prefetch.c) run through test/prefetch.test.ts and
 * test/prefetch-paths.test.ts, both ways.
 *
 * Dropping the page cache needs root (CI is root); elsewhere these tests
 * skip by name. Another test file may drop the cache while one of these
 * measures, so a measurement that shows block reads is made once more
 * from the start before it counts as a failure.
 */

afterEach(() => {
  setNativeReads(true);
  setPrefetchMode("auto");
});

/** Block reads (512-byte units) this process made while listing each of `directories`. */
function blockReadsListing(directories: readonly string[]): number {
  const before = process.resourceUsage().fsRead;
  for (const directory of directories) readdirSync(directory, { withFileTypes: true });
  return process.resourceUsage().fsRead - before;
}

async function finished(threads: Prefetcher): Promise<void> {
  // The native threads never keep a process alive; this wait must.
  const alive = setInterval(() => undefined, 1000);
  try {
    const outcome = await Promise.race([threads.finished.then(() => "finished"), sleep(20_000).then(() => "hung")]);
    assert.equal(outcome, "finished");
  } finally {
    clearInterval(alive);
  }
}

function openRootFd(root: string): number {
  return openSync(root, constants.O_RDONLY | constants.O_DIRECTORY);
}

/** `fanout` directories per level, `levels` deep, a file in each; returns every directory by depth (1-based). */
function deepTree(root: string, fanout: number, levels: number): string[][] {
  const byDepth: string[][] = [];
  let parents = [root];
  for (let depth = 1; depth <= levels; depth++) {
    const level: string[] = [];
    for (const parent of parents) {
      for (let k = 0; k < fanout; k++) {
        const directory = join(parent, `d${depth}-${k}`);
        mkdirSync(directory);
        writeFileSync(join(directory, "f.txt"), `${directory}\n`);
        level.push(directory);
      }
    }
    byDepth.push(level);
    parents = level;
  }
  return byDepth;
}

/** Drop the cache, run the directory threads over `root` to their end, and count the block reads of listing `check`;
 * twice at most (see above). */
async function afterWarming(
  t: TestContext,
  root: string,
  maxDepth: number,
  check: readonly string[],
): Promise<number | null> {
  let reads = 0;
  for (let attempt = 0; attempt < 2; attempt++) {
    if (!dropPageCache(t)) return null;
    const fd = openRootFd(root);
    let threads: Prefetcher | null;
    try {
      threads = warmDirectories(fd, maxDepth);
    } finally {
      closeSync(fd); // the threads hold their own copy
    }
    assert.ok(threads, "the directory threads started");
    await finished(threads);
    reads = blockReadsListing(check);
    if (reads < 64) return reads;
  }
  return reads;
}

test("Given this build, When the library loads, Then it has the read-ahead " +
  "threads (the warm-up of a cold walk needs them)", { skip: addonSkip() }, () => {
  const native = nativeReads();
  assert.ok(native, "dist/native/oats.node did not load");
  assert.equal(typeof native.warmDirectories, "function");
  assert.equal(typeof native.startPrefetch, "function");
});

test("Given a cold tree of 340 directories, When the directory threads have " +
  "run over it, Then listing every directory reads nothing from the disk", { skip: addonSkip() }, async (t) => {
  const root = tempDir("oats-warm-dirs-");
  const directories = deepTree(root, 4, 4).flat();
  // The measurement means something only if a cold listing does read the disk here.
  if (!dropPageCache(t)) return;
  const cold = blockReadsListing(directories);
  if (cold === 0) {
    t.skip("listing a cold tree made no block reads on this filesystem: nothing to measure");
    return;
  }
  const warmed = await afterWarming(t, root, 256, directories);
  if (warmed === null) return;
  assert.ok(warmed < 64, `every directory was listed ahead (${warmed} block reads after the threads, ${cold} cold)`);
});

test("Given a directory symlinked out of the tree, When the directory threads " +
  "run, Then they list nothing outside it", { skip: addonSkip() }, async (t) => {
  const root = tempDir("oats-warm-beneath-");
  const inside = deepTree(root, 8, 2).flat();
  const outside = tempDir("oats-warm-outside-");
  const outsideDirectories = deepTree(outside, 8, 2).flat();
  symlinkSync(outside, join(root, "escape"));
  const warmed = await afterWarming(t, root, 256, inside);
  if (warmed === null) return;
  assert.ok(warmed < 64, `the tree itself was warmed (${warmed} block reads)`);
  const outsideReads = blockReadsListing(outsideDirectories);
  assert.ok(
    outsideReads >= 8 * 8,
    `the directories behind the symlink were left cold (${outsideReads} block reads listing them)`,
  );
});

test("Given a tree deeper than the limit, When the directory threads run with " +
  "maxDepth 2, Then they list down to depth 2 and no deeper", { skip: addonSkip() }, async (t) => {
  const root = tempDir("oats-warm-depth-");
  const [first, second, third] = deepTree(root, 6, 3) as [string[], string[], string[]];
  // Listing the depth-2 directories reads their blocks, which name the depth-3 ones: those must not be
  // listed themselves.
  const warmed = await afterWarming(t, root, 2, [...first, ...second]);
  if (warmed === null) return;
  assert.ok(warmed < 64, `depths 1 and 2 were listed (${warmed} block reads)`);
  const deeper = blockReadsListing(third);
  assert.ok(
    deeper >= third.length,
    `depth 3 was left alone (${deeper} block reads listing its ${third.length} directories)`,
  );
});

test("Given a cold tree, When it is walked (auto), Then the walk starts the " +
  "directory threads and marks the listing cold, and the reads start their " +
  "read-ahead at once; a warm walk does neither", { skip: addonSkip() }, async (t) => {
  const root = tempDir("oats-warm-walk-");
  deepTree(root, 5, 3); // 155 directories, 155 files
  for (let i = 0; i < 600; i++) writeFileSync(join(root, `d1-${i % 5}`, `extra-${i}.txt`), `${i}\n`);
  // The process's first walk after an earlier test dropped the cache may read the addon and lazily loaded modules
  // from disk (4,112 units here): walked once first.
  await walkTree(root);
  const warm = await walkTree(root);
  assert.equal(warm.cold, false, "a warm walk is not cold");
  if (!dropPageCache(t)) return;
  const warmings = directoryWarmingsStarted();
  const descriptors = readdirSync("/proc/self/fd").length;
  const cold = await walkTree(root);
  assert.equal(cold.cold, true, "the cold walk says so");
  assert.equal(directoryWarmingsStarted(), warmings + 1, "the cold walk started the directory threads");
  assert.equal(
    readdirSync("/proc/self/fd").length,
    descriptors,
    "the threads' copy of the root is closed when the walk returns",
  );
  const again = await walkTree(root);
  assert.equal(again.cold, false);
  assert.equal(directoryWarmingsStarted(), warmings + 1, "the warm walk started none");
  assert.deepEqual(
    again.leaves.map((leaf) => leaf.path),
    cold.leaves.map((leaf) => leaf.path),
  );
  // The reads of a listing marked cold start their read-ahead before the first file, cache or no cache.
  // The files' bytes are still cold: this warms them.
  const digests = await digestListing(again, ["oats.tree-exec.v1"]);
  const prefetches = prefetchesStarted();
  assert.deepEqual(await digestListing(again, ["oats.tree-exec.v1"]), digests);
  assert.equal(prefetchesStarted(), prefetches, "a warm listing starts no read-ahead");
  assert.deepEqual(await digestListing({ ...again, cold: true }, ["oats.tree-exec.v1"]), digests);
  assert.equal(prefetchesStarted(), prefetches + 1, "a cold listing starts it at once");
});

test("Given running directory threads, When stopped at once, Then they end, " +
  "and their handle is refused by the leaf threads' calls", { skip: addonSkip() }, async () => {
  const root = tempDir("oats-warm-stop-");
  deepTree(root, 12, 3); // 1,884 directories
  const native = nativeReads()!;
  const fd = openRootFd(root);
  try {
    const threads = warmDirectories(fd, 256)!;
    threads.stop();
    await finished(threads);
    const handle = native.warmDirectories(fd, 2, 256);
    assert.throws(() => native.advancePrefetch(handle, 1), TypeError);
    native.stopThreads(handle);
  } finally {
    closeSync(fd);
  }
  assert.throws(() => native.warmDirectories(-1, 4, 256), TypeError);
  assert.throws(() => native.warmDirectories(fd, 0, 256), TypeError);
  assert.throws(() => native.warmDirectories(fd, 65, 256), TypeError);
  assert.throws(() => native.stopThreads({} as never), TypeError);
  assert.throws(() => native.threadsRunning(undefined as never), TypeError);
  assert.throws(
    () => native.startPrefetch(Buffer.from("ab"), new Int32Array([2, 1]), 0, 4, 16, 1024),
    TypeError,
    "ends out of order",
  );
  assert.throws(
    () => native.startPrefetch(Buffer.from("ab"), new Int32Array([3]), 0, 4, 16, 1024),
    TypeError,
    "ends past the paths",
  );
});
