import { constants, fstat, open, read, close, type BigIntStats } from "node:fs";
import { OatsError } from "../../errors.js";
import { changedOrUnreadable, type FileEntry, type LeafEntry, type SymlinkEntry } from "./walk.js";

/**
 * Streams regular files in a fixed order, reading ahead of the consumer so
 * the next files' I/O overlaps hashing of the current one. Memory stays
 * bounded: at most READ_AHEAD_FILES heads of at most CHUNK_SIZE bytes, plus
 * two chunk buffers for the file being consumed, whatever the file sizes.
 *
 * Each file is opened without following symlinks and fstat'd before and after
 * it is read; a change of size, mtime, ctime or inode, or a short read, is a
 * refusal. Bytes are never reported half-old, half-new.
 */

export const CHUNK_SIZE = 1 << 20;
const READ_AHEAD_FILES = 16;

export interface FileInfo {
  /** Permission bits (mode & 0o7777). */
  readonly mode: number;
  readonly size: number;
}

export interface FileConsumer {
  start(entry: FileEntry, info: FileInfo): void | Promise<void>;
  /** The buffer is only valid until the returned promise settles. */
  chunk(data: Buffer): void | Promise<void>;
  end(entry: FileEntry, info: FileInfo): void | Promise<void>;
  /** Symlinks arrive in their place in the order, between files. */
  symlink(entry: SymlinkEntry): void | Promise<void>;
}

interface OpenedFile {
  readonly entry: FileEntry;
  readonly fd: number;
  readonly before: BigIntStats;
  readonly head: Buffer;
  closed: boolean;
}

const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | (constants.O_NONBLOCK ?? 0);

function openFd(path: string): Promise<number> {
  return new Promise((resolve, reject) => open(path, OPEN_FLAGS, (error, fd) => (error ? reject(error) : resolve(fd))));
}
function fstatBig(fd: number): Promise<BigIntStats> {
  return new Promise((resolve, reject) => fstat(fd, { bigint: true }, (error, stats) => (error ? reject(error) : resolve(stats))));
}
function readInto(fd: number, buffer: Buffer, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) => read(fd, buffer, 0, length, position, (error, bytes) => (error ? reject(error) : resolve(bytes))));
}
function closeFd(fd: number): Promise<void> {
  return new Promise((resolve, reject) => close(fd, (error) => (error ? reject(error) : resolve())));
}

/** Fill `buffer` from `position` until `length` bytes or end of file. */
async function readFully(fd: number, buffer: Buffer, length: number, position: number): Promise<number> {
  let done = 0;
  while (done < length) {
    const got = await readInto(fd, buffer.subarray(done), length - done, position + done);
    if (got === 0) break;
    done += got;
  }
  return done;
}

function changed(path: string, what: string): OatsError {
  return new OatsError("invalid-artifact", `file changed while it was read (${what}): ${path}`, { path, reason: "changed-while-reading" });
}

function sameVersion(a: BigIntStats, b: BigIntStats): string | null {
  if (a.ino !== b.ino || a.dev !== b.dev) return "inode";
  if (a.size !== b.size) return "size";
  if (a.mtimeNs !== b.mtimeNs) return "mtime";
  if (a.ctimeNs !== b.ctimeNs) return "ctime";
  return null;
}

async function openWithHead(entry: FileEntry): Promise<OpenedFile> {
  let fd: number;
  try {
    fd = await openFd(entry.absolute);
  } catch (error) {
    // ELOOP: the name became a symlink after the walk saw a file.
    throw changedOrUnreadable(error, entry.path);
  }
  try {
    const before = await fstatBig(fd);
    if (!before.isFile()) throw changed(entry.path, "no longer a regular file");
    const headLength = Number(before.size < BigInt(CHUNK_SIZE) ? before.size : BigInt(CHUNK_SIZE));
    const head = Buffer.allocUnsafe(headLength);
    const got = await readFully(fd, head, headLength, 0);
    if (got !== headLength) throw changed(entry.path, "short read");
    return { entry, fd, before, head, closed: false };
  } catch (error) {
    await closeFd(fd).catch(() => undefined);
    throw isKnown(error) ? error : changedOrUnreadable(error, entry.path);
  }
}

