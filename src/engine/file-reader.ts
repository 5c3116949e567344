import { closeSync, fstatSync, openSync, type Stats } from "node:fs";
import { OatsError } from "../core/index.js";
import { afterRead } from "./read-hook.js";
import { PassBlockReads } from "./block-reads.js";
import { DirectoryCursor } from "./directory-cursor.js";
import { nativeReads } from "./native-reads.js";
import { consumeNativeRun } from "./native-runs.js";
import {
  OPEN_FLAGS,
  SMALL_FILE_SIZE,
  closeAsync,
  consumeRest,
  consumeRestInline,
  difference,
  finishAsync,
  giveChunk,
  openHeadAsync,
  openSmallOrHeadSync,
  readFullySync,
  takeChunk,
  type OpenedFile,
} from "./opened-file.js";
import { RING_MIN_REST, consumeRestByRing } from "./read-ring.js";
import { prefetchMode, startPrefetch, worthPrefetching, type Prefetcher } from "./prefetch.js";
import { DIRECTORY_FDS } from "./directories.js";
import type { FileEntry, LeafEntry, SymlinkEntry } from "./entries.js";
import { changed, changedOrUnreadable } from "./refusals.js";

export {
  CHUNK_SIZE,
  INLINE_CHUNK_SIZE,
  SMALL_FILE_SIZE,
  chunkBuffersAllocated,
  largeFilesReadInline,
} from "./opened-file.js";
export { largeFilesReadByRing } from "./read-ring.js";

/**
 * Streams the leaves of a tree to a consumer in a fixed order.
 *
 * Large files are read asynchronously in CHUNK_SIZE pieces with double
 * buffering (opened-file.ts, which reads one file of the general path),
 * and the head of the file after a large one is fetched while the large
 * one is consumed: the read of what comes next overlaps the hashing of
 * what is here. Small files (the common case in a package tree) are read
 * with synchronous calls, in runs, into one reused buffer: for a 2 KiB file
 * the thread-pool round trips of five async calls cost 100-470 us on the
 * benchmark machine against some 20 us synchronously and 2 us of hashing,
 * and reading ahead in worker threads lost too (docs/design/performance.md,
 * "Small files", has the figures). The event loop is yielded to every few milliseconds so a
 * library caller stays responsive.
 *
 * Memory stays bounded whatever the file sizes: two chunk buffers, one
 * prefetched head, one small-file buffer and, with the native reads, one
 * chunk their batches land in and one 512 KiB ring (read-ring.ts), all
 * kept for the next file and the next pass on this thread (a fresh
 * buffer's page faults cost more than the reads that fill it on some
 * machines).
 *
 * Each file is opened inside its directory's descriptor (DirectoryCursor: no
 * directory above it can be swapped for a symlink), without following a
 * symlink at its own name (and non-blocking, so a FIFO swapped in after the
 * walk cannot hang us) and fstat'd before and after it is read; a change of
 * inode, size, mtime or ctime, or a short read, is a refusal. Bytes are
 * never reported half-old, half-new.
 */

const YIELD_EVERY_MS = 8;
/**
 * Block reads (getrusage's ru_inblock, 512-byte units) within one run of
 * RUN_LENGTH leaves that mark a cold page cache and start the read-ahead
 * workers (prefetch.ts). A warm read does none, whatever the load of the
 * machine; a cold run of small files at least a page (8 units) per file,
 * about 1,200 for a run of 2 KiB files. A retain's copy pass creates files
 * as it reads, and ext4 then reads inode-table blocks of the staging
 * directory, up to 256 units at once (inode_readahead_blks), with the
 * source warm: counted in the process's total, at 16 they started two
 * workers (some 28 MiB of RSS) in a warm retain of 20,000 files, and now
 * and then one at 512 in a warm retain of 5,000. So the count is of the
 * reads' own threads where the native calls read the small files
 * (readSmallFiles), and the process's only around large files and where
 * there are no native calls (block-reads.ts).
 */
const COLD_BLOCK_READS = 512;
/** Small files are consumed in synchronous runs of at most this many leaves; the clock is read between runs. */
const RUN_LENGTH = 128;

