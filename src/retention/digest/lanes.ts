import { Worker, isMainThread } from "node:worker_threads";
import { parallelism, workersHeld } from "../parallel/cores.js";
import { LeafReader, readLeavesInOrder, type FileConsumer } from "./file-reader.js";
import { prefetchMode, worthPrefetching } from "./prefetch.js";
import { AT, BY_CALLER, CHUNK, CLAIMS, COLD, COUNT_MASK, DONE, FREE, LEAF_WORDS, META_WORDS, PROGRESS, SIZES, SLOTS, SLOT_BYTES, STATE, STOP, TAKEN, UNCLAIMED, type LaneJob } from "./lane-protocol.js";
import type { DirectoryEntry, LeafEntry } from "./walk.js";

/**
 * Reading a tree of many small files on two cores. One SHA-256 stream
 * cannot be split, but its cost is not the hash: a 2 KiB file costs five
 * system calls (open, fstat, read, fstat, close) and their wrappers, some
 * 7-9 us, against about 1 us of hashing. So the calling thread hashes every
 * byte, in order, and a worker thread (lane-worker.ts) makes the system
 * calls for part of the files: the leaves go in chunks of CHUNK, and each
 * chunk is claimed by whichever side gets to it first (a compare-and-swap
 * per chunk, lane-protocol.ts). The worker claims ahead of the calling
 * thread and reads into a slot of shared memory; the calling thread reads
 * the chunks it claims itself and hashes the worker's from their slots when
 * their turn comes. Neither waits for the other unless the worker is in the
 * middle of the very chunk that is due. A worker that is slow to start
 * simply claims nothing until it is up.
 *
 * The checks are the serial read's, made by readSmallFile on either side;
 * the worker takes no verdict: at a leaf it cannot read cleanly it stops,
 * and the calling thread reads the rest of that chunk (and of the tree)
 * itself, so a refusal is the one the serial read gives, for the same
 * first leaf in order. The calling thread never waits for the worker: at a
 * chunk the worker has not finished it takes what the worker has published
 * and reads the rest itself, so a worker that is descheduled, slow to
 * start or dead costs at most the leaf it was reading.
 */

/** Below this many files the reads take less than a worker's start (20-40 ms of CPU on the other core): measured in docs/design/performance.md. */
export const LANE_MIN_FILES = 1024;

export type LaneMode = "auto" | "never" | "always";
let mode: LaneMode = "auto";

/** "never" and "always" are for tests and the benchmark's serial baseline; "auto" decides by size. */
export function setLaneMode(next: LaneMode): void {
  mode = next;
}

const stats = { passes: 0, fromWorker: 0, takeovers: 0 };

/** Counters for tests: passes read in two lanes, leaves the worker read, chunks the calling thread finished for the worker. */
export function laneStats(): { passes: number; fromWorker: number; takeovers: number } {
  return { ...stats };
}

class LaneWorker {
  readonly worker: Worker;
  dead = false;
  /** Settles once the worker has loaded its modules (or died). */
  readonly ready: Promise<void>;
  constructor() {
    this.worker = startWorker();
    this.ready = new Promise((resolve) => {
      this.worker.once("message", () => resolve());
      this.worker.once("exit", () => resolve());
    });
    // Never keeps the process alive: the calling thread always has its own work pending while a pass runs.
    this.worker.unref();
    this.worker.on("error", () => undefined);
    this.worker.on("exit", () => {
      this.dead = true;
      if (idle === this) idle = null;
    });
  }
}

function startWorker(): Worker {
  if (!import.meta.url.endsWith(".ts")) return new Worker(new URL("./lane-worker.js", import.meta.url));
  // Run from source under tsx (the tests): a worker does not inherit the loader, so it registers it first.
  const source = JSON.stringify(new URL("./lane-worker.ts", import.meta.url).href);
  return new Worker(`import("tsx/esm/api").then((tsx) => tsx.register()).then(() => import(${source}));`, { eval: true });
}

/** One worker kept for the next pass: a warm one reads about twice as fast as a new one in its first tree. */
let idle: LaneWorker | null = null;
/** The worker of the pass under way, for killLaneWorker(). */
let active: LaneWorker | null = null;

let testHook: LaneJob["testHook"] = null;

