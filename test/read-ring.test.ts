import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { appendFileSync, closeSync, openSync, readFileSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, test } from "node:test";
import { digestTree } from "../src/index.js";
import {
  CHUNK_SIZE,
  largeFilesReadByRing,
  largeFilesReadInline,
  readLeavesInOrder,
  type FileConsumer,
} from "../src/engine/file-reader.js";
import { nativeReads, nativeReadsAvailable, setNativeReads } from "../src/engine/native-reads.js";
import { setReadHook } from "../src/engine/read-hook.js";
import { RING_MIN_REST, RING_SLOTS, RING_SLOT_SIZE } from "../src/engine/read-ring.js";
import type { FileEntry } from "../src/engine/index.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { dropFromCache, holdPageCacheLock, patterned, treeOfFiles } from "./helpers.js";
import { refusedAsChanged } from "./support/refusals.js";

holdPageCacheLock();

/**
 * Large files read by a ring's thread while this one hashes (read-ring.ts,
 * native/read-ring.c): the same bytes in the same order as every other
 * read, the same refusals, the thread's lifetime kept to its read, and the
 * ring taken by one read at a time.
 */

afterEach(() => {
  setReadHook(null);
  setNativeReads(true);
});

const addon = nativeReadsAvailable();
const ADDON = fileURLToPath(new URL("../dist/native/oats.node", import.meta.url));
const skip = addon ? false : "the native addon was not built (no C compiler): no ring to test";

const treeOf = (files: Record<string, Buffer>) => treeOfFiles("oats-ring-", files);

/** Every file as the reader hands it over, by path; `onChunk` sees each piece's length first. */
function collector(onChunk: (length: number, path: string) => void | Promise<void> = () => undefined) {
  const seen = new Map<string, Buffer>();
  let current: { path: string; parts: Buffer[] } | null = null;
  const consumer: FileConsumer = {
    start(entry: FileEntry) {
      current = { path: entry.path, parts: [] };
    },
    chunk(data: Buffer) {
      current!.parts.push(Buffer.from(data)); // copied: the slot is reused
      return onChunk(data.length, current!.path);
    },
    end(entry: FileEntry) {
      assert.equal(current!.path, entry.path);
      seen.set(entry.path, Buffer.concat(current!.parts));
      current = null;
    },
    symlink() {},
  };
  return { seen, consumer };
}

// A pure hash with a core free reads a large file's first CHUNK_SIZE with its open, the rest by the ring.
const HEAD = CHUNK_SIZE;

test("Given large files whose rests end before, on and after the ring's " +
  "boundaries, When read warm with a core free, Then the ring reads every " +
  "rest past its minimum, each file's bytes are handed over exactly, and " +
  "the digest is the JavaScript reads' digest", {
  skip,
}, async () => {
  const sizes = [
    HEAD + RING_MIN_REST - 1,
    HEAD + RING_MIN_REST,
    HEAD + RING_MIN_REST + 1,
    HEAD + RING_MIN_REST + RING_SLOTS * RING_SLOT_SIZE * 3 + 17,
    16 * CHUNK_SIZE + 5,
  ];
  const files = Object.fromEntries(sizes.map((size, index) => [`f-${index}.bin`, patterned(size, index)]));
  files["small.txt"] = Buffer.from("small\n");
  const root = await treeOf(files);
  const { seen, consumer } = collector();
  const ringBefore = largeFilesReadByRing();
  const inlineBefore = largeFilesReadInline();
  await readLeavesInOrder((await walkTree(root)).leaves, consumer, { inline: "warm" });
  assert.equal(
    largeFilesReadByRing() - ringBefore,
    sizes.length - 1,
    "every rest of at least RING_MIN_REST went to the ring",
  );
  assert.equal(largeFilesReadInline() - inlineBefore, 1, "the one under it was read inline");
  for (const [path, content] of Object.entries(files)) assert.ok(seen.get(path)?.equals(content), path);

  const byRing = await digestTree(root);
  assert.equal(largeFilesReadByRing() - ringBefore, 2 * (sizes.length - 1), "digestTree alone takes the ring too");
  setNativeReads(false);
  assert.deepEqual(await digestTree(root), byRing);
});