export interface FileInfo {
  /** Permission bits (mode & 0o7777). */
  readonly mode: number;
  readonly size: number;
}

export interface FileConsumer {
  /**
   * A file read whole in one piece (every small file): the same as start,
   * chunk (when not empty) and end in a row, in one call. Optional; without
   * it those three are called.
   */
  whole?(entry: FileEntry, info: FileInfo, data: Buffer): void | Promise<void>;
  start(entry: FileEntry, info: FileInfo): void | Promise<void>;
  /** The buffer is only valid until the returned promise settles. */
  chunk(data: Buffer): void | Promise<void>;
  end(entry: FileEntry, info: FileInfo): void | Promise<void>;
  /** Symlinks arrive in their place in the order, between files. */
  symlink(entry: SymlinkEntry): void | Promise<void>;
}

export interface ReadOptions {
  /**
   * Read the rest of a large file on this thread, synchronously, in
   * INLINE_CHUNK_SIZE pieces, each consumed while it is still in this
   * core's cache; the default reads chunk n+1 on the thread pool while chunk
   * n is consumed. Overlapping wins when it lets a second core read while
   * this one hashes; when every core already hashes a tree of its own (a
   * worker lane, or this thread while one runs), the pool thread's copy only
   * competes with them for a core, and reading inline costs less CPU (some
   * 10% in a probe, 16% in fsck's lanes: docs/design/performance.md, "Large
   * files").
   * Every byte is read and checked the same way in both.
   *
   * `"warm"`: inline while the reads come from the page cache, overlapped
   * once they wait on a disk. A copy out of the page cache is work for a
   * core, and on a machine whose two vCPUs share a physical core it slows
   * the hash beside it more than it saves (docs/design/performance.md, "Large
   * files"); a read that waits on the
   * disk costs no core, so overlapping it with the hash still wins.
   * With the addon, the rest of such a warm file (at least RING_MIN_REST) is
   * copied by a ring's thread in small pieces while this one hashes
   * (read-ring.ts), which beats both.
   */
  readonly inline?: boolean | "warm";
  /** The walk found the page cache cold (TreeListing.cold): start the read-ahead before the first read rather than
   * after a cold run. */
  readonly cold?: boolean;
}

/** A consumer that takes a small file in one call (FileConsumer.whole). */
type WholeConsumer = FileConsumer & Required<Pick<FileConsumer, "whole">>;

/** The small-file buffer of a finished pass, for the next one on this thread (64 more pages not to fault in). */
let spareScratch: Buffer | null = null;

/**
 * The fast path: leaves from..to-1 that are symlinks or small files, read
 * whole into `scratch` and handed to consumer.whole(), in a plain synchronous
 * loop. Kept small on purpose: V8 optimises a small loop within its first
 * few hundred iterations, while a large async function runs unoptimised for
 * much of a twenty-thousand-file tree waiting for its compilation. Stops
 * before a file larger than `scratch` (the general path takes it, opening it
 * again), or after a leaf whose consumer call returned a promise.
 */
function consumeSmallRun(
  leaves: readonly LeafEntry[],
  from: number,
  to: number,
  consumer: WholeConsumer,
  scratch: Buffer,
  cursor: DirectoryCursor,
  batch: Buffer | null,
  split: boolean,
): { next: number; pending?: Promise<void> } {
  const native = batch === null ? null : nativeReads();
  for (let index = from; index < to; index++) {
    const leaf = leaves[index]!;
    if (leaf.type === "symlink") {
      const pending = consumer.symlink(leaf);
      if (pending) return { next: index + 1, pending };
      continue;
    }
    if (native !== null && DIRECTORY_FDS) {
      const run = consumeNativeRun(native, cursor, leaves, index, to, consumer, batch!, SMALL_FILE_SIZE, split);
      if (run.pending || run.next === index) return run;
      index = run.next - 1;
      continue;
    }
    let fd: number;
    try {
      fd = openSync(cursor.pathOf(leaf), OPEN_FLAGS);
    } catch (error) {
      throw error instanceof OatsError ? error : changedOrUnreadable(error, leaf.path);
    }
    let before: Stats;
    let after: Stats | undefined;
    let got = 0;
    try {
      before = fstatSync(fd);
      if (before.isFile() && before.size <= scratch.length) {
        got = readFullySync(fd, scratch, before.size);
        afterRead(leaf.path);
        after = fstatSync(fd);
      }
    } catch (error) {
      closeSync(fd);
      throw changedOrUnreadable(error, leaf.path);
    }
    try {
      closeSync(fd);
    } catch (error) {
      throw changedOrUnreadable(error, leaf.path);
    }
    if (!before.isFile()) throw changed(leaf.path, "no longer a regular file");
    if (after === undefined) return { next: index };
    if (got !== before.size) throw changed(leaf.path, "short read");
    const what = difference(before, after);
    if (what) throw changed(leaf.path, what);
    const pending = consumer.whole(leaf, { mode: before.mode & 0o7777, size: got }, scratch.subarray(0, got));
    if (pending) return { next: index + 1, pending };
  }
  return { next: to };
}

