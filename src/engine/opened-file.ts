import { closeSync, constants, fstat, fstatSync, openSync, read, readSync, close, type Stats } from "node:fs";
import { OatsError } from "../core/index.js";
import type { DirectoryCursor } from "./directory-cursor.js";
import type { FileConsumer } from "./file-reader.js";
import { afterRead } from "./read-hook.js";
import type { FileEntry } from "./entries.js";
import { changed, changedOrUnreadable } from "./refusals.js";

/**
 * One file of the general path of file-reader.ts: opened inside its
 * directory's descriptor without following a symlink, fstat'd, read whole
 * when small or else a head and then the rest in chunks (inline, or chunk
 * n+1 in flight on the thread pool while chunk n is consumed), fstat'd
 * again and closed; any change of inode, size, mtime or ctime, or a short
 * read, is a refusal. The CHUNK_SIZE buffers are pooled per thread.
 */

export const CHUNK_SIZE = 1 << 20;
/** Files up to this size are read whole, synchronously. */
export const SMALL_FILE_SIZE = 256 << 10;
/** The piece a large file is read in when it is read inline (ReadOptions): it fits a core's cache, and the small-file
 * buffer. */
export const INLINE_CHUNK_SIZE = SMALL_FILE_SIZE;
/**
 * Pieces an inline read hashes between yields to the event loop: 1 MiB,
 * well under a millisecond of SHA-256 here. Inline reads run while a worker
 * lane runs beside this thread, and that worker gets its next tree only once
 * this thread has read its answer: yielding every 8 ms (file-reader.ts's
 * interval between files), a worker in fsck's lanes waited 3-10 ms for each
 * of its trees. A yield costs microseconds.
 */
const YIELD_EVERY_PIECES = 4;

export interface OpenedFile {
  readonly entry: FileEntry;
  readonly fd: number;
  readonly before: Stats;
  /** The whole file when it is small, else its first chunk. */
  readonly head: Buffer;
  /** The pooled buffer `head` lies in, if it is one (given back once the head is consumed). */
  readonly pooled: Buffer | null;
  closed: boolean;
}

export const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * CHUNK_SIZE buffers, reused across files and passes on this thread. A
 * fresh 1 MiB buffer pays a page fault for each of its 256 pages when it
 * is first filled: 69 of them (a node_modules tree's 23 large files, three
 * buffers each) took 250 ms on the AMD EPYC machine against 0.8 ms for one
 * reused buffer (docs/design/performance.md, "Large files"). A buffer is
 * given back only when no read into it is in flight and its consumer call
 * has settled; on a failure it is left to the collector. Five: a large
 * file's head and its two rest buffers, the next file's prefetched head,
 * and the native reads' batch.
 */
const POOL_LIMIT = 5;
const chunkPool: Buffer[] = [];

let chunksAllocated = 0;

/** CHUNK_SIZE buffers this thread has allocated so far (tests: that they are reused). */
export function chunkBuffersAllocated(): number {
  return chunksAllocated;
}

export function takeChunk(): Buffer {
  const reused = chunkPool.pop();
  if (reused) return reused;
  chunksAllocated += 1;
  return Buffer.allocUnsafe(CHUNK_SIZE);
}

export function giveChunk(buffer: Buffer | null): void {
  if (buffer !== null && chunkPool.length < POOL_LIMIT && !chunkPool.includes(buffer)) chunkPool.push(buffer);
}

const fstatAsync = (fd: number) =>
  new Promise<Stats>((resolve, reject) => fstat(fd, (error, stats) => (error ? reject(error) : resolve(stats))));
export const closeAsync = (fd: number) =>
  new Promise<void>((resolve, reject) => close(fd, (error) => (error ? reject(error) : resolve())));
const readAsync = (fd: number, buffer: Buffer, length: number, position: number) =>
  new Promise<number>((resolve, reject) =>
    read(fd, buffer, 0, length, position, (error, bytes) => (error ? reject(error) : resolve(bytes))),
  );

/** Fill `buffer` from `position` until `length` bytes or end of file. */
export async function readFully(fd: number, buffer: Buffer, length: number, position: number): Promise<number> {
  let done = 0;
  while (done < length) {
    const got = await readAsync(fd, buffer.subarray(done), length - done, position + done);
    if (got === 0) break;
    done += got;
  }
  return done;
}

/** Fill `buffer` from `position` (the file's start by default) until `length` bytes or end of file. */
export function readFullySync(fd: number, buffer: Buffer, length: number, position = 0): number {
  let done = 0;
  while (done < length) {
    const got = readSync(fd, buffer, done, length - done, position + done);
    if (got === 0) break;
    done += got;
  }
  return done;
}

export function difference(a: Stats, b: Stats): string | null {
  if (a.ino !== b.ino || a.dev !== b.dev) return "inode";
  if (a.size !== b.size) return "size";
  // Millisecond doubles keep a resolution well under a microsecond today.
  if (a.mtimeMs !== b.mtimeMs) return "mtime";
  if (a.ctimeMs !== b.ctimeMs) return "ctime";
  return null;
}

function headLength(stats: Stats, inline: boolean): number {
  return stats.size <= SMALL_FILE_SIZE ? stats.size : Math.min(stats.size, inline ? INLINE_CHUNK_SIZE : CHUNK_SIZE);
}

function checkUnchanged(file: OpenedFile, after: Stats): void {
  const what = difference(file.before, after);
  if (what) throw changed(file.entry.path, what);
}

