import { statSync } from "node:fs";
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import type { Worker } from "node:worker_threads";
import { OatsError } from "../../core/index.js";
import { digestListing, type TreeDigests } from "../digest/tree.js";
import { listingShape } from "../digest/listing-shape.js";
import { walkTree } from "../digest/walk.js";
import type { TreeFormat } from "../digest/integrity.js";
import { countHeld } from "../digest/busy.js";
import type { DigestAnswer, DigestRequest, FileHashRequest, SerializedError } from "./digest-worker.js";
import { hashFilesHere, type FileHash } from "./file-hashes.js";

/**
 * Walking and hashing independent trees on every core. A job is one
 * directory to walk and digest (the same walkTree + digestListing the
 * calling thread would run); a lane runs jobs one after another, either on
 * the calling thread or in its own worker thread. Verdicts are never taken
 * in a worker: it returns digests (or the walk's or read's error, rebuilt as
 * the same OatsError), and the caller compares them exactly as it compares
 * its own. Results come back in the order of the jobs, whatever order the
 * lanes finished in, so a report or a refusal is the same as a sequential
 * run's.
 *
 * Workers start cold (an isolate, the digest modules, a cold JIT: some tens
 * of milliseconds of CPU), so they are worth it only when there is more than
 * one tree to read; a single tree stays on the calling thread.
 */

export interface DigestJob {
  readonly dir: string;
  readonly formats: readonly TreeFormat[];
  readonly maxDepth?: number;
  /** Told the listing's shape (listing-shape.ts) once the walk is done, before the reads: a kept retain's early hint.
   * */
  readonly onShape?: (shape: string) => void;
}

/** Measures one directory: walk, digest, every byte read and hashed. */
export type Measure = (job: DigestJob) => Promise<TreeDigests>;

export const measureHere: Measure = async (job) => {
  const listing = await walkTree(job.dir, job.maxDepth === undefined ? {} : { maxDepth: job.maxDepth });
  job.onShape?.(listingShape(listing));
  return digestListing(listing, job.formats);
};

let parallelismOverride: number | null = null;

/** Lanes a pool may use: os.availableParallelism(), unless set (tests, the benchmark's one-by-one baseline). */
export function parallelism(): number {
  return parallelismOverride ?? availableParallelism();
}

/** Set the number of lanes (null: os.availableParallelism() again). Not part of the public API. */
export function setParallelism(lanes: number | null): void {
  parallelismOverride = lanes === null ? null : Math.max(1, Math.floor(lanes));
}

/**
 * The worker runs our own files only and needs none of the caller's node
 * options, while inheriting them can stop it from starting: a caller that
 * runs the library from `node --input-type=module -e ...` handed on
 * --input-type, which a worker from a file refuses (ERR_INPUT_TYPE_NOT_ALLOWED:
 * every lane then refused with internal-error). An empty list is also the
 * one explicit list Node never rejects (a filtered one holding a
 * process-wide option such as --expose-gc is ERR_WORKER_INVALID_EXEC_ARGV).
 */
const WORKER_EXEC_ARGV: string[] = [];

/**
 * The worker's script: the one-file bundle `npm run build` makes beside the
 * CLI's (scripts/bundle-cli.mjs: dist/cli/bundle/digest-worker.cjs), or
 * tsc's module when a build has no bundle. Loading tsc's module tree (some
 * twenty files to resolve, read and compile) is on the path of every
 * worker's first job: an empty job was answered after 39-59 ms from tsc's
 * files, 27-31 ms from the bundle, and 22 ms by a worker that loads nothing
 * (docs/design/performance.md, "Worker lanes"). The same sources either way:
 * `npm run build` writes the bundle after tsc's files, so a bundle older
 * than tsc's worker (tsc run alone since) is passed over for tsc's.
 */
let builtScript: URL | null = null;

function builtWorkerScript(): URL {
  if (builtScript === null) {
    const compiled = new URL("./digest-worker.js", import.meta.url);
    const bundled = new URL("../../cli/bundle/digest-worker.cjs", import.meta.url);
    const bundleTime = statSync(fileURLToPath(bundled), { throwIfNoEntry: false })?.mtimeMs;
    const compiledTime = statSync(fileURLToPath(compiled), { throwIfNoEntry: false })?.mtimeMs ?? 0;
    builtScript = bundleTime !== undefined && bundleTime >= compiledTime ? bundled : compiled;
  }
  return builtScript;
}

function startWorker(): Worker {
  // Loaded with the first worker: a command that starts none (a verify of one revision) does not pay its load.
  const { Worker } = createRequire(import.meta.url)("node:worker_threads") as typeof import("node:worker_threads");
  if (!import.meta.url.endsWith(".ts")) return new Worker(builtWorkerScript(), { execArgv: WORKER_EXEC_ARGV });
  // Run from source under tsx (the tests): a worker does not inherit the loader, so it registers it first.
  const source = JSON.stringify(new URL("./digest-worker.ts", import.meta.url).href);
  return new Worker(`import("tsx/esm/api").then((tsx) => tsx.register()).then(() => import(${source}));`, {
    eval: true,
  });
}

