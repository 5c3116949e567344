import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  lstatSync,
  openSync,
  read,
  readSync,
  type Stats,
  writeSync,
} from "node:fs";
import { Readable } from "node:stream";
import { join } from "node:path";
import { errnoCode, type OatsError } from "../../core/index.js";
import { stagingName } from "./layout.js";

/**
 * The two small file operations every store and reader here needs: write a
 * staged file that is durable before it is linked or renamed into place, and
 * read a bounded regular file, never hanging on a FIFO and never through a
 * symlink. Each has a piecewise form for files of megabytes.
 * Each caller turns a failure into its own refusal.
 */

/**
 * Create `path` (never through a symlink, never over an existing file), write
 * all of `bytes` (a write may be short: loop until done) and fsync it.
 */
export function writeNewFileDurably(path: string, bytes: Buffer | string, mode: number): void {
  const data = typeof bytes === "string" ? Buffer.from(bytes) : bytes;
  writeNewFileDurablyInPieces(path, mode, (write) => write(data));
}

/**
 * `bytes` from `from` on, to the end: a short write is written on, so what
 * stops the writes raises its own errno (ENOSPC, EFBIG); a write of nothing
 * is ENOSPC rather than a loop.
 */
export function writeRestSync(fd: number, bytes: Uint8Array, from = 0): void {
  for (let at = from; at < bytes.length; ) {
    const done = writeSync(fd, bytes, at, bytes.length - at);
    if (done === 0)
      throw Object.assign(new Error("no space left on the device (a write of nothing)"), { code: "ENOSPC" });
    at += done;
  }
}

/**
 * The same, with the bytes handed over by `fill` a piece at a time, so a
 * large file need not be held in memory. A throw from `fill` leaves the
 * partly written file for the caller to remove (it is the caller's staging).
 */
export function writeNewFileDurablyInPieces(
  path: string,
  mode: number,
  fill: (write: (piece: Uint8Array) => void) => void,
): void {
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    fill((piece) => writeRestSync(fd, piece));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Write `bytes` to a new dot-prefixed staging file in `dir`, fsync'd; returns its path. */
export function writeStagedFile(dir: string, suffix: string, bytes: Buffer | string): string {
  const staged = join(dir, `${stagingName()}${suffix}`);
  writeNewFileDurably(staged, bytes, 0o644);
  return staged;
}

export type ReadFailure = "missing" | "symlink" | "unreadable" | "not-a-file" | "too-large" | "changed";

export interface BoundedReadOptions {
  readonly limit: number;
  readonly refuse: (failure: ReadFailure, details: Record<string, unknown>) => OatsError;
}

/**
 * The one way a path that another user may reach is opened for reading
 * (docs/design/captures.md, threat table): once, with O_NOFOLLOW (a symlink
 * at the name is ELOOP, never followed) and O_NONBLOCK (a FIFO swapped in
 * opens at once instead of waiting for a writer), then fstat'd, so the
 * caller decides on the type of what it holds and reads only through this
 * descriptor, never by name again. O_NONBLOCK stays set: reads of a regular
 * file or a directory ignore it, and anything else is refused on its type.
 * Errors are the system's (ENOENT, ELOOP, ENXIO for a socket...); the
 * caller closes the descriptor.
 */
export function openNamedPath(path: string): { fd: number; stats: Stats } {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    return { fd, stats: fstatSync(fd) };
  } catch (error) {
    closeSync(fd);
    throw error;
  }
}

/**
 * A file held open by descriptor (openNamedPath), read as many times as
 * needed, each time as a stream from its first byte that reads through the
 * descriptor (pread at its own position), never through the name. Node's
 * own file streams close the descriptor when destroyed, whatever
 * `autoClose` says, so these streams never close it: `close` does, once
 * every stream has ended or been destroyed and no read of it is in flight
 * (a descriptor number closed under a pending read could be reused by the
 * next open, and that read would read the other file).
 */
export class HeldFile {
  private readonly streams: Readable[] = [];
  private closed = false;

  constructor(
    readonly fd: number,
    readonly path: string,
  ) {}

