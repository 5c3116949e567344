import assert from "node:assert/strict";
import { appendFileSync, readFileSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { digestTree } from "../src/index.js";
import {
  CHUNK_SIZE,
  INLINE_CHUNK_SIZE,
  SMALL_FILE_SIZE,
  largeFilesReadByRing,
  largeFilesReadInline,
  readLeavesInOrder,
  type FileConsumer,
} from "../src/engine/file-reader.js";
import { nativeReadsAvailable } from "../src/engine/native-reads.js";
import { setReadHook } from "../src/engine/read-hook.js";
import type { FileEntry } from "../src/engine/index.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { acquireWorker, releaseWorker, workersHeld } from "../src/retention/parallel/pool.js";
import { dropFromCache, holdPageCacheLock, patterned, treeOfFiles } from "./helpers.js";
import { refusedAsChanged } from "./support/refusals.js";

holdPageCacheLock();

/**
 * Large files read inline (file-reader.ts, ReadOptions.inline): the same
 * bytes in the same order as the overlapped read, the same refusals, and
 * chosen for a pure hash while a worker lane runs beside the caller, or
 * while the page cache holds the file.
 */

afterEach(() => setReadHook(null));

const treeOf = (files: Record<string, Buffer>) => treeOfFiles("oats-inline-", files);

const SIZES = [
  0,
  1,
  SMALL_FILE_SIZE,
  SMALL_FILE_SIZE + 1,
  2 * INLINE_CHUNK_SIZE,
  2 * INLINE_CHUNK_SIZE + 1,
  CHUNK_SIZE + 5,
  3 * CHUNK_SIZE + 7,
];

/** Every file as the reader hands it over, by path: the bytes of whole(), or of start, chunks and end. */
async function consumed(root: string, inline: boolean): Promise<Map<string, Buffer>> {
  const seen = new Map<string, Buffer>();
  let current: { path: string; parts: Buffer[] } | null = null;
  const consumer: FileConsumer = {
    start(entry: FileEntry) {
      current = { path: entry.path, parts: [] };
    },
    chunk(data: Buffer) {
      current!.parts.push(Buffer.from(data)); // copied: the buffer is reused
    },
    end(entry: FileEntry) {
      assert.equal(current!.path, entry.path);
      seen.set(entry.path, Buffer.concat(current!.parts));
      current = null;
    },
    symlink() {},
  };
  await readLeavesInOrder((await walkTree(root)).leaves, consumer, { inline });
  return seen;
}

test(
  "Given files around every size boundary, When read inline and " +
    "overlapped, Then both hand over exactly each file's bytes, in order",
  async () => {
    const files = Object.fromEntries(
      SIZES.map((size, index) => [`f-${String(index).padStart(2, "0")}.bin`, patterned(size, index)]),
    );
    const root = await treeOf(files);
    const before = largeFilesReadInline();
    const inline = await consumed(root, true);
    const large = SIZES.filter((size) => size > SMALL_FILE_SIZE).length;
    assert.equal(largeFilesReadInline() - before, large, "every file past the small size took the inline path");
    const overlapped = await consumed(root, false);
    assert.equal(largeFilesReadInline() - before, large, "the overlapped read never reads inline");
    for (const [path, content] of Object.entries(files)) {
      assert.ok(inline.get(path)?.equals(content), `inline ${path}`);
      assert.ok(overlapped.get(path)?.equals(content), `overlapped ${path}`);
    }
  },
);

test(
  "Given a large file appended to after its last piece was read inline, " + "When read, Then it is refused (size)",
  async () => {
    const root = await treeOf({ "big.bin": patterned(3 * CHUNK_SIZE, 1), "z.txt": Buffer.from("after\n") });
    setReadHook((path) => {
      if (path === "big.bin") appendFileSync(join(root, "big.bin"), "tail");
    });
    const consumer = { start() {}, chunk() {}, end() {}, symlink() {} };
    const error = await refusedAsChanged(
      readLeavesInOrder((await walkTree(root)).leaves, consumer, { inline: true }),
      "big.bin",
    );
    assert.equal(error.details.changed, "size");
  },
);

test(
  "Given a large file cut short while it is read inline, When read, Then " +
    "it is refused as a short read and nothing past the cut is handed over",
  async () => {
    const root = await treeOf({ "big.bin": patterned(3 * CHUNK_SIZE, 2) });
    let handed = 0;
    const consumer = {
      start() {},
      chunk(data: Buffer) {
        handed += data.length;
        if (handed === INLINE_CHUNK_SIZE) truncateSync(join(root, "big.bin"), CHUNK_SIZE);
      },
      end() {},
      symlink() {},
    };
    const error = await refusedAsChanged(
      readLeavesInOrder((await walkTree(root)).leaves, consumer, { inline: true }),
      "big.bin",
    );
    assert.equal(error.details.changed, "short read");
    assert.equal(handed, CHUNK_SIZE, "the pieces before the cut, and no more");
  },
);

/** Drop a file's pages from the page cache (written back first), so its next read waits on the disk. */
test(
  "Given a tree digested alone (a core free), Then its large files are " +
    "read beside the hash (by a ring's thread, else inline) while the page " +
    "cache holds them and overlapped once their reads wait on the disk; " +
    "beside a worker lane, inline; the digest is the same every way",
  async () => {
    const root = await treeOf({ "a.bin": patterned(4 * CHUNK_SIZE + 3, 3), "b.txt": Buffer.from("small\n") });
    // With the addon a warm large file alone goes to the ring (read-ring.test.ts); without it, inline.
    const ring = nativeReadsAvailable() ? 1 : 0;
    const start = largeFilesReadInline();
    const startRing = largeFilesReadByRing();
    const warm = await digestTree(root);
    assert.equal(
      largeFilesReadInline(),
      start + 1 - ring,
      "alone, warm: not overlapped (the copy out of the cache is a core's work)",
    );
    assert.equal(largeFilesReadByRing(), startRing + ring, "alone, warm: by the ring when there is one");
    dropFromCache(join(root, "a.bin"));
    const cold = await digestTree(root);
    assert.equal(
      largeFilesReadInline(),
      start + 1 - ring,
      "alone, cold: overlapped, the pool thread waits on the disk while this one hashes",
    );
    assert.equal(largeFilesReadByRing(), startRing + ring, "alone, cold: not the ring either");
    const worker = acquireWorker();
    let beside;
    try {
      assert.equal(workersHeld() > 0, true);
      dropFromCache(join(root, "a.bin"));
      beside = await digestTree(root);
      assert.equal(largeFilesReadInline(), start + 2 - ring, "beside a lane: inline, cold or not");
      await digestTree(root);
      assert.equal(
        largeFilesReadInline(),
        start + 3 - ring,
        "beside a lane, warm: inline, never the ring's second core",
      );
      assert.equal(largeFilesReadByRing(), startRing + ring);
    } finally {
      await releaseWorker(worker);
    }
    assert.deepEqual(cold, warm);
    assert.deepEqual(beside, warm);
    await digestTree(root);
    assert.equal(
      largeFilesReadInline() + largeFilesReadByRing(),
      start + startRing + 4,
      "released and warm: beside the hash again",
    );
    assert.equal(largeFilesReadByRing(), startRing + 2 * ring);
    assert.ok(readFileSync(join(root, "b.txt")).equals(Buffer.from("small\n")));
  },
);

test(
  "Given a large file read inline with a slow consumer, When a timer is " +
    "due, Then it runs before the file is done: the event loop is still " +
    "yielded to",
  async () => {
    const root = await treeOf({ "big.bin": patterned(32 * CHUNK_SIZE, 4) });
    let pieces = 0;
    let piecesWhenTimerRan = -1;
    const consumer = {
      start() {},
      chunk() {
        pieces += 1;
        const until = performance.now() + 1; // a hash that takes a millisecond a piece
        while (performance.now() < until);
      },
      end() {},
      symlink() {},
    };
    const leaves = (await walkTree(root)).leaves;
    setTimeout(() => (piecesWhenTimerRan = pieces), 0);
    await readLeavesInOrder(leaves, consumer, { inline: true });
    assert.equal(pieces, (32 * CHUNK_SIZE) / INLINE_CHUNK_SIZE);
    assert.ok(
      piecesWhenTimerRan > 0 && piecesWhenTimerRan < pieces,
      `the timer ran after ${piecesWhenTimerRan} of ${pieces} pieces`,
    );
  },
);

test(
  "Given a large file read inline, When it is hashed, Then the event loop " +
    "turns at least once every 4 pieces (1 MiB), so a worker lane's answer " +
    "is read promptly",
  async () => {
    const root = await treeOf({ "big.bin": patterned(64 * CHUNK_SIZE, 5) });
    let pieces = 0;
    const consumer = { start() {}, chunk: () => void (pieces += 1), end() {}, symlink() {} };
    const leaves = (await walkTree(root)).leaves;
    // The piece count at every turn of the event loop while the file is read.
    const turns: number[] = [];
    let reading = true;
    const tick = () => {
      turns.push(pieces);
      if (reading) setImmediate(tick);
    };
    setImmediate(tick);
    await readLeavesInOrder(leaves, consumer, { inline: true });
    reading = false;
    assert.equal(pieces, (64 * CHUNK_SIZE) / INLINE_CHUNK_SIZE);
    const read = turns.filter((count) => count > 0 && count < pieces);
    // The first turn comes after the head (read with the open) and 4 pieces more.
    let widest = (read[0] ?? pieces) - 1;
    for (let i = 1; i < read.length; i++) widest = Math.max(widest, read[i]! - read[i - 1]!);
    assert.ok(
      widest <= 4,
      `at most 4 pieces between turns, found ${widest} (${read.length} turns over ${pieces} pieces)`,
    );
  },
);