function isKnown(error: unknown): boolean {
  return error instanceof OatsError;
}

async function finish(file: OpenedFile): Promise<void> {
  let after: BigIntStats;
  try {
    after = await fstatBig(file.fd);
    file.closed = true;
    await closeFd(file.fd);
  } catch (error) {
    throw changedOrUnreadable(error, file.entry.path);
  }
  const difference = sameVersion(file.before, after);
  if (difference) throw changed(file.entry.path, difference);
}

async function consumeRest(file: OpenedFile, size: number, consumer: FileConsumer): Promise<void> {
  // Double buffering: the read of chunk n+1 is in flight while chunk n is consumed.
  const buffers = [Buffer.allocUnsafe(CHUNK_SIZE), Buffer.allocUnsafe(CHUNK_SIZE)];
  let position = file.head.length;
  let turn = 0;
  const next = (at: number, buffer: Buffer): Promise<number> => readFully(file.fd, buffer, Math.min(CHUNK_SIZE, size - at), at);
  let pending: Promise<number> | null = position < size ? next(position, buffers[turn]!) : null;
  while (pending) {
    let got: number;
    try {
      got = await pending;
    } catch (error) {
      throw changedOrUnreadable(error, file.entry.path);
    }
    const current = buffers[turn]!;
    const expected = Math.min(CHUNK_SIZE, size - position);
    if (got !== expected) throw changed(file.entry.path, "short read");
    position += got;
    turn ^= 1;
    pending = position < size ? next(position, buffers[turn]!) : null;
    try {
      await consumer.chunk(current.subarray(0, got));
    } catch (error) {
      await pending?.catch(() => undefined);
      throw error;
    }
  }
  // A file that grew past its first fstat is caught by finish() comparing size and mtime.
}

/**
 * Feed `leaves` to `consumer` in order. Reads of the following files are
 * started before the current one is consumed.
 */
export async function readLeavesInOrder(leaves: readonly LeafEntry[], consumer: FileConsumer): Promise<void> {
  const files = leaves.filter((leaf): leaf is FileEntry => leaf.type === "file");
  const inFlight: Promise<OpenedFile>[] = [];
  let nextToOpen = 0;
  const topUp = (): void => {
    while (inFlight.length < READ_AHEAD_FILES && nextToOpen < files.length) {
      const opened = openWithHead(files[nextToOpen++]!);
      opened.catch(() => undefined); // observed when its turn comes
      inFlight.push(opened);
    }
  };
  try {
    topUp();
    for (const leaf of leaves) {
      if (leaf.type === "symlink") {
        await consumer.symlink(leaf);
        continue;
      }
      const file = await inFlight.shift()!;
      topUp();
      try {
        const size = Number(file.before.size);
        const info: FileInfo = { mode: Number(file.before.mode) & 0o7777, size };
        await consumer.start(file.entry, info);
        if (file.head.length > 0) await consumer.chunk(file.head);
        if (file.head.length < size) await consumeRest(file, size, consumer);
        await finish(file);
        await consumer.end(file.entry, info);
      } finally {
        if (!file.closed) await closeFd(file.fd).catch(() => undefined);
      }
    }
  } catch (error) {
    // Close whatever was opened ahead; their errors no longer matter.
    await Promise.all(
      inFlight.map((pending) =>
        pending.then(
          (file) => closeFd(file.fd).catch(() => undefined),
          () => undefined,
        ),
      ),
    );
    // Reader failures are already refusals naming the path; a consumer's own
    // failure (a write into staging, say) is its to describe.
    throw error;
  }
}
