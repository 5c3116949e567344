import type { FileConsumer } from "./file-reader.js";
import { CHANGED, META_FIELDS, NOT_REGULAR, SHORT, TOO_LARGE, changeOf, nativeError, type NativeAddon } from "./native-reads.js";
import { afterRead, hasReadHook } from "./read-hook.js";
import { changed, changedOrUnreadable, type FileEntry, type LeafEntry } from "./walk.js";

/** The most names of one call: the reader's runs are no longer (file-reader.ts, RUN_LENGTH). */
const MAX_RUN = 128;
const nativeMeta = new Float64Array(MAX_RUN * META_FIELDS);
const nativeNames: string[] = [];

/**
 * The files from leaves[from] on that share its directory, up to `to`, read
 * by the native calls several at a time into `batch` (CHUNK_SIZE: room for
 * two halves read at once, each holding any file up to `limit`) and handed
 * to the consumer in order, read by two threads when `split`
 * (ReadOptions.inline unset: a core is free). The same refusals as the
 * JavaScript reads of file-reader.ts; a file over `limit` ends the run at
 * its index (the general path takes it), and so does a consumer call that
 * returns a promise.
 */
export function consumeNativeRun(
  native: NativeAddon,
  directoryFd: number,
  leaves: readonly LeafEntry[],
  from: number,
  to: number,
  consumer: FileConsumer & Required<Pick<FileConsumer, "whole">>,
  batch: Buffer,
  limit: number,
  split: boolean,
): { next: number; pending?: Promise<void> } {
  const parent = (leaves[from] as FileEntry).parent;
  nativeNames.length = 0;
  for (let index = from; index < Math.min(to, from + MAX_RUN); index++) {
    const leaf = leaves[index]!;
    if (leaf.type !== "file" || leaf.parent !== parent) break;
    nativeNames.push(leaf.name);
  }
  const hook = hasReadHook() ? (at: number) => afterRead(leaves[from + at]!.path) : undefined;
  const count = native.readSmallFiles(directoryFd, nativeNames, batch, limit, nativeMeta, split, hook);
  for (let at = 0; at < count; at++) {
    const leaf = leaves[from + at] as FileEntry;
    const field = at * META_FIELDS;
    const status = nativeMeta[field]!;
    if (status !== 0) {
      if (status === TOO_LARGE) return { next: from + at };
      if (status === NOT_REGULAR) throw changed(leaf.path, "no longer a regular file");
      if (status === SHORT) throw changed(leaf.path, "short read");
      if (status === CHANGED) throw changed(leaf.path, changeOf(nativeMeta[field + 1]!));
      throw changedOrUnreadable(nativeError(status, nativeMeta[field + 1]!), leaf.path);
    }
    const offset = nativeMeta[field + 1]!;
    const size = nativeMeta[field + 2]!;
    const pending = consumer.whole(leaf, { mode: nativeMeta[field + 3]!, size }, batch.subarray(offset, offset + size));
    if (pending) return { next: from + at + 1, pending };
  }
  return { next: from + count };
}