test("Given warm large files and a consumer that reads a cold file of its own " +
  "as the first one starts, When read warm with a core free, Then every " +
  "one still goes to the ring: only the pass's own reads say the cache is cold", {
  skip,
}, async () => {
  const size = HEAD + RING_MIN_REST + 5;
  const files = Object.fromEntries([0, 1, 2].map((index) => [`f-${index}.bin`, patterned(size, index)]));
  const root = await treeOf(files);
  const elsewhere = join(await treeOf({ "cold.bin": patterned(4 << 20, 9) }), "cold.bin");
  dropFromCache(elsewhere);
  const { leaves } = await walkTree(root);
  for (const name of Object.keys(files)) readFileSync(join(root, name));
  const { seen, consumer } = collector();
  let coldRead = -1;
  const started = consumer.start.bind(consumer);
  consumer.start = (entry, info) => {
    if (coldRead < 0) {
      const before = process.resourceUsage().fsRead;
      readFileSync(elsewhere);
      coldRead = process.resourceUsage().fsRead - before;
    }
    return started(entry, info);
  };
  const ringBefore = largeFilesReadByRing();
  await readLeavesInOrder(leaves, consumer, { inline: "warm" });
  assert.ok(coldRead >= 4096, `the consumer's read was cold (${coldRead} block reads)`);
  assert.equal(largeFilesReadByRing() - ringBefore, 3, "a read outside the pass made a warm file look cold");
  for (const [path, content] of Object.entries(files)) assert.ok(seen.get(path)?.equals(content), path);
});

test("Given two cold large files, When read warm with a core free, Then " +
  "neither goes to the ring: the second's head, opened ahead on the thread " +
  "pool, is judged by the process's block reads", {
  skip,
}, async () => {
  const size = HEAD + RING_MIN_REST + 5;
  const files = Object.fromEntries([0, 1].map((index) => [`f-${index}.bin`, patterned(size, index)]));
  const root = await treeOf(files);
  const { leaves } = await walkTree(root);
  for (const name of Object.keys(files)) dropFromCache(join(root, name));
  const { seen, consumer } = collector();
  const ringBefore = largeFilesReadByRing();
  await readLeavesInOrder(leaves, consumer, { inline: "warm" });
  assert.equal(largeFilesReadByRing() - ringBefore, 0, "a cold file went to the ring");
  for (const [path, content] of Object.entries(files)) assert.ok(seen.get(path)?.equals(content), path);
});

test("Given a large file cut short while the ring reads it, When read, Then " +
  "it is refused as a short read and nothing read after the cut is handed over", {
  skip,
}, async () => {
  const root = await treeOf({ "big.bin": patterned(HEAD + 4 * CHUNK_SIZE, 2) });
  // Past the slots the thread may have filled before the cut: the piece it lands in is read after it.
  const cut = HEAD + 20 * RING_SLOT_SIZE + 100;
  let handed = 0;
  const { consumer } = collector((length) => {
    if (handed === HEAD) truncateSync(join(root, "big.bin"), cut);
    handed += length;
  });
  const before = largeFilesReadByRing();
  const error = await refusedAsChanged(
    readLeavesInOrder((await walkTree(root)).leaves, consumer, { inline: "warm" }),
    "big.bin",
  );
  assert.equal(largeFilesReadByRing() - before, 1);
  assert.equal(error.details.changed, "short read");
  assert.equal(handed, HEAD + 20 * RING_SLOT_SIZE, "the whole pieces before the cut, and not the part of the next one");
});

test("Given a large file appended to after the ring's last piece, When read, Then it is refused (size)", {
  skip,
}, async () => {
  const root = await treeOf({ "big.bin": patterned(HEAD + 3 * CHUNK_SIZE, 3), "z.txt": Buffer.from("after\n") });
  setReadHook((path) => {
    if (path === "big.bin") appendFileSync(join(root, "big.bin"), "tail");
  });
  const before = largeFilesReadByRing();
  const error = await refusedAsChanged(digestTree(root), "big.bin");
  assert.equal(largeFilesReadByRing() - before, 1);
  assert.equal(error.details.changed, "size");
});

