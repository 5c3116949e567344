/**
 * A retain of a warm source starts no read-ahead (native threads, or worker
 * isolates of some 14 MiB of RSS each without the addon). Creating the
 * staged files makes the kernel read inode-table blocks, which the process's
 * block-read count includes; that must not pass for a cold source
 * (file-reader.ts, COLD_BLOCK_READS). So the native small-file calls count
 * the block reads of their own threads, and only those.
 */
import assert from "node:assert/strict";
import { closeSync, constants, mkdirSync, openSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { digestTree, retainTree } from "../src/index.js";
import { SMALL_FILE_SIZE, readLeavesInOrder, type FileConsumer } from "../src/engine/file-reader.js";
import { META_FIELDS, nativeReads } from "../src/engine/native-reads.js";
import { prefetchesStarted } from "../src/engine/prefetch.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { dropFromCache, dropPageCache, holdPageCacheLock, tempDir, addonSkip } from "./helpers.js";

holdPageCacheLock();

function addon() {
  const native = nativeReads();
  assert.ok(native, "the native reads are not built (npm run build compiles native/read-small.c with cc)");
  return native;
}

/** `files` small files over ten directories, none the same size. */
function smallFiles(files: number): string {
  const source = tempDir("oats-warm-src-");
  for (let d = 0; d < 10; d++) mkdirSync(join(source, `d${d}`));
  for (let i = 0; i < files; i++) writeFileSync(join(source, `d${i % 10}`, `f${i}.txt`), "x".repeat(100 + (i % 2000)));
  return source;
}

/** Takes every file and does nothing with it but, once, `aside`. */
function consumerDoing(aside: () => void): FileConsumer {
  let done = false;
  const once = () => {
    if (!done) aside();
    done = true;
  };
  return { whole: once, start: once, chunk() {}, end() {}, symlink() {} };
}

test(
  "Given a warm source of 5,000 files and cold store metadata, When it is " +
    "retained, Then the block reads of creating files start no read-ahead",
  async (t) => {
    const source = smallFiles(5000);
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
    assert.equal(
      prefetchesStarted(),
      before,
      `no read-ahead for a warm source (${read} block reads while creating the copy)`,
    );
  },
);

test("Given a warm source and a consumer that reads a cold file of its own " +
  "after the first file, When the small files are read natively, Then " +
  "those block reads are not the source's and start no read-ahead", { skip: addonSkip() }, async (t) => {
  addon();
  const source = smallFiles(1000);
  const elsewhere = join(tempDir(), "cold.bin");
  writeFileSync(elsewhere, Buffer.alloc(4 << 20, 1));
  if (!dropPageCache(t)) return;
  const { leaves } = await walkTree(source);
  await readLeavesInOrder(
    leaves,
    consumerDoing(() => {}),
  );
  const before = prefetchesStarted();
  const blockReads = process.resourceUsage().fsRead;
  await readLeavesInOrder(
    leaves,
    consumerDoing(() => readFileSync(elsewhere)),
  );
  const read = process.resourceUsage().fsRead - blockReads;
  assert.ok(read >= 4096, `the consumer's read of 4 MiB was cold (${read} block reads)`);
  assert.equal(prefetchesStarted(), before, "the consumer's block reads started the read-ahead");
});

test("Given a warm listing over cold files, When the small files are read " +
  "natively, Then their own block reads start the read-ahead", { skip: addonSkip() }, async (t) => {
  addon();
  const source = smallFiles(1000);
  const warm = await digestTree(source);
  if (!dropPageCache(t)) return;
  const { leaves } = await walkTree(source);
  const before = prefetchesStarted();
  await readLeavesInOrder(
    leaves,
    consumerDoing(() => {}),
  );
  assert.equal(prefetchesStarted(), before + 1, "a cold read started the read-ahead");
  assert.deepEqual(await digestTree(source), warm);
});

test("Given a cold large file before 600 warm small ones, When read natively, " +
  "Then the process's count around the large file's read starts the read-ahead", { skip: addonSkip() }, async () => {
  addon();
  const source = tempDir("oats-cold-large-");
  writeFileSync(join(source, "a-large.bin"), Buffer.alloc(1 << 20, 3));
  for (let i = 0; i < 600; i++) writeFileSync(join(source, `f${String(i).padStart(3, "0")}.txt`), `${i}\n`);
  const { leaves } = await walkTree(source);
  const warm = await digestTree(source);
  dropFromCache(join(source, "a-large.bin"));
  const before = prefetchesStarted();
  await readLeavesInOrder(
    leaves,
    consumerDoing(() => {}),
  );
  assert.equal(prefetchesStarted(), before + 1, "the cold large file started the read-ahead");
  assert.deepEqual(await digestTree(source), warm);
});

test("Given 128 cold files, When read by two threads in one call, Then the " +
  "call counts every block read of the process, the second thread's included", { skip: addonSkip() }, (t) => {
  const native = addon();
  const dir = tempDir("oats-cold-count-");
  const names = Array.from({ length: 128 }, (_, at) => `n${String(at).padStart(3, "0")}`);
  names.forEach((name, at) => {
    writeFileSync(join(dir, name), Buffer.alloc(64 << 10, at + 1));
  });
  const fd = openSync(dir, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    const buffer = Buffer.alloc(16 << 20);
    const meta = new Float64Array(128 * META_FIELDS);
    // Warm this code path and the directory, then drop the files' pages.
    native.readSmallFiles(new Int32Array(128).fill(fd), names, buffer, SMALL_FILE_SIZE, meta, true);
    if (!dropPageCache(t)) return;
    native.readSmallFiles(new Int32Array(1).fill(fd), [names[0]!], buffer, SMALL_FILE_SIZE, meta, false);
    const counted = native.smallReadsBlockReads();
    const processed = process.resourceUsage().fsRead;
    assert.equal(native.readSmallFiles(new Int32Array(128).fill(fd), names, buffer, SMALL_FILE_SIZE, meta, true), 128);
    const own = native.smallReadsBlockReads() - counted;
    const all = process.resourceUsage().fsRead - processed;
    assert.ok(all >= 127 * 128, `the files were cold (${all} block reads)`);
    // Another thread of this process may fault a page of code back in meanwhile (the cache was dropped): a little
    // slack, far under a file.
    assert.ok(own <= all && own >= all - 128, `the call's own count (${own}) is the process's (${all})`);
  } finally {
    closeSync(fd);
  }
});