function rebuild(error: SerializedError): Error {
  if (error.oats) return new OatsError(error.code, error.message, error.details);
  const rebuilt = new Error(error.message) as Error & { code?: string };
  if (error.code !== undefined) rebuilt.code = error.code;
  if (error.stack !== undefined) rebuilt.stack = error.stack;
  return rebuilt;
}

/**
 * One worker thread. It runs its jobs one at a time, in the order they were
 * sent; a job is sent at once, so the next one is already waiting when the
 * worker finishes one, whatever the calling thread is busy with.
 */
export class DigestWorker {
  private readonly worker: Worker;
  private next = 0;
  private readonly pending = new Map<
    number,
    {
      resolve: (answer: TreeDigests | (FileHash | null)[]) => void;
      reject: (error: unknown) => void;
      onShape?: (shape: string) => void;
    }
  >();
  private failure: Error | null = null;

  constructor() {
    this.worker = startWorker();
    this.worker.on("message", (answer: DigestAnswer) => {
      const pending = this.pending.get(answer.id);
      if (!pending) return;
      // A job's shape comes before its answer, from the same job.
      if ("shape" in answer) return void pending.onShape?.(answer.shape);
      this.pending.delete(answer.id);
      if (!this.held && this.pending.size === 0) this.worker.unref();
      if ("error" in answer) pending.reject(rebuild(answer.error));
      else if ("hashes" in answer) pending.resolve(answer.hashes);
      else pending.resolve(answer.digests as TreeDigests);
    });
    const fail = (error: Error) => {
      this.failure ??= error;
      const waiting = [...this.pending.values()];
      this.pending.clear();
      for (const pending of waiting)
        pending.reject(
          new OatsError(
            "internal-error",
            `digest worker failed: ${error.message}`,
            { reason: "worker-failed" },
            { cause: error },
          ),
        );
    };
    this.worker.on("error", fail);
    this.worker.on("exit", (code) => fail(new Error(`exited with code ${code}`)));
    // Referenced only while it has a job (measure): an idle worker never keeps the process alive.
    this.worker.unref();
  }

  readonly measure: Measure = (job) => {
    if (this.failure)
      return Promise.reject(
        new OatsError("internal-error", `digest worker failed: ${this.failure.message}`, { reason: "worker-failed" }),
      );
    const id = ++this.next;
    return new Promise<TreeDigests>((resolve, reject) => {
      this.pending.set(id, {
        resolve: resolve as (answer: unknown) => void,
        reject,
        ...(job.onShape ? { onShape: job.onShape } : {}),
      });
      this.worker.ref();
      const request: DigestRequest = {
        id,
        dir: job.dir,
        formats: [...job.formats],
        ...(job.maxDepth === undefined ? {} : { maxDepth: job.maxDepth }),
        ...(job.onShape ? { shape: true } : {}),
      };
      this.worker.postMessage(request);
    });
  };

  /** The SHA-256 of each file (file-hashes.ts), read in the worker. */
  hashFiles(files: readonly string[]): Promise<(FileHash | null)[]> {
    if (this.failure)
      return Promise.reject(
        new OatsError("internal-error", `digest worker failed: ${this.failure.message}`, { reason: "worker-failed" }),
      );
    const id = ++this.next;
    return new Promise<(FileHash | null)[]>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (answer: unknown) => void, reject });
      this.worker.ref();
      this.worker.postMessage({ id, files: [...files] } satisfies FileHashRequest);
    });
  }

  private held = false;

  /** Referenced while a caller holds it (acquireWorker), unreferenced in the idle pool. */
  hold(held: boolean): void {
    this.held = held;
    if (held) this.worker.ref();
    else if (this.pending.size === 0) this.worker.unref();
  }

  /** Idle and usable: it may be handed to the next caller. */
  get reusable(): boolean {
    return this.pending.size === 0 && this.failure === null;
  }

  async close(): Promise<void> {
    this.failure ??= new Error("closed");
    // An unref'd worker does not hold the event loop, so a caller awaiting
    // its termination could find the process exiting under it.
    this.worker.ref();
    await this.worker.terminate();
  }
}

/**
 * Idle workers, kept (unref'd: they never keep the process alive) for the
 * next call: a worker's JIT warms up over its first trees, and a cold one
 * spent about 1.6x the CPU of a warm one on the 20k-file tree here. At most
 * parallelism() are kept.
 */
const idle: DigestWorker[] = [];

export { workersHeld } from "../digest/busy.js";

/** An idle worker, or a new one. Hand it back with releaseWorker. */
export function acquireWorker(): DigestWorker {
  const worker = idle.pop() ?? new DigestWorker();
  countHeld(1);
  // Held for as long as a caller has it: a caller awaiting its answer must keep the process alive.
  worker.hold(true);
  return worker;
}

/** Keep a worker for the next call if it is idle and healthy; terminate it otherwise (a refusal left it mid-job). */
export async function releaseWorker(worker: DigestWorker): Promise<void> {
  countHeld(-1);
  if (worker.reusable && idle.length < parallelism()) {
    worker.hold(false);
    idle.push(worker);
  } else await worker.close();
}