/**
 * Feed `leaves` to `consumer` in order; what the consumer throws (a failed
 * write into staging, say) propagates unchanged, and a failure of the reads
 * themselves is a refusal naming the path.
 *
 * The phases of a pass (ReadPass, one method each): one step per run of
 * small files and symlinks, read whole in a plain synchronous loop
 * (readSmallRun, consumeSmallRun), or per leaf a run leaves over: a
 * symlink of a consumer without whole(), handed over where it stands, or a
 * file for the general path (readFile: a large file, the one whose head was
 * opened ahead, any file of a consumer without whole()). Before each step
 * the read-ahead learns where the reader is (ReadAhead) and the event loop
 * gets a turn when one is due; after the last, the buffers are kept for the
 * next pass (keepBuffers), and whatever the outcome the pass is closed.
 */
export async function readLeavesInOrder(
  leaves: readonly LeafEntry[],
  consumer: FileConsumer,
  options: ReadOptions = {},
): Promise<void> {
  // Date.now, not performance.now: the global `performance` loads perf_hooks on first use, a few ms of every start.
  let lastTurn = Date.now();
  const pass = new ReadPass(leaves, consumer, options);
  try {
    for (let index = 0; index < leaves.length; index++) {
      pass.readAhead.reached(index);
      if (Date.now() - lastTurn > YIELD_EVERY_MS) {
        await new Promise((resolve) => setImmediate(resolve));
        lastTurn = Date.now();
      }
      pass.takeScratch();
      if (pass.whole) {
        const run = pass.readSmallRun(index);
        if (run.pending) await run.pending;
        if (run.next > index) {
          index = run.next - 1;
          continue;
        }
        // leaves[index] is a large file (or the one whose head was opened ahead): the general path below.
      }
      const leaf = leaves[index]!;
      if (leaf.type === "symlink") {
        const pending = consumer.symlink(leaf);
        if (pending) await pending;
        continue;
      }
      await pass.readFile(index, leaf);
    }
    pass.keepBuffers();
  } finally {
    const closing = pass.close();
    if (closing) await closing;
  }
}

/**
 * One pass's state: how it reads (ReadOptions), its block-read counts, its
 * directory cursor, its read-ahead, the head of the next file opened ahead
 * and its buffers; and the phases of the general path, each a method.
 */
class ReadPass {
  /** The consumer, when it takes a small file in one call: the runs of small files are read for it. */
  readonly whole: WholeConsumer | null;
  readonly readAhead: ReadAhead;
  /** ReadOptions.inline === true: every large file's rest is read on this thread. */
  private readonly inline: boolean;
  /** ReadOptions.inline === "warm": a core to spare and the cache warm, a second core copies while this one hashes
   * (read-ring.ts). */
  private readonly byRing: boolean;
  private readonly cold: boolean;
  /** Block reads of this pass's own reads (block-reads.ts), for the cold watch and the warm decisions. */
  private readonly blockReads: PassBlockReads;
  private readonly cursor: DirectoryCursor;
  /** The head of the file after a large one, opened and read on the thread pool while the large one is consumed. */
  private openedAhead: { index: number; file: Promise<OpenedFile> } | null = null;
  /** The small-file buffer, taken at the first leaf (takeScratch). */
  private scratch: Buffer | null = null;
  /** The chunk the native reads' batches land in, taken at the first run where the addon loaded. */
  private batch: Buffer | null = null;

