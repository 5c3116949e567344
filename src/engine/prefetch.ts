import { constants } from "node:fs";
import { createRequire } from "node:module";
import type { Worker } from "node:worker_threads";
import { nativeReads, type NativeAddon, type NativeThreads } from "./native-reads.js";
import type { LeafEntry } from "./entries.js";

/**
 * Read-ahead for a cold page cache. Reading many small files from a cold
 * disk is one synchronous open and read at a time, each waiting for the
 * disk, while the disk could serve many at once: here one thread reads the
 * 3,790 files of a cold node_modules in 456 ms, eight in 188 ms and sixteen
 * in 159 ms (docs/design/performance.md, "A cold page cache: read-ahead").
 * Threads a little ahead of the reader open each file and ask the kernel
 * to read it into the page cache, so the reader finds it there.
 *
 * With the addon (native-reads.ts) these are NATIVE_THREADS threads of
 * native/prefetch.c, each an open, a readahead() that does not wait for the
 * disk, and a close per file: they cost microseconds to start and almost
 * no CPU. Without it, PREFETCH_WORKERS worker threads read the files into
 * a buffer they discard; each costs tens of milliseconds of CPU to start
 * and a core to run, so fewer of them pay.
 *
 * Either way only the page cache is warmed. Every byte a digest or a
 * verdict rests on is still read, checked and hashed by the reader
 * (file-reader.ts), through the race-free directory descriptors. The
 * read-ahead opens by path, with O_NOFOLLOW and O_NONBLOCK, and reads at
 * most PREFETCH_LIMIT bytes of each: a swapped directory can at worst make
 * it warm the cache with a file the caller could read anyway.
 */

/** Trees with fewer small files than this are read without a worker (starting one costs tens of milliseconds of CPU).
 * */
export const PREFETCH_MIN_FILES = 512;
/** Two requests in flight besides the reader's measured fastest here (cold 20k files: 1 worker 3.5 s, 2 2.3 s, 3 2.5
 * s, none 4.5 s). */
const PREFETCH_WORKERS = 2;
/** Requests the native threads keep in flight; the disk here served sixteen best (see above). */
const NATIVE_THREADS = 16;
/** How many leaves the workers may be ahead of the reader. */
const WINDOW = 1024;
/** Bytes read of each file; the head of a large file, the whole of a small one. */
const PREFETCH_LIMIT = 256 << 10;

const FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/*
 * CommonJS, evaluated: no module file to find next to the compiled one.
 * Slots: 0 the reader's position, 1 stop. The paths are UTF-8 bytes in one
 * SharedArrayBuffer (leaf i is bytes[ends[i - 1], ends[i]), empty for a
 * symlink), opened as Buffer paths: an array of 20,000 strings in
 * workerData was cloned into each worker's heap, some 6 MiB of RSS per
 * worker (docs/design/performance.md, "A cold page cache: read-ahead").
 */
const SOURCE = `
const { workerData } = require("node:worker_threads");
const { openSync, readSync, closeSync } = require("node:fs");
const { bytes, ends, shared, flags, limit, window, stride, from } = workerData;
const view = new Int32Array(shared);
const names = Buffer.from(bytes);
const end = new Int32Array(ends);
const buffer = Buffer.allocUnsafe(limit);
for (let i = from; i < end.length; i += stride) {
  const start = i === 0 ? 0 : end[i - 1];
  if (start === end[i]) continue;
  const path = names.subarray(start, end[i]);
  for (;;) {
    if (Atomics.load(view, 1) !== 0) process.exit(0);
    const at = Atomics.load(view, 0);
    if (i <= at + window) break;
    Atomics.wait(view, 0, at, 50);
  }
  let fd;
  try { fd = openSync(path, flags); } catch { continue; }
  try { readSync(fd, buffer, 0, limit, 0); } catch {} finally { closeSync(fd); }
}
`;

export interface Prefetcher {
  /** The reader has reached leaf `index`. */
  advance(index: number): void;
  /** Ends the workers early (the reader is done or failed). */
  stop(): void;
  /** Settles when every worker has exited, whether it finished or was stopped. */
  readonly finished: Promise<void>;
}

/**
 * "auto": start the workers when the reader sees the page cache miss
 * (file-reader.ts); "never" and "always" are for tests, which compare the
 * two and exercise the workers on a warm cache.
 */
export type PrefetchMode = "auto" | "never" | "always";
let mode: PrefetchMode = "auto";
let started = 0;
let directoryWarmings = 0;

export function setPrefetchMode(next: PrefetchMode): void {
  mode = next;
}

export function prefetchMode(): PrefetchMode {
  return mode;
}

/** How many directory warmings this process started (tests: a cold walk starts one, a warm one does not). */
export function directoryWarmingsStarted(): number {
  return directoryWarmings;
}

/** How many prefetchers this process started (tests check that a cold read starts one). */
export function prefetchesStarted(): number {
  return started;
}

/** Whether the leaves from `from` on hold enough files to be worth a worker. */
export function worthPrefetching(leaves: readonly LeafEntry[], from: number): boolean {
  let files = 0;
  for (let i = from; i < leaves.length && files < PREFETCH_MIN_FILES; i++) if (leaves[i]!.type === "file") files += 1;
  return files >= PREFETCH_MIN_FILES;
}