/** Files hashed in one worker message, so its answers come while this thread hashes its own share. */
const FILE_BATCH = 256;

/**
 * The SHA-256 of each file, in order: with a second core, one worker hashes
 * batches from the end of the list while this thread hashes from the start,
 * until they meet, so the two halves run beside each other.
 */
export async function hashFilesInLanes(files: readonly string[]): Promise<(FileHash | null)[]> {
  if (files.length < FILE_BATCH * 2 || parallelism() < 2) return hashFilesHere(files);
  const out: (FileHash | null)[] = new Array(files.length);
  let low = 0;
  let high = files.length;
  const worker = acquireWorker();
  try {
    const workerLane = async () => {
      while (high - low > FILE_BATCH) {
        const from = high - FILE_BATCH;
        const to = high;
        high = from;
        const hashes = await worker.hashFiles(files.slice(from, to));
        for (let i = 0; i < hashes.length; i++) out[from + i] = hashes[i]!;
      }
    };
    const running = workerLane();
    while (low < high) {
      const to = Math.min(low + 32, high);
      const from = low;
      low = to;
      for (let i = from; i < to; i++) out[i] = hashFilesHere([files[i]!])[0]!;
      // A turn for the worker's answers, so it is sent its next batch.
      await new Promise((resolve) => setImmediate(resolve));
    }
    await running;
  } finally {
    await releaseWorker(worker);
  }
  return out;
}

/** Trees a worker lane has under way at once while they are quick (settleInLanes). */
const WORKER_DEPTH = 2;
/** A tree answered within this time (sent to answered) is quick. */
const QUICK_TREE_MS = 25;

export type Settled<R> = { readonly ok: true; readonly value: R } | { readonly ok: false; readonly error: unknown };

/**
 * Run `task` over `items` on up to parallelism() lanes: the calling thread
 * (lane 0, which gets no Measure: the caller's own path, with its progress
 * events) and one worker each for the others (a worker's Measure), started only
 * when a lane takes its first item. Every item is run (a failure does not
 * stop the others); the outcomes are in the order of `items`. `onSettled`
 * is called as each finishes, with the number finished so far. With
 * `callerBusy` (the calling thread has its own work meanwhile, e.g. a copy),
 * every lane is a worker, one fewer than parallelism() (at least one).
 */
export async function settleInLanes<T, R>(
  items: readonly T[],
  task: (item: T, measure: Measure | undefined) => Promise<R>,
  options: { onSettled?: (done: number, total: number) => void; callerBusy?: boolean } = {},
): Promise<Settled<R>[]> {
  const { onSettled } = options;
  const results: Settled<R>[] = new Array(items.length);
  const callerBusy = options.callerBusy === true && parallelism() > 1;
  const lanes = Math.min(callerBusy ? parallelism() - 1 : parallelism(), items.length);
  const first = callerBusy ? 1 : 0;
  let taken = 0;
  let done = 0;
  const workers: DigestWorker[] = [];
  const settle = async (item: number, measure: Measure | undefined) => {
    try {
      results[item] = { ok: true, value: await task(items[item]!, measure) };
    } catch (error) {
      results[item] = { ok: false, error };
    }
    onSettled?.(++done, items.length);
  };
  // A tree verified here may settle through promises alone, never giving the
  // event loop a turn, while the workers' answers (and so the next trees sent
  // them) wait for one: without a turn between trees, this lane took all but
  // a worker's first tree of 50 small ones.
  const callerLane = async () => {
    for (let item = taken++; item < items.length; item = taken++) {
      await settle(item, undefined);
      if (workers.length > 0) await new Promise((resolve) => setImmediate(resolve));
    }
  };
  // A worker lane sends its worker the next tree before the last one is
  // answered once trees have shown they are quick, so the worker need not
  // wait for this thread, busy with a tree of its own, to read an answer
  // first (with one at a time, a worker did a quarter of 50 small trees).
  // Until then, and after a slow one, one at a time: a tree queued behind a
  // slow one could be the last, left waiting there while this thread has
  // nothing to take (with two trees, the worker would take both).
  const workerLane = async () => {
    let worker: DigestWorker | null = null;
    let quick = false;
    const underWay = new Set<Promise<void>>();
    for (;;) {
      while (underWay.size >= (quick ? WORKER_DEPTH : 1)) await Promise.race(underWay);
      if (taken >= items.length) break;
      const item = taken++;
      if (worker === null) {
        worker = acquireWorker();
        workers.push(worker);
      }
      const began = Date.now();
      const settled: Promise<void> = settle(item, worker.measure).then(() => {
        quick = Date.now() - began < QUICK_TREE_MS;
        underWay.delete(settled);
      });
      underWay.add(settled);
    }
    await Promise.all(underWay);
  };
  try {
    // Lane 0 (the calling thread) last: the workers' start-up is then under way while it reads.
    const running: Promise<unknown>[] = Array.from({ length: lanes - (first === 0 ? 1 : 0) }, workerLane);
    if (first === 0 && lanes > 0) running.push(callerLane());
    await Promise.all(running);
  } finally {
    await Promise.all(workers.map(releaseWorker));
  }
  return results;
}