  constructor(
    private readonly leaves: readonly LeafEntry[],
    private readonly consumer: FileConsumer,
    options: ReadOptions,
  ) {
    this.inline = options.inline === true;
    this.byRing = options.inline === "warm";
    this.cold = options.cold === true;
    this.whole = consumer.whole ? (consumer as WholeConsumer) : null;
    this.blockReads = new PassBlockReads(DIRECTORY_FDS ? nativeReads() : null);
    this.cursor = new DirectoryCursor();
    this.readAhead = new ReadAhead(leaves, this.blockReads, this.cold);
  }

  /** The small-file buffer a finished pass on this thread left, or a new one; once, at the first leaf. */
  takeScratch(): void {
    if (this.scratch === null) {
      this.scratch = spareScratch ?? Buffer.allocUnsafe(SMALL_FILE_SIZE);
      spareScratch = null;
    }
  }

  /**
   * A run of small files and symlinks from leaves[index], at most
   * RUN_LENGTH long and up to the file whose head was opened ahead, handed
   * to consumer.whole() (consumeSmallRun). `next` is where it stopped:
   * index itself when leaves[index] is for the general path.
   */
  readSmallRun(index: number): { next: number; pending?: Promise<void> } {
    const to = Math.min(this.leaves.length, index + RUN_LENGTH, this.openedAhead ? this.openedAhead.index : Infinity);
    if (this.batch === null && nativeReads() !== null) this.batch = takeChunk();
    // A second thread for the native reads only where a core would otherwise idle (as for the overlapped large reads).
    return consumeSmallRun(this.leaves, index, to, this.whole!, this.scratch!, this.cursor, this.batch, !this.inline);
  }

  /**
   * The general path, one file: opened (or its head opened ahead taken),
   * its head and rest handed over (handOver), checked and closed. Where its
   * rest is read overlapped, the next file's head is opened meanwhile. The
   * process's block reads around it count for the cold watch.
   */
  async readFile(index: number, leaf: FileEntry): Promise<void> {
    const generalPathRead = this.blockReads.beforeGeneralPathRead(this.readAhead.watching);
    const openedAhead = this.openedAhead?.index === index;
    const file = openedAhead ? await this.takeOpenedAhead() : this.open(leaf);
    const size = file.before.size;
    const info: FileInfo = { mode: file.before.mode & 0o7777, size };
    const overlap = file.head.length < size && this.overlapRest(openedAhead);
    try {
      if (overlap) this.openNextHead(index);
      await this.handOver(file, info, overlap);
      giveChunk(file.pooled);
    } finally {
      if (!file.closed) await closeAsync(file.fd).catch(() => undefined);
    }
    this.blockReads.afterGeneralPathRead(generalPathRead);
  }

  /** Opened and fstat'd here, synchronously, and read whole into the small-file buffer when small, else its head. */
  private open(leaf: FileEntry): OpenedFile {
    const into = this.scratch!;
    return this.blockReads.open(this.byRing, () => openSmallOrHeadSync(leaf, into, this.cursor, this.inline));
  }

  /** The head opened ahead, for the file whose turn it is now. */
  private takeOpenedAhead(): Promise<OpenedFile> {
    const pending = this.openedAhead!.file;
    this.openedAhead = null;
    return pending;
  }

  /**
   * Whether a large file's rest is read overlapped on the thread pool
   * (ReadOptions.inline unset, or "warm" and the pass read the disk since
   * the last large file decided, or the walk found the cache cold) rather
   * than on this thread.
   */
  private overlapRest(headOpenedAhead: boolean): boolean {
    if (!this.byRing) return !this.inline;
    return this.blockReads.readSinceLastDecision(headOpenedAhead) || this.cold;
  }

  /** The next file's head, opened and read on the thread pool while this file's rest is read and consumed. */
  private openNextHead(index: number): void {
    const following = this.nextFileIndex(index + 1);
    if (following === -1) return;
    this.openedAhead = { index: following, file: openHeadAsync(this.leaves[following] as FileEntry, this.cursor) };
    this.openedAhead.file.catch(() => undefined); // observed when its turn comes
  }

