import { randomBytes } from "node:crypto";
import {
  closeSync,
  constants,
  fstatSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { errnoCode } from "../../core/index.js";
import { fsyncDirectory } from "./components.js";
import { isPrivateDirectory, scopeStateDir } from "./state-location.js";

/**
 * Files kept in the operator's private state, outside the scope
 * (`scopeStateDir`, state-location.ts): what only this account's oats wrote
 * and a writer of the scope must not be able to forge (the start records
 * and delivered marks of run evidence, the jobs this account queued, the
 * anchored revision manifests).
 * Every directory below the scope's state directory is created 0700 and
 * used only while it is a real directory of this account that no one else
 * can write; a file is read only when it is a regular file of this account
 * that no one else can write, never through a symlink.
 */

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$/;

function euid(): number {
  return typeof process.geteuid === "function" ? process.geteuid() : -1;
}

/** `<scopeStateDir>/<parts...>`, created 0700; null when any of it is not private (or cannot be made). */
export function privateDir(realScope: string, ...parts: string[]): string | null {
  let dir = scopeStateDir(realScope);
  if (dir === null) return null;
  for (const part of parts) {
    if (!NAME.test(part)) return null;
    dir = join(dir, part);
    try {
      mkdirSync(dir, { mode: 0o700 });
    } catch (error) {
      if (errnoCode(error) !== "EEXIST") return null;
    }
    if (!isPrivateDirectory(dir)) return null;
  }
  return dir;
}

/** A private file's bytes; null when it is missing, too large, not a regular file of this account, or writable by
 * others. */
export function readPrivateFile(path: string, limit: number): Buffer | null {
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const stats = fstatSync(fd);
      if (!stats.isFile() || stats.uid !== euid() || (stats.mode & 0o022) !== 0 || stats.size > limit) return null;
      return readFileSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    return null;
  }
}

/**
 * Replace `<dir>/<name>` whole and durably: a fresh file (0600, fsync'd), renamed, the directory fsync'd. With
 * `durable: false` (a record whose loss costs only work) nothing is fsync'd.
 */
export function writePrivateFile(
  dir: string,
  name: string,
  bytes: Buffer,
  options: { readonly durable?: boolean } = {},
): void {
  const durable = options.durable ?? true;
  const temporary = join(dir, `.${name}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    const fd = openSync(
      temporary,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    try {
      let written = 0;
      while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
      if (durable) fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, join(dir, name));
    if (durable) fsyncDirectory(dir);
  } catch (error) {
    try {
      unlinkSync(temporary);
    } catch {
      // nothing to take back
    }
    throw error;
  }
}
