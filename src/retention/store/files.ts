import { closeSync, constants, fstatSync, fsyncSync, lstatSync, openSync, readSync, writeSync } from "node:fs";
import { join } from "node:path";
import { errnoCode, type OatsError } from "../../errors.js";
import { stagingName } from "./layout.js";

/**
 * The two small file operations every store and reader here needs: write a
 * staged file that is durable before it is linked or renamed into place, and
 * read a bounded regular file, never hanging on a FIFO and (unless asked)
 * never through a symlink. Each caller turns a failure into its own refusal.
 */

/**
 * Create `path` (never through a symlink, never over an existing file), write
 * all of `bytes` (a write may be short: loop until done) and fsync it.
 */
export function writeNewFileDurably(path: string, bytes: Buffer | string, mode: number): void {
  const data = typeof bytes === "string" ? Buffer.from(bytes) : bytes;
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    let done = 0;
    while (done < data.length) done += writeSync(fd, data, done, data.length - done);
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
  /** Follow a symlink at `path` (a user's own file); stores never do. */
  readonly followSymlinks?: boolean;
  readonly refuse: (failure: ReadFailure, details: Record<string, unknown>) => OatsError;
}

export function readRegularFile(path: string, options: BoundedReadOptions): Buffer {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK | (options.followSymlinks ? 0 : constants.O_NOFOLLOW));
  } catch (error) {
    const code = errnoCode(error);
    throw options.refuse(code === "ENOENT" ? "missing" : code === "ELOOP" && !options.followSymlinks ? "symlink" : "unreadable", { path, errno: code });
  }
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) throw options.refuse("not-a-file", { path });
    if (stats.size > options.limit) throw options.refuse("too-large", { path, size: stats.size, limit: options.limit });
    const bytes = Buffer.alloc(stats.size);
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

/** Whether anything (of any type, a symlink not followed) is at `path`; an entry that cannot be lstat'd counts as absent. */
export function entryPresent(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}