  private nextFileIndex(from: number): number {
    for (let index = from; index < this.leaves.length; index++) if (this.leaves[index]!.type === "file") return index;
    return -1;
  }

  /** The consumer's calls for one file: start, its head, its rest (readRest), the check after the read, end. */
  private async handOver(file: OpenedFile, info: FileInfo, overlap: boolean): Promise<void> {
    const consumer = this.consumer;
    // Consumers that answer synchronously (hashing) are not awaited: a
    // microtask per call is measurable over twenty thousand small files.
    let pending = consumer.start(file.entry, info);
    if (pending) await pending;
    if (file.head.length > 0) {
      pending = consumer.chunk(file.head);
      if (pending) await pending;
    }
    if (file.head.length < info.size) await this.readRest(file, info.size, overlap);
    if (!file.closed) await finishAsync(file);
    pending = consumer.end(file.entry, info);
    if (pending) await pending;
  }

  /**
   * The rest of a large file after its head: overlapped (chunk n+1 read on
   * the thread pool while chunk n is consumed), by the ring's thread (a
   * warm file with at least RING_MIN_REST left), or inline into the
   * small-file buffer.
   */
  private async readRest(file: OpenedFile, size: number, overlap: boolean): Promise<void> {
    if (overlap) return consumeRest(file, size, this.consumer);
    // The ring declines (false, nothing read) when it cannot take the file (no addon, this thread's ring in
    // use): inline.
    const byRingThread = this.byRing && size - file.head.length >= RING_MIN_REST;
    if (byRingThread && (await consumeRestByRing(file, size, this.consumer))) return;
    return consumeRestInline(file, size, this.consumer, this.scratch!);
  }

  /** Every consumer call has settled: nothing holds the small-file buffer or the batch any more. */
  keepBuffers(): void {
    if (this.scratch !== null) spareScratch = this.scratch;
    giveChunk(this.batch);
  }

  /**
   * Stops the read-ahead and closes the cursor's directories; a head opened
   * ahead that no file took (the pass failed) is closed once it settles, by
   * the promise returned.
   */
  close(): Promise<void> | undefined {
    this.readAhead.stop();
    this.cursor.close();
    if (this.openedAhead === null) return undefined;
    const pending: Promise<OpenedFile> = this.openedAhead.file;
    return pending.then(
      (file) => (file.closed ? undefined : closeAsync(file.fd).catch(() => undefined)),
      () => undefined,
    );
  }
}

/**
 * The read-ahead of one pass (prefetch.ts): started before the first leaf
 * when the mode says "always" or the walk found the cache cold, else once
 * the pass's own block reads show a cold run (COLD_BLOCK_READS between two
 * steps), if enough files are left to be worth it. Told where the reader
 * is at each step.
 */
class ReadAhead {
  private prefetch: Prefetcher | null = null;
  /** Still looking for a cold run: mode "auto", enough files, nothing started. */
  watching: boolean;
  /** The pass's block reads at the last step (PassBlockReads.source). */
  private blockReads: number;

  constructor(
    private readonly leaves: readonly LeafEntry[],
    private readonly counts: PassBlockReads,
    cold: boolean,
  ) {
    this.blockReads = counts.source();
    const mode = prefetchMode();
    this.watching = mode === "auto" && worthPrefetching(leaves, 0);
    if (mode === "always" || (this.watching && cold)) {
      this.watching = false;
      this.prefetch = startPrefetch(leaves, 0);
    }
  }

  /** The reader is at leaf `index`. */
  reached(index: number): void {
    if (this.prefetch) this.prefetch.advance(index);
    else if (this.watching && index > 0) this.watch(index);
  }

  private watch(index: number): void {
    const now = this.counts.source();
    if (now - this.blockReads >= COLD_BLOCK_READS) {
      this.watching = false;
      if (worthPrefetching(this.leaves, index)) this.prefetch = startPrefetch(this.leaves, index);
    }
    this.blockReads = now;
  }

  stop(): void {
    this.prefetch?.stop();
  }
}
