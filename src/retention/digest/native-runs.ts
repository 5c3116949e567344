import { afterRead, hasReadHook } from "./read-hook.js";
import { CHANGED, META_FIELDS, NOT_REGULAR, SHORT, TOO_LARGE, changeOf, nativeError, type NativeAddon, type ReadAhead } from "./native-reads.js";
import type { DirectoryCursor } from "./directory-cursor.js";
import type { FileConsumer } from "./file-reader.js";
import { changed, changedOrUnreadable, type FileEntry, type LeafEntry } from "./walk.js";

let runsReadAhead = 0;

/** Runs this thread started reading ahead so far (tests: which way the policy chose). */
export function nativeRunsReadAhead(): number {
  return runsReadAhead;
}

/** The most names of one call: a run's length, so a run is one call in a directory of small files. */
export const NATIVE_RUN_LENGTH = 128;

/**
 * The small files of one reader pass read by the native calls
 * (native-reads.ts), a directory's worth at a time, each run handed to the
 * consumer in order with the same refusals as the JavaScript reads.
 *
 * Where a core is free (`spare`: ReadOptions.inline unset) the next run is
 * read ahead on a thread of its own while this one is consumed (hashed,
 * copied), into the other of two CHUNK_SIZE buffers, and a run read here
 * is split between two threads. A run read ahead is used only if the
 * reader asks for exactly it next; otherwise it is waited for and dropped
 * (its files were only opened, read and closed). With the read hook of the
 * tests installed every run is read here, on this thread, so the hook runs
 * between each read and its second fstat.
 */
export class NativeRuns {
  private readonly meta = new Float64Array(NATIVE_RUN_LENGTH * META_FIELDS);
  private readonly names: string[] = [];
  private readonly buffers: Buffer[] = [];
  private ahead: { readonly from: number; readonly names: number; readonly buffer: number; readonly handle: ReadAhead } | null = null;

  constructor(
    private readonly native: NativeAddon,
    private readonly spare: boolean,
    private readonly take: () => Buffer,
  ) {}

  /**
   * The files from leaves[from] on that share its directory, up to a run's
   * length. Stops at a file over the small-file limit (the general path
   * takes it: `next` is its index) and after a consumer call that returns
   * a promise.
   */
  consume(
    leaves: readonly LeafEntry[],
    from: number,
    directoryFd: number,
    cursor: DirectoryCursor,
    consumer: FileConsumer & Required<Pick<FileConsumer, "whole">>,
    limit: number,
  ): { next: number; pending?: Promise<void> } {
    const end = this.collect(leaves, from);
    let count: number;
    let buffer: Buffer;
    const ahead = this.ahead;
    this.ahead = null;
    if (ahead !== null && ahead.from === from && ahead.names === end - from) {
      count = this.native.finishSmallFiles(ahead.handle, this.meta);
      buffer = this.buffers[ahead.buffer]!;
    } else {
      if (ahead !== null) this.native.finishSmallFiles(ahead.handle, this.meta);
      const hook = hasReadHook() ? (at: number) => afterRead(leaves[from + at]!.path) : undefined;
      buffer = this.buffer(0);
      count = this.native.readSmallFiles(directoryFd, this.names, buffer, limit, this.meta, this.spare, hook);
    }
    const complete = count === end - from && this.meta[(count - 1) * META_FIELDS] === 0;
    if (complete && this.spare && !hasReadHook()) this.readAhead(leaves, end, cursor, buffer === this.buffers[0] ? 1 : 0, limit);
    for (let at = 0; at < count; at++) {
      const leaf = leaves[from + at] as FileEntry;
      const field = at * META_FIELDS;
      const status = this.meta[field]!;
      if (status !== 0) {
        if (status === TOO_LARGE) return { next: from + at };
        if (status === NOT_REGULAR) throw changed(leaf.path, "no longer a regular file");
        if (status === SHORT) throw changed(leaf.path, "short read");
        if (status === CHANGED) throw changed(leaf.path, changeOf(this.meta[field + 1]!));
        throw changedOrUnreadable(nativeError(status, this.meta[field + 1]!), leaf.path);
      }
      const offset = this.meta[field + 1]!;
      const size = this.meta[field + 2]!;
      const pending = consumer.whole(leaf, { mode: this.meta[field + 3]!, size }, buffer.subarray(offset, offset + size));
      if (pending) return { next: from + at + 1, pending };
    }
    return { next: from + count };
  }

  /** Waits for a run still being read ahead; the buffers, for the pool, once nothing reads into them. */
  close(): Buffer[] {
    const ahead = this.ahead;
    this.ahead = null;
    if (ahead !== null) this.native.finishSmallFiles(ahead.handle, this.meta);
    return this.buffers.splice(0);
  }

  /** this.names := the names of the run from `from`; its end. */
  private collect(leaves: readonly LeafEntry[], from: number): number {
    const parent = (leaves[from] as FileEntry).parent;
    const last = Math.min(leaves.length, from + NATIVE_RUN_LENGTH);
    this.names.length = 0;
    let index = from;
    for (; index < last; index++) {
      const leaf = leaves[index]!;
      if (leaf.type !== "file" || leaf.parent !== parent) break;
      this.names.push(leaf.name);
    }
    return index;
  }

  private readAhead(leaves: readonly LeafEntry[], from: number, cursor: DirectoryCursor, buffer: number, limit: number): void {
    const leaf = leaves[from];
    if (leaf === undefined || leaf.type !== "file") return;
    let directoryFd: number | null;
    try {
      directoryFd = cursor.descriptorOf(leaf);
    } catch {
      return; // refused again, in its turn, when this run is read here
    }
    if (directoryFd === null) return;
    const end = this.collect(leaves, from);
    runsReadAhead += 1;
    this.ahead = { from, names: end - from, buffer, handle: this.native.startSmallFiles(directoryFd, this.names, this.buffer(buffer), limit) };
  }

  private buffer(index: number): Buffer {
    while (this.buffers.length <= index) this.buffers.push(this.take());
    return this.buffers[index]!;
  }
}
