import { closeSync, constants, fstatSync, lstatSync, openSync, readdirSync, type Stats } from "node:fs";
import { listWithInodes, type Listed } from "../engine/index.js";

/**
 * The walk of a stored revision's structure that fsck's layer check makes
 * (layer-check.ts): every entry, never through a symlink, with what is
 * needed of it: its type, mode, device and inode. Each directory is
 * lstat'd, then opened (O_NOFOLLOW | O_DIRECTORY) and fstat'd, and listed
 * only when it is the directory lstat'd. A regular file whose directory
 * entry names the inode of a held file (d_ino, from the native addon's
 * listing, on the directory's device) is that held file: a hard link shares
 * the inode, so its mode, size and content are the held file's, and it is
 * not lstat'd; one lstat a file was most of the walk (50 revisions of 1,900
 * files: 1.7 s of 2 s on a loaded machine). Every other entry is lstat'd.
 */

/** What the walk gives of an entry: an lstat's answer, or for a link to a held file, the held file's. */
export type EntryStats = Pick<Stats, "isFile" | "isDirectory" | "isSymbolicLink" | "mode" | "dev" | "ino">;

/** A held file's fstat (taken when it was hashed). */
export interface HeldStats {
  readonly dev: number;
  readonly ino: number;
  /** Permission bits. */
  readonly mode: number;
}

/** Held files by device and inode number (numbers, not strings built per lookup: the walk asks once per file). */
export class HeldInodes<T extends { readonly stats: HeldStats }> {
  private readonly byDevice = new Map<number, Map<number, T>>();

  set(value: T): void {
    let inodes = this.byDevice.get(value.stats.dev);
    if (inodes === undefined) {
      inodes = new Map();
      this.byDevice.set(value.stats.dev, inodes);
    }
    inodes.set(value.stats.ino, value);
  }

  get(dev: number, ino: number): T | undefined {
    return this.byDevice.get(dev)?.get(ino);
  }

  /** The held files of one device. */
  onDevice(dev: number): ReadonlyMap<number, T> | undefined {
    return this.byDevice.get(dev);
  }
}

const S_IFREG = 0o100000;

/** A link to a held file, as the held file's fstat describes it. */
export class HeldLink<T extends { readonly stats: HeldStats }> implements EntryStats {
  readonly mode: number;
  readonly dev: number;
  readonly ino: number;
  constructor(readonly held: T) {
    this.mode = S_IFREG | held.stats.mode;
    this.dev = held.stats.dev;
    this.ino = held.stats.ino;
  }
  isFile(): boolean {
    return true;
  }
  isDirectory(): boolean {
    return false;
  }
  isSymbolicLink(): boolean {
    return false;
  }
}

/** The entries of the directory at `path` if it is still the one lstat'd (`stats`), with d_inos when the addon is
 * there; null when it cannot be listed. */
function listDirectory(path: string, stats: Stats): { entries: Listed[]; inodes: Float64Array | null } | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  } catch {
    return null;
  }
  try {
    const opened = fstatSync(fd);
    if (opened.dev !== stats.dev || opened.ino !== stats.ino) return null;
    const listed = listWithInodes(fd);
    return listed ?? { entries: readdirSync(path, { withFileTypes: true }), inodes: null };
  } catch {
    return null;
  } finally {
    closeSync(fd);
  }
}

/**
 * Visit the revision at `dir` and every entry below it (`rel` "" for the root); entries that cannot be read are
 * skipped (verification reports them). The root's lstat, or null when it cannot be read.
 */
export function walkRevision<T extends { readonly stats: HeldStats }>(
  dir: string,
  held: HeldInodes<T>,
  visit: (path: string, rel: string, stats: EntryStats) => void,
): Stats | null {
  const directory = (path: string, rel: string, stats: Stats) => {
    const listed = listDirectory(path, stats);
    if (listed === null) return;
    const { entries, inodes } = listed;
    const onDevice = inodes ? held.onDevice(stats.dev) : undefined;
    for (let index = 0; index < entries.length; index++) {
      const entry = entries[index]!;
      // `dir` is a store path (absolute, normalized) and a name holds no slash: no join() needed, which was a third
      // of the walk.
      const child = `${path}/${entry.name}`;
      const childRel = rel ? `${rel}/${entry.name}` : entry.name;
      const ino = inodes?.[index] ?? -1;
      const linked = onDevice && ino >= 0 && entry.isFile() ? onDevice.get(ino) : undefined;
      if (linked) {
        visit(child, childRel, new HeldLink<T>(linked));
        continue;
      }
      let found: Stats;
      try {
        found = lstatSync(child);
      } catch {
        continue; // gone meanwhile: verification reports it
      }
      visit(child, childRel, found);
      if (found.isDirectory()) directory(child, childRel, found);
    }
  };
  let root: Stats;
  try {
    root = lstatSync(dir);
  } catch {
    return null;
  }
  visit(dir, "", root);
  if (root.isDirectory()) directory(dir, "", root);
  return root;
}