/** Tests: the worker appends a byte to the file at this path right after it read it (a change between its read and its check). */
export function setLaneTestHook(hook: LaneJob["testHook"]): void {
  testHook = hook;
}

/**
 * Start the worker of the next pass now, if a pass could take two lanes:
 * a caller about to walk a tree that may be large (digestTree) lets the
 * worker load (some 35 ms here) while the walk runs. It does not keep the
 * process alive.
 */
export function prepareLanes(): void {
  if (mode === "never" || !isMainThread || (mode === "auto" && !coreFree())) return;
  idle ??= new LaneWorker();
}

/** prepareLanes(), then wait until the worker is up (tests: under tsx a new worker takes long to load). */
export async function lanesReady(): Promise<void> {
  prepareLanes();
  const lane = idle;
  if (!lane) return;
  lane.worker.ref();
  try {
    await lane.ready;
  } finally {
    lane.worker.unref();
  }
}

/** Terminates the worker of the pass under way (tests: a worker that dies mid-tree). */
export function killLaneWorker(): Promise<number> | undefined {
  return active?.worker.terminate();
}

/**
 * Whether another core may be free for the worker: more than one, and no
 * pool worker held (the other cores read trees already). The machine's
 * load is not asked: measured at load averages of 12 to 14 on 2 cores, two
 * lanes still took 0.80x (20k files) and 0.92x (node_modules) of one in
 * process, and the same in a fresh process (docs/design/performance.md).
 */
function coreFree(): boolean {
  return parallelism() >= 2 && workersHeld() === 0;
}

function wanted(leaves: readonly LeafEntry[]): boolean {
  if (mode === "never" || !isMainThread) return false;
  if (mode === "always") return true;
  if (!coreFree()) return false;
  let files = 0;
  for (let i = 0; i < leaves.length && files < LANE_MIN_FILES; i++) if (leaves[i]!.type === "file") files += 1;
  return files >= LANE_MIN_FILES;
}

/**
 * Feed `leaves` to `consumer` in order, exactly as readLeavesInOrder does,
 * on two lanes when the tree is large enough and another core is free.
 */
export async function readLeaves(leaves: readonly LeafEntry[], consumer: FileConsumer): Promise<void> {
  if (!consumer.whole || leaves.length === 0 || !wanted(leaves)) return readLeavesInOrder(leaves, consumer);
  const whole = consumer.whole.bind(consumer);
  const records = consumer.records?.bind(consumer);
  const chunks = Math.ceil(leaves.length / CHUNK);
  const control = new SharedArrayBuffer(4 * (CLAIMS + chunks));
  const meta = new SharedArrayBuffer(4 * META_WORDS * SLOTS);
  const dataBuffer = new SharedArrayBuffer(SLOT_BYTES * SLOTS);
  const claims = new Int32Array(control);
  const words = new Int32Array(meta);
  const data = Buffer.from(dataBuffer);
  const lane = idle ?? new LaneWorker();
  idle = null;
  active = lane;
  stats.passes += 1;
  lane.worker.postMessage(job(leaves, control, meta, dataBuffer, records !== undefined, prefetchMode() === "auto" && worthPrefetching(leaves, 0)));
  const reader = new LeafReader(leaves, consumer, { watchCold: false });
  try {
    for (let chunk = 0; chunk < chunks; chunk++) {
      Atomics.store(claims, AT, chunk);
      Atomics.notify(claims, AT);
      if (claims[COLD] !== 0) reader.coldAt(chunk * CHUNK);
      const from = chunk * CHUNK;
      const to = Math.min(leaves.length, from + CHUNK);
      if (Atomics.compareExchange(claims, CLAIMS + chunk, UNCLAIMED, BY_CALLER) === UNCLAIMED) {
        await reader.range(from, to);
        continue;
      }
      const base = (chunk % SLOTS) * META_WORDS;
      const count = takePublished(words, base);
      if (count > 0) await reader.at(from);
      const slot = (chunk % SLOTS) * SLOT_BYTES;
      if (records && count > 0) {
        // One call for the chunk's records: what the worker framed is what whole() and symlink() would have fed.
        let files = 0;
        let contentBytes = 0;
        for (let k = 0; k < count; k++) {
          if (leaves[from + k]!.type !== "file") continue;
          files += 1;
          contentBytes += words[base + SIZES + LEAF_WORDS * k]!;
        }
        records(data.subarray(slot, slot + words[base + SIZES + LEAF_WORDS * (count - 1) + 2]!), count, files, contentBytes);
      } else {
        let offset = slot;
        for (let k = 0; k < count; k++) {
          const leaf = leaves[from + k]!;
          let pending: void | Promise<void>;
          if (leaf.type === "symlink") pending = consumer.symlink(leaf);
          else {
            const size = words[base + SIZES + LEAF_WORDS * k]!;
            const fileMode = words[base + SIZES + LEAF_WORDS * k + 1]!;
            pending = whole(leaf, { mode: fileMode & 0o7777, size }, data.subarray(offset, offset + size));
            offset += size;
          }
          if (pending) await pending;
        }
      }
      stats.fromWorker += count;
      if (count < to - from) stats.takeovers += 1;
      // What the worker left: a file it could not read cleanly (read again here, and refused here), or had not read yet.
      await reader.range(from + count, to);
      Atomics.store(words, base + STATE, FREE);
      Atomics.notify(words, base + STATE);
    }
  } finally {
    Atomics.store(claims, STOP, 1);
    Atomics.notify(claims, AT);
    for (let slot = 0; slot < SLOTS; slot++) Atomics.notify(words, slot * META_WORDS + STATE);
    active = null;
    // Its next job waits in its queue until this one has stopped, within one file.
    if (!lane.dead && idle === null) idle = lane;
    else if (!lane.dead) void lane.worker.terminate();
    await reader.close();
  }
}

