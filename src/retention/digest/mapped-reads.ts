import { fstatSync } from "node:fs";
import type { OatsError } from "../../errors.js";
import type { FileConsumer } from "./file-reader.js";
import { nativeError, nativeReads } from "./native-reads.js";
import { finishSync, type OpenedFile } from "./opened-file.js";
import { changed, changedOrUnreadable } from "./walk.js";

/**
 * The rest of a large file hashed from a mapping of the page cache
 * (native/hash-mapped.c) instead of read into a buffer first: only where
 * the file is read inline (every core hashes a tree of its own: a worker
 * lane, or this thread beside one) and the consumer is a pure hash that can
 * take a file's bytes that way (FileConsumer.mapped). A read(2) copies each
 * byte into the buffer before the hash reads it again; a mapping saves the
 * copy (docs/design/performance.md, "Large files hashed from a mapping").
 *
 * Every byte is still read and hashed, from the same open descriptor, in
 * order, and the file is fstat'd again after its last piece: the checks of
 * the inline read. A file that shrinks under the mapping faults (SIGBUS),
 * which the addon turns into -EFAULT here: a refusal, as a short read is
 * (or the read error it stands for, when the file did not shrink: failure()).
 * A file the addon will not map (mmap refuses it, or the application has
 * taken SIGBUS for itself) is read instead.
 */

/** Hashed per call, the event loop yielded to between calls (about 0.6 ms of SHA-256 here, as the inline read's). */
export const MAPPED_PIECE = 1 << 20;
/** A mapping and its page tables cost more than the copy they save on a short rest. */
export const MAPPED_MIN_REST = 2 << 20;
/** mmap's refusals of a file it cannot map (a filesystem without mmap): read it instead, nothing was fed. */
const NOT_MAPPABLE = new Set([19 /* ENODEV */, 22 /* EINVAL */, 13 /* EACCES */, 38 /* ENOSYS */, 12 /* ENOMEM */]);
const EFAULT = 14;
const EIO = 5;
const STEP_READ = 3;

let readMapped = 0;

/** Large files whose rest was hashed from a mapping so far, in this thread (tests: which way the policy chose). */
export function largeFilesReadMapped(): number {
  return readMapped;
}

/**
 * Hashes the rest of `file` (from its head to `size`) through
 * consumer.mapped, then finishes it (fstat, close, compare). False, with
 * nothing fed, when the file cannot be mapped: the caller reads it instead.
 */
export async function consumeRestMapped(file: OpenedFile, size: number, consumer: Required<Pick<FileConsumer, "mapped">>): Promise<boolean> {
  const native = nativeReads();
  if (native === null) return false;
  const mapping = native.mapFile(file.fd, size, true);
  if (typeof mapping === "number") {
    if (NOT_MAPPABLE.has(-mapping)) return false;
    throw failure(file, size, -mapping);
  }
  readMapped += 1;
  try {
    for (let position = file.head.length; position < size; ) {
      const length = Math.min(MAPPED_PIECE, size - position);
      const status = consumer.mapped(mapping, position, length);
      if (status < 0) throw failure(file, size, -status);
      position += length;
      if (position < size) await new Promise((resolve) => setImmediate(resolve));
    }
  } finally {
    native.unmapFile(mapping);
  }
  finishSync(file);
  return true;
}

/**
 * A mapped read's failure as the refusal a read's would be. A fault
 * (EFAULT, a SIGBUS caught) is what a file that shrank under its mapping
 * gives, and also what a disk's read error gives there, where read(2)
 * would say EIO: the file's size now tells which.
 */
function failure(file: OpenedFile, size: number, errno: number): OatsError {
  if (errno !== EFAULT) return changedOrUnreadable(nativeError(errno, STEP_READ), file.entry.path);
  let sizeNow: number;
  try {
    sizeNow = fstatSync(file.fd).size;
  } catch (error) {
    return changedOrUnreadable(error, file.entry.path);
  }
  return faultError(file.entry.path, size, sizeNow);
}

/** A fault in a mapping of `size` bytes of a file now `sizeNow` long: shorter, it changed; else the read failed (EIO). */
export function faultError(path: string, size: number, sizeNow: number): OatsError {
  return sizeNow < size ? changed(path, "short read") : changedOrUnreadable(nativeError(EIO, STEP_READ), path);
}