/**
 * Open and fstat a file; read it whole when small, else its first chunk.
 * A small file is read into `scratch` (SMALL_FILE_SIZE bytes, reused for every
 * small file of one pass), so twenty thousand small files cost no twenty
 * thousand buffers: its bytes are valid until the next file is opened, which
 * is within the FileConsumer contract.
 */
export function openSmallOrHeadSync(
  entry: FileEntry,
  scratch: Buffer,
  cursor: DirectoryCursor,
  inline: boolean,
): OpenedFile {
  let fd: number;
  try {
    fd = openSync(cursor.pathOf(entry), OPEN_FLAGS);
  } catch (error) {
    throw changedOrUnreadable(error, entry.path);
  }
  let file: OpenedFile | undefined;
  try {
    const before = fstatSync(fd);
    if (!before.isFile()) throw changed(entry.path, "no longer a regular file");
    const length = headLength(before, inline);
    const pooled = length <= scratch.length ? null : takeChunk();
    const head = (pooled ?? scratch).subarray(0, length);
    if (readFullySync(fd, head, length) !== length) throw changed(entry.path, "short read");
    file = { entry, fd, before, head, pooled, closed: false };
    if (length === before.size) finishSync(file);
    return file;
  } catch (error) {
    if (!file?.closed) closeSync(fd);
    throw error instanceof OatsError ? error : changedOrUnreadable(error, entry.path);
  }
}

/**
 * The open itself is synchronous: the descriptor of the directory it names
 * must still be the cursor's when the kernel resolves the path, which a
 * thread-pool open run later could not promise.
 */
export async function openHeadAsync(entry: FileEntry, cursor: DirectoryCursor): Promise<OpenedFile> {
  let fd: number;
  try {
    fd = openSync(cursor.pathOf(entry), OPEN_FLAGS);
  } catch (error) {
    throw error instanceof OatsError ? error : changedOrUnreadable(error, entry.path);
  }
  let file: OpenedFile | undefined;
  try {
    const before = await fstatAsync(fd);
    if (!before.isFile()) throw changed(entry.path, "no longer a regular file");
    const length = headLength(before, false);
    const pooled = takeChunk();
    const head = pooled.subarray(0, length);
    if ((await readFully(fd, head, length, 0)) !== length) throw changed(entry.path, "short read");
    file = { entry, fd, before, head, pooled, closed: false };
    if (length === before.size) await finishAsync(file);
    return file;
  } catch (error) {
    if (!file?.closed) await closeAsync(fd).catch(() => undefined);
    throw error instanceof OatsError ? error : changedOrUnreadable(error, entry.path);
  }
}

export async function finishAsync(file: OpenedFile): Promise<void> {
  let after: Stats;
  try {
    afterRead(file.entry.path);
    after = await fstatAsync(file.fd);
    file.closed = true;
    await closeAsync(file.fd);
  } catch (error) {
    throw changedOrUnreadable(error, file.entry.path);
  }
  checkUnchanged(file, after);
}

let readInline = 0;

/** Large files whose rest was read inline so far, in this thread (tests: which way the policy chose). */
export function largeFilesReadInline(): number {
  return readInline;
}

export function finishSync(file: OpenedFile): void {
  let after: Stats;
  try {
    afterRead(file.entry.path);
    after = fstatSync(file.fd);
    file.closed = true;
    closeSync(file.fd);
  } catch (error) {
    throw changedOrUnreadable(error, file.entry.path);
  }
  checkUnchanged(file, after);
}

/**
 * The rest of a large file read inline (ReadOptions.inline) into `buffer`,
 * which the head was read into as well: each piece is consumed before the
 * next read overwrites it. The event loop is yielded to every
 * YIELD_EVERY_PIECES pieces.
 */
export async function consumeRestInline(
  file: OpenedFile,
  size: number,
  consumer: FileConsumer,
  buffer: Buffer,
): Promise<void> {
  readInline += 1;
  let position = file.head.length;
  let sinceYield = 0;
  while (position < size) {
    const wanted = Math.min(buffer.length, size - position);
    let got: number;
    try {
      got = readFullySync(file.fd, buffer, wanted, position);
    } catch (error) {
      throw changedOrUnreadable(error, file.entry.path);
    }
    if (got !== wanted) throw changed(file.entry.path, "short read");
    position += got;
    const pending = consumer.chunk(buffer.subarray(0, got));
    if (pending) await pending;
    if (++sinceYield === YIELD_EVERY_PIECES) {
      sinceYield = 0;
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  finishSync(file);
}

/** The rest of a large file, chunk n+1 in flight while chunk n is consumed. */
export async function consumeRest(file: OpenedFile, size: number, consumer: FileConsumer): Promise<void> {
  const buffers = [takeChunk(), takeChunk()];
  let position = file.head.length;
  let turn = 0;
  const next = (at: number): Promise<number> => readFully(file.fd, buffers[turn]!, Math.min(CHUNK_SIZE, size - at), at);
  let pending: Promise<number> | null = position < size ? next(position) : null;
  while (pending) {
    let got: number;
    try {
      got = await pending;
    } catch (error) {
      throw changedOrUnreadable(error, file.entry.path);
    }
    const current = buffers[turn]!;
    if (got !== Math.min(CHUNK_SIZE, size - position)) throw changed(file.entry.path, "short read");
    position += got;
    turn ^= 1;
    pending = position < size ? next(position) : null;
    try {
      await consumer.chunk(current.subarray(0, got));
    } catch (error) {
      await pending?.catch(() => undefined);
      throw error;
    }
  }
  // Both reads have settled and every chunk has been consumed.
  giveChunk(buffers[0]!);
  giveChunk(buffers[1]!);
  // Growth past the first fstat shows up as a size or mtime change in finishAsync.
}