/**
 * The leaves of a worker's chunk that it has read: all of them once it is
 * done, else what it has published so far, and the rest is taken from it
 * (it stops at its next leaf). Never waits, so a worker that is slow, not
 * scheduled or dead costs at most the leaf it was reading, which the
 * calling thread then reads again.
 */
function takePublished(words: Int32Array, base: number): number {
  for (;;) {
    const progress = Atomics.load(words, base + PROGRESS);
    if (progress & DONE) return progress & COUNT_MASK;
    if (Atomics.compareExchange(words, base + PROGRESS, progress, TAKEN | progress) === progress) return progress;
  }
}

/** The leaves as flat arrays: each directory once, by index, with the dev and ino the walk saw. */
function job(leaves: readonly LeafEntry[], control: SharedArrayBuffer, meta: SharedArrayBuffer, data: SharedArrayBuffer, records: boolean, watchCold: boolean): LaneJob {
  let root: DirectoryEntry = leaves[0]!.parent;
  while (root.parent) root = root.parent;
  const index = new Map<DirectoryEntry, number>([[root, 0]]);
  const dirParents: number[] = [];
  const dirNames: string[] = [];
  const dirDevs: number[] = [];
  const dirInos: number[] = [];
  const indexOf = (directory: DirectoryEntry): number => {
    let at = index.get(directory);
    if (at === undefined) {
      const parent = indexOf(directory.parent!);
      at = dirNames.length + 1;
      dirParents.push(parent);
      dirNames.push(directory.name);
      dirDevs.push(directory.dev);
      dirInos.push(directory.ino);
      index.set(directory, at);
    }
    return at;
  };
  const leafDirs = new Int32Array(leaves.length);
  const leafNames: string[] = new Array(leaves.length);
  const leafTargets: string[] | null = records ? new Array(leaves.length) : null;
  for (let i = 0; i < leaves.length; i++) {
    const leaf = leaves[i]!;
    leafNames[i] = leaf.name;
    const at = indexOf(leaf.parent);
    leafDirs[i] = leaf.type === "file" ? at : -at - 1;
    if (leafTargets) leafTargets[i] = leaf.type === "symlink" ? leaf.target : "";
  }
  return {
    control,
    meta,
    data,
    root: root.absolute,
    rootDev: root.dev,
    rootIno: root.ino,
    dirParents: Int32Array.from(dirParents),
    dirNames,
    dirDevs: Float64Array.from(dirDevs),
    dirInos: Float64Array.from(dirInos),
    leafDirs,
    leafNames,
    records,
    leafTargets,
    watchCold,
    testHook,
  };
}

