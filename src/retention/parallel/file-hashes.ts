import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { createHash } from "node:crypto";

/**
 * The SHA-256 of single files, as the shared file layer verifies a held file
 * before it is linked (store/shared-layer.ts): each is opened once, never
 * through a symlink nor blocking on a FIFO, fstat'd, and read in full through
 * that descriptor. A path that is not a regular file, or cannot be read,
 * answers null: the caller treats it as not held.
 */
export interface FileHash {
  readonly sha256: string;
  readonly size: number;
  readonly dev: number;
  readonly ino: number;
  /** Permission bits (mode & 0o7777). */
  readonly mode: number;
  /** Hard links to the inode. */
  readonly nlink: number;
  /** The modification time the read's fstat saw (a write moves it; a link does not). */
  readonly mtimeMs: number;
}

const buffer = Buffer.allocUnsafe(256 * 1024);

export function hashFileHere(path: string): FileHash | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) return null;
    const hash = createHash("sha256");
    let done = 0;
    while (done < stats.size) {
      const got = readSync(fd, buffer, 0, Math.min(buffer.length, stats.size - done), done);
      if (got === 0) return null;
      hash.update(buffer.subarray(0, got));
      done += got;
    }
    return {
      sha256: hash.digest("hex"),
      size: stats.size,
      dev: stats.dev,
      ino: stats.ino,
      mode: stats.mode & 0o7777,
      nlink: stats.nlink,
      mtimeMs: stats.mtimeMs,
    };
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

export function hashFilesHere(paths: readonly string[]): (FileHash | null)[] {
  return paths.map(hashFileHere);
}
