import type { FileConsumer } from "./file-reader.js";
import {
  CHANGED,
  META_FIELDS,
  NOT_REGULAR,
  SHORT,
  TOO_LARGE,
  changeOf,
  nativeError,
  type NativeAddon,
} from "./native-reads.js";
import { afterRead, hasReadHook } from "./read-hook.js";
import type { DirectoryCursor } from "./directory-cursor.js";
import type { FileEntry, LeafEntry } from "./entries.js";
import { changed, changedOrUnreadable } from "./refusals.js";

/** The most names of one call: the reader's runs are no longer (file-reader.ts, RUN_LENGTH). */
const MAX_RUN = 128;
const nativeMeta = new Float64Array(MAX_RUN * META_FIELDS);
const nativeNames: string[] = [];
const nativeDirectories = new Int32Array(MAX_RUN);

/**
 * The files from leaves[from] on, up to `to` or the first leaf that is not
 * a file, read by the native calls several at a time into `batch`
 * (CHUNK_SIZE: room for two halves read at once, each holding any file up
 * to `limit`) and handed to the consumer in order, read by two threads when
 * `split` (ReadOptions.inline unset: a core is free). A run spans
 * directories: each file is opened in its own directory's descriptor, all
 * of them held open by the cursor until the call returns, so a tree of
 * small directories still reads in long runs. The same refusals as the
 * JavaScript reads of file-reader.ts; a file over `limit` ends the run at
 * its index (the general path takes it). When a consumer call returns a
 * promise, `pending` settles once every file of the run is handed over.
 */
export function consumeNativeRun(
  native: NativeAddon,
  cursor: DirectoryCursor,
  leaves: readonly LeafEntry[],
  from: number,
  to: number,
  consumer: FileConsumer & Required<Pick<FileConsumer, "whole">>,
  batch: Buffer,
  limit: number,
  split: boolean,
): { next: number; pending?: Promise<void> } {
  nativeNames.length = 0;
  let count: number;
  cursor.holdDescriptors();
  try {
    for (let index = from; index < Math.min(to, from + MAX_RUN); index++) {
      const leaf = leaves[index]!;
      if (leaf.type !== "file") break;
      let directoryFd: number | null;
      try {
        directoryFd = cursor.descriptorOf(leaf);
      } catch (error) {
        // A directory that fails its checks is met again, alone, after the files before it: the same order as a
        // file-by-file read.
        if (index === from) throw error;
        break;
      }
      if (directoryFd === null) break;
      nativeDirectories[index - from] = directoryFd;
      nativeNames.push(leaf.name);
    }
    const hook = hasReadHook() ? (at: number) => afterRead(leaves[from + at]!.path) : undefined;
    count = native.readSmallFiles(nativeDirectories, nativeNames, batch, limit, nativeMeta, split, hook);
  } finally {
    cursor.releaseDescriptors();
  }
  return deliver(leaves, from, nativeMeta, count, consumer, batch);
}

/**
 * Hand the files of one call (their statuses in `meta`) to the consumer in
 * order. A consumer call that returns a promise (a writer with enough
 * creates in flight) does not end the run: the rest of the batch is already
 * read, so it is handed over once that promise settles instead of being
 * read again by the next call (which made a run copy read every file about
 * sixteen times: docs/design/performance.md, "The native addon and its
 * fallback"). The batch is the reader's alone and is not reused before the
 * returned promise settles; the statuses are copied out, as the next call on
 * this thread reuses `nativeMeta`.
 */
function deliver(
  leaves: readonly LeafEntry[],
  from: number,
  meta: Float64Array,
  count: number,
  consumer: FileConsumer & Required<Pick<FileConsumer, "whole">>,
  batch: Buffer,
): { next: number; pending?: Promise<void> } {
  for (let at = 0; at < count; at++) {
    const leaf = leaves[from + at] as FileEntry;
    const field = at * META_FIELDS;
    const status = meta[field]!;
    if (status !== 0) {
      if (status === TOO_LARGE) return { next: from + at };
      if (status === NOT_REGULAR) throw changed(leaf.path, "no longer a regular file");
      if (status === SHORT) throw changed(leaf.path, "short read");
      if (status === CHANGED) throw changed(leaf.path, changeOf(meta[field + 1]!));
      throw changedOrUnreadable(nativeError(status, meta[field + 1]!), leaf.path);
    }
    const offset = meta[field + 1]!;
    const size = meta[field + 2]!;
    const pending = consumer.whole(leaf, { mode: meta[field + 3]!, size }, batch.subarray(offset, offset + size));
    if (pending) {
      const rest = count - at - 1;
      if (rest === 0) return { next: from + count, pending };
      const restMeta = meta.slice((at + 1) * META_FIELDS, count * META_FIELDS);
      // A file over the limit is the call's last status (a stop ends the taking); the general path starts there.
      const next = meta[(count - 1) * META_FIELDS] === TOO_LARGE ? from + count - 1 : from + count;
      return {
        next,
        pending: pending.then(() => deliver(leaves, from + at + 1, restMeta, rest, consumer, batch).pending),
      };
    }
  }
  return { next: from + count };
}