test("Given a consumer that throws in the middle of a ring's read, Then its " +
  "error comes out unchanged and the next read takes the ring again and " +
  "hands over every byte", {
  skip,
}, async () => {
  const content = patterned(HEAD + 4 * CHUNK_SIZE, 4);
  const root = await treeOf({ "big.bin": content });
  const leaves = (await walkTree(root)).leaves;
  let pieces = 0;
  const failing = collector(() => {
    if (++pieces === 6) throw new Error("disk full");
  });
  await assert.rejects(readLeavesInOrder(leaves, failing.consumer, { inline: "warm" }), /disk full/);
  const before = largeFilesReadByRing();
  const again = collector();
  await readLeavesInOrder(leaves, again.consumer, { inline: "warm" });
  assert.equal(largeFilesReadByRing() - before, 1, "the ring was given back");
  assert.ok(again.seen.get("big.bin")?.equals(content));
});

test("Given two passes on one thread at once, each with a large file and a " +
  "consumer that awaits every piece, Then each hands over its own file's " +
  "bytes, and the ring serves one of them at a time", {
  skip,
}, async () => {
  const a = patterned(HEAD + 3 * CHUNK_SIZE, 5);
  const b = patterned(HEAD + 3 * CHUNK_SIZE + 9, 6);
  const rootA = await treeOf({ "big.bin": a });
  const rootB = await treeOf({ "big.bin": b });
  const yielding = () => new Promise<void>((resolve) => setImmediate(resolve));
  const first = collector(yielding);
  const second = collector(yielding);
  const ringBefore = largeFilesReadByRing();
  const inlineBefore = largeFilesReadInline();
  await Promise.all([
    readLeavesInOrder((await walkTree(rootA)).leaves, first.consumer, { inline: "warm" }),
    readLeavesInOrder((await walkTree(rootB)).leaves, second.consumer, { inline: "warm" }),
  ]);
  assert.ok(first.seen.get("big.bin")?.equals(a));
  assert.ok(second.seen.get("big.bin")?.equals(b));
  assert.equal(largeFilesReadByRing() - ringBefore, 1, "one pass had the ring");
  assert.equal(largeFilesReadInline() - inlineBefore, 1, "the other read inline");
});