  /** The file from `start` (default its first byte) up to, not including, `end` (default its last byte). */
  stream(start = 0, end = Number.POSITIVE_INFINITY): Readable {
    const fd = this.fd;
    let position = start;
    let pending: Promise<void> | null = null;
    const stream = new Readable({
      highWaterMark: 256 * 1024,
      read(size) {
        if (position >= end) {
          stream.push(null);
          return;
        }
        const buffer = Buffer.allocUnsafe(Math.min(Math.max(size, 64 * 1024), 1 << 20, end - position));
        pending = new Promise((settle) => {
          read(fd, buffer, 0, buffer.length, position, (error, bytesRead) => {
            pending = null;
            settle();
            if (stream.destroyed) return;
            if (error) stream.destroy(error);
            else if (bytesRead === 0) stream.push(null);
            else {
              position += bytesRead;
              stream.push(buffer.subarray(0, bytesRead));
            }
          });
        });
      },
      destroy(error, callback) {
        if (pending === null) callback(error);
        else void pending.then(() => callback(error));
      },
    });
    this.streams.push(stream);
    return stream;
  }

  /** Stop every stream, wait until none reads, then close the descriptor (idempotent). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const stream of this.streams) if (!stream.destroyed) stream.destroy();
    await Promise.all(
      this.streams.map((stream) => (stream.closed ? undefined : new Promise((done) => stream.once("close", done)))),
    );
    closeSync(this.fd);
  }
}

function openRegularFile(path: string, options: BoundedReadOptions): { fd: number; size: number } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  } catch (error) {
    const code = errnoCode(error);
    throw options.refuse(code === "ENOENT" ? "missing" : code === "ELOOP" ? "symlink" : "unreadable", {
      path,
      errno: code,
    });
  }
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) throw options.refuse("not-a-file", { path });
    if (stats.size > options.limit) throw options.refuse("too-large", { path, size: stats.size, limit: options.limit });
    return { fd, size: stats.size };
  } catch (error) {
    closeSync(fd);
    throw error;
  }
}

export function readRegularFile(path: string, options: BoundedReadOptions): Buffer {
  const { fd, size } = openRegularFile(path, options);
  try {
    const bytes = Buffer.alloc(size);
    let done = 0;
    while (done < bytes.length) {
      const got = readSync(fd, bytes, done, bytes.length - done, done);
      if (got === 0) break;
      done += got;
    }
    if (done !== bytes.length) throw options.refuse("changed", { path });
    return bytes;
  } finally {
    closeSync(fd);
  }
}

/**
 * A bounded regular file read as readRegularFile reads it (same refusals),
 * handed to `consume` a piece at a time; returns its size. For files of
 * megabytes (a run's log): on the machines measured, the page faults of one
 * fresh buffer the size of the file cost several times reading and hashing
 * it through a reused one (docs/design/performance.md, "Run evidence").
 */
export function readRegularFileInPieces(
  path: string,
  options: BoundedReadOptions,
  consume: (piece: Buffer) => void,
): number {
  const { fd, size } = openRegularFile(path, options);
  try {
    const done = readInPieces(fd, size, consume);
    if (done !== size) throw options.refuse("changed", { path });
    return size;
  } finally {
    closeSync(fd);
  }
}

const PIECE_BYTES = 256 * 1024;
let sparePiece: Buffer | null = null;

/**
 * The first `size` bytes of an open file, from offset 0, handed to `consume`
 * a piece at a time through one reused buffer (a piece is valid only during
 * its call); returns how many were read, fewer when the file is shorter.
 */
export function readInPieces(fd: number, size: number, consume: (piece: Buffer) => void): number {
  // A consume that reads another file in pieces gets a buffer of its own.
  const buffer = sparePiece ?? Buffer.allocUnsafe(PIECE_BYTES);
  sparePiece = null;
  try {
    let done = 0;
    while (done < size) {
      const got = readSync(fd, buffer, 0, Math.min(buffer.length, size - done), done);
      if (got === 0) break;
      consume(buffer.subarray(0, got));
      done += got;
    }
    return done;
  } finally {
    sparePiece = buffer;
  }
}

/** Whether anything (of any type, a symlink not followed) is at `path`; an entry that cannot be lstat'd counts as
 * absent. */
export function entryPresent(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}
