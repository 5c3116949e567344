import { closeSync, type Dirent } from "node:fs";
import { nativeError, nativeReads, type NativeAddon } from "./native-reads.js";

/**
 * The walk's directory calls made by the addon (native/directories.c) where
 * it loaded: openat of a child directory inside its parent's descriptor
 * with its fstat, and the listing of an open directory. The same calls and
 * flags the walk makes through /proc/<pid>/fd/<dir>/<name> paths, without
 * the procfs lookup of each path, a Stats object per directory or a Dirent
 * per entry: over a cold process's first walk of 20,000 files in 351
 * directories, 36 ms became 15 (docs/design/performance.md, "The native addon
 * and its fallback"). Without the addon each function returns null and the
 * walk makes the calls itself.
 */

/** What the walk needs of an entry: a Dirent has it, and so has a native one. */
export type Listed = Pick<
  Dirent,
  "name" | "isDirectory" | "isFile" | "isSymbolicLink" | "isFIFO" | "isSocket" | "isBlockDevice" | "isCharacterDevice"
>;

// d_type values (dirent.h).
const DT_FIFO = 1;
const DT_CHR = 2;
const DT_DIR = 4;
const DT_BLK = 6;
const DT_REG = 8;
const DT_LNK = 10;
const DT_SOCK = 12;
const ENOENT = 2;
const STEP_READ = 3;
const STEP_CLOSE = 4;

class NativeEntry implements Listed {
  constructor(
    readonly name: string,
    private readonly type: number,
  ) {}
  isDirectory(): boolean {
    return this.type === DT_DIR;
  }
  isFile(): boolean {
    return this.type === DT_REG;
  }
  isSymbolicLink(): boolean {
    return this.type === DT_LNK;
  }
  isFIFO(): boolean {
    return this.type === DT_FIFO;
  }
  isSocket(): boolean {
    return this.type === DT_SOCK;
  }
  isBlockDevice(): boolean {
    return this.type === DT_BLK;
  }
  isCharacterDevice(): boolean {
    return this.type === DT_CHR;
  }
}

/**
 * The entries of the open directory `fd` (but . and ..), or null without
 * the addon. A failure throws the errno as the fs call would have; an entry
 * gone before its type could be read (a filesystem without d_type) throws
 * ENOENT: the tree changed while it was read.
 */
export function listNatively(fd: number): Listed[] | null {
  return listWithInodes(fd)?.entries ?? null;
}

/**
 * listNatively, with each entry's inode number as the directory gives it
 * (d_ino; -1 past 2^53), or null without the addon. On the filesystems
 * oats stores on (ext4, xfs, btrfs, tmpfs) it is the entry's st_ino; a
 * caller that must be sure compares it only with inodes it fstat'd itself.
 */
export function listWithInodes(fd: number): { entries: Listed[]; inodes: Float64Array } | null {
  const native = nativeReads();
  if (native === null) return null;
  const listed = native.listDirectory(fd);
  if (typeof listed === "number") throw nativeError(-listed, STEP_READ);
  const { names, types, inodes } = listed;
  const entries: Listed[] = new Array(types.length);
  let start = 0;
  for (let index = 0; index < types.length; index++) {
    if (types[index] === 0) throw nativeError(ENOENT, STEP_READ);
    const end = names.indexOf(0, start);
    // Decoded as readdir decodes (an invalid sequence becomes U+FFFD), each into a string of its own: slices of one
    // string per directory kept those strings alive with every name and grew the young generation (row 25b: 87 ->
    // 103 MiB).
    entries[index] = new NativeEntry(names.toString("utf8", start, end), types[index]!);
    start = end + 1;
  }
  return { entries, inodes };
}

const stat = new Float64Array(4);

/** An open directory and what fstat said of it; `native` when the addon opened it, and must close it (closeOpened). */
export interface OpenedDirectory {
  readonly fd: number;
  readonly dev: number;
  readonly ino: number;
  readonly mode: number;
  readonly native?: NativeAddon;
}

/** The directory `name` inside the open directory `parentFd`, opened without following a symlink, and its fstat; null
 * without the addon. */
export function openChildNatively(parentFd: number, name: string): OpenedDirectory | null {
  const native = nativeReads();
  if (native === null) return null;
  const fd = native.openDirectoryAt(parentFd, name, stat);
  if (fd < 0) throw nativeError(-fd, stat[3]!);
  return { fd, dev: stat[0]!, ino: stat[1]!, mode: stat[2]!, native };
}

/** Close an open directory the way it was opened: Node closes only what Node opened. */
export function closeOpened(directory: { readonly fd: number; readonly native?: NativeAddon }): void {
  if (directory.native === undefined) {
    closeSync(directory.fd);
    return;
  }
  const result = directory.native.closeDirectory(directory.fd);
  if (result < 0) throw nativeError(-result, STEP_CLOSE);
}