test("Given the ring itself, Then a read past its last piece, after a short " +
  "one or after a stop throws rather than waits, a read error comes back " +
  "as -errno, a second read waits for the first's stop, and the caller's " +
  "descriptor may close at once", {
  skip,
}, async () => {
  const native = nativeReads()!;
  const root = await treeOf({ "two.bin": patterned(2 * RING_SLOT_SIZE, 7) });
  const ring = native.createRing(RING_SLOTS, RING_SLOT_SIZE);
  const memory = native.ringMemory(ring);
  assert.equal(memory.length, RING_SLOTS * RING_SLOT_SIZE);

  const fd = openSync(join(root, "two.bin"), "r");
  assert.equal(native.ringRead(ring, fd, 0, 2 * RING_SLOT_SIZE), true);
  closeSync(fd); // the thread reads its own duplicate
  assert.equal(native.ringNext(ring), RING_SLOT_SIZE);
  assert.ok(memory.subarray(0, RING_SLOT_SIZE).equals(patterned(2 * RING_SLOT_SIZE, 7).subarray(0, RING_SLOT_SIZE)));
  assert.equal(native.ringNext(ring), RING_SLOT_SIZE);
  assert.ok(
    memory
      .subarray(RING_SLOT_SIZE, 2 * RING_SLOT_SIZE)
      .equals(patterned(2 * RING_SLOT_SIZE, 7).subarray(RING_SLOT_SIZE)),
  );
  // Everything is read and the thread has ended, but the caller may still hash the last slot.
  await sleep(20);
  const again = openSync(join(root, "two.bin"), "r");
  assert.equal(native.ringRead(ring, again, 0, RING_SLOT_SIZE), false, "no second read before the first is stopped");
  closeSync(again);
  assert.equal(native.ringStop(ring), true);

  const longer = openSync(join(root, "two.bin"), "r");
  assert.equal(native.ringRead(ring, longer, 0, 3 * RING_SLOT_SIZE), true, "the ring takes a new read after a stop");
  assert.equal(native.ringNext(ring), RING_SLOT_SIZE);
  assert.equal(native.ringNext(ring), RING_SLOT_SIZE);
  assert.equal(native.ringNext(ring), 0, "the file ends a piece early: a short piece");
  assert.equal(native.ringStop(ring), true);
  closeSync(longer);

  const directory = openSync(root, "r");
  assert.equal(native.ringRead(ring, directory, 0, RING_SLOT_SIZE), true);
  assert.equal(native.ringNext(ring), -21, "pread of a directory: -EISDIR");
  assert.equal(native.ringStop(ring), true);
  closeSync(directory);

  // A wait that could never end would hang the caller inside the call, where no timer runs: asked in a child, killed
  // if it hangs.
  const child = `
    const native = require(${JSON.stringify(ADDON)});
    const fs = require("node:fs");
    const outcome = (what) => { try { what(); return "returned"; } catch (error) { return error.constructor.name; } };
    const ring = native.createRing(${RING_SLOTS}, ${RING_SLOT_SIZE});
    const fd = fs.openSync(${JSON.stringify(join(root, "two.bin"))}, "r");
    native.ringRead(ring, fd, 0, ${2 * RING_SLOT_SIZE});
    native.ringNext(ring); native.ringNext(ring);
    const pastLast = outcome(() => native.ringNext(ring));
    native.ringStop(ring);
    native.ringRead(ring, fd, 0, ${3 * RING_SLOT_SIZE});
    native.ringNext(ring); native.ringNext(ring); native.ringNext(ring);
    const afterShort = outcome(() => native.ringNext(ring));
    native.ringStop(ring);
    native.ringRead(ring, fd, 0, ${2 * RING_SLOT_SIZE});
    native.ringNext(ring);
    native.ringStop(ring);
    const afterStop = outcome(() => native.ringNext(ring));
    console.log(JSON.stringify({ pastLast, afterShort, afterStop }));
  `;
  const answer = execFileSync(process.execPath, ["-e", child], {
    timeout: 30_000,
    killSignal: "SIGKILL",
    encoding: "utf8",
  });
  assert.deepEqual(JSON.parse(answer), { pastLast: "TypeError", afterShort: "TypeError", afterStop: "TypeError" });

  assert.throws(() => native.createRing(1, RING_SLOT_SIZE), TypeError);
  assert.throws(() => native.createRing(RING_SLOTS, 100), TypeError);
  assert.throws(() => native.ringRead(ring, -1, 0, 1), TypeError);
  assert.throws(() => native.ringRead(ring, 0, 0, 0), TypeError);
});

test("Given worker threads terminated while a ring's thread reads for them, " +
  "Then the process goes on and exits cleanly: the reader never writes " +
  "into memory the worker's teardown freed", {
  skip,
}, async () => {
  const root = await treeOf({ "big.bin": patterned(HEAD + 24 * CHUNK_SIZE, 8) });
  const reader = fileURLToPath(new URL("../dist/engine/file-reader.js", import.meta.url));
  const library = fileURLToPath(new URL("../dist/index.js", import.meta.url));
  // In a child, so that a crash is an exit status here rather than the end of the test runner.
  const child = `
    import { Worker } from "node:worker_threads";
    const body = \`
      (async () => {
        const { parentPort } = await import("node:worker_threads");
        const { digestTree } = await import(${JSON.stringify(library)});
        const { largeFilesReadByRing } = await import(${JSON.stringify(reader)});
        for (;;) { await digestTree(${JSON.stringify(root)}); parentPort.postMessage(largeFilesReadByRing()); }
      })();
    \`;
    let byRing = 0;
    for (let round = 0; round < 6; round++) {
      const worker = new Worker(body, { eval: true });
      byRing += await new Promise((resolve, reject) => {
        worker.once("message", resolve);
        worker.once("error", reject);
      });
      // Somewhere inside its next digest: 25 MiB take some 15-40 ms to hash here.
      await new Promise((resolve) => setTimeout(resolve, 2 + round * 5));
      await worker.terminate();
      globalThis.gc();
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    globalThis.gc();
    console.log(JSON.stringify({ byRing }));
  `;
  const answer = execFileSync(process.execPath, ["--expose-gc", "--input-type=module", "-e", child], {
    timeout: 120_000,
    killSignal: "SIGKILL",
    encoding: "utf8",
  });
  assert.ok(JSON.parse(answer).byRing >= 6, `every worker read through its ring before it was terminated: ${answer}`);
});