/** The absolute paths of the files among `leaves`, packed as the workers read them (SOURCE). */
function packPaths(leaves: readonly LeafEntry[]): { bytes: SharedArrayBuffer; ends: SharedArrayBuffer } {
  // Two passes over the strings rather than a Buffer per path: 20,000 small objects would outlive the young generation.
  let total = 0;
  for (const leaf of leaves) if (leaf.type === "file") total += Buffer.byteLength(leaf.absolute);
  const bytes = new SharedArrayBuffer(total);
  const ends = new SharedArrayBuffer(4 * leaves.length);
  const into = Buffer.from(bytes);
  const end = new Int32Array(ends);
  let at = 0;
  for (let i = 0; i < leaves.length; i++) {
    const leaf = leaves[i]!;
    if (leaf.type === "file") at += into.write(leaf.absolute, at);
    end[i] = at;
  }
  return { bytes, ends };
}

/** Read-ahead for `leaves` from index `from` on: the native threads where the addon loaded, else workers. */
export function startPrefetch(leaves: readonly LeafEntry[], from: number): Prefetcher | null {
  const native = nativeReads();
  const prefetcher = native ? startThreads(native, leaves, from) : startWorkers(leaves, from);
  if (prefetcher) started += 1;
  return prefetcher;
}

/**
 * Native threads as a Prefetcher. stop() returns once they have ended (a
 * file or directory at most later), so no descriptor of theirs outlives
 * the walk or the reads; `finished` is made only when asked for (its timer
 * keeps the process alive until they end).
 */
function nativeHandle(native: NativeAddon, handle: NativeThreads, advance: (index: number) => void): Prefetcher {
  let finished: Promise<void> | null = null;
  return {
    advance,
    stop() {
      native.stopThreads(handle, true);
    },
    get finished() {
      finished ??= new Promise<void>((resolve) => {
        const look = (): void => void (native.threadsRunning(handle) === 0 ? resolve() : setTimeout(look, 2));
        look();
      });
      return finished;
    },
  };
}

function startThreads(native: NativeAddon, leaves: readonly LeafEntry[], from: number): Prefetcher | null {
  const { bytes, ends } = packPaths(leaves);
  let handle: NativeThreads;
  try {
    handle = native.startPrefetch(
      Buffer.from(bytes),
      new Int32Array(ends),
      from,
      NATIVE_THREADS,
      WINDOW,
      PREFETCH_LIMIT,
    );
  } catch {
    return null;
  }
  return nativeHandle(native, handle, (index) => native.advancePrefetch(handle, index));
}

/**
 * The walk's read-ahead (src/retention/digest/walk.ts starts it when its first listings read
 * the disk): threads list every directory below the open root at once, so
 * the walk, one directory at a time, finds them in the cache (cold, the
 * 624 directories of a node_modules took the walk about 100 ms). Native
 * only: a worker would cost more to start than it saves. `advance` does
 * nothing; stop it when the walk ends.
 */
export function warmDirectories(rootFd: number, maxDepth: number): Prefetcher | null {
  const native = nativeReads();
  if (native === null) return null;
  let handle: NativeThreads;
  try {
    handle = native.warmDirectories(rootFd, NATIVE_THREADS, maxDepth);
  } catch {
    return null;
  }
  directoryWarmings += 1;
  return nativeHandle(native, handle, () => undefined);
}

function startWorkers(leaves: readonly LeafEntry[], from: number): Prefetcher | null {
  // Loaded only here: the native threads, and a warm read, need no worker_threads.
  const { Worker: WorkerThread } = createRequire(import.meta.url)(
    "node:worker_threads",
  ) as typeof import("node:worker_threads");
  const { bytes, ends } = packPaths(leaves);
  const shared = new SharedArrayBuffer(8);
  const view = new Int32Array(shared);
  Atomics.store(view, 0, from);
  let workers: Worker[] | null = [];
  try {
    for (let k = 0; k < PREFETCH_WORKERS; k++) {
      workers.push(
        new WorkerThread(SOURCE, {
          eval: true,
          workerData: {
            bytes,
            ends,
            shared,
            flags: FLAGS,
            limit: PREFETCH_LIMIT,
            window: WINDOW,
            stride: PREFETCH_WORKERS,
            from: from + k,
          },
          stdout: false,
          stderr: false,
        }),
      );
    }
  } catch {
    for (const worker of workers) void worker.terminate().catch(() => undefined);
    return null;
  }
  const exits = workers.map((worker) => {
    worker.unref();
    // A failure of a worker only loses the read-ahead.
    worker.on("error", () => undefined);
    return new Promise<void>((resolve) => worker.once("exit", () => resolve()));
  });
  return {
    finished: Promise.all(exits).then(() => undefined),
    advance(index: number) {
      Atomics.store(view, 0, index);
      Atomics.notify(view, 0);
    },
    stop() {
      if (!workers) return;
      Atomics.store(view, 1, 1);
      Atomics.notify(view, 0);
      for (const worker of workers) void worker.terminate().catch(() => undefined);
      workers = null;
    },
  };
}
