import { readdirSync, readlinkSync, type Dirent } from "node:fs";
import { OatsError } from "../../core/index.js";
import {
  DIRECTORY_FDS,
  changedOrUnreadable,
  closeOpened,
  inDirectory,
  listNatively,
  listingPath,
  openChildDirectory,
  openRoot,
  prefetchMode,
  warmDirectories,
  type DirectoryEntry,
  type FileEntry,
  type LeafEntry,
  type Listed,
  type OpenedDirectory,
  type Prefetcher,
  type SymlinkEntry,
} from "../../engine/index.js";
import { BEYOND_UTF16_ORDER, compareSiblingBytes, compareSiblings } from "./order.js";

/**
 * One walk of a directory tree, never following a symlink. It lists what a
 * digest or a copy needs and refuses what no format can name: special files
 * and names or link targets that are not valid UTF-8.
 *
 * It cannot be redirected. O_NOFOLLOW guards only the last component of a
 * path, so a directory inside the tree swapped for a symlink between the
 * listing and a read would take a path-based walk outside the tree (to
 * anything the retaining user can read). On Linux every directory is
 * therefore opened relative to its already-open parent, through
 * /proc/self/fd/<parent>/<name> with O_DIRECTORY|O_NOFOLLOW: that is
 * openat() semantics, so each directory reached is really the child of the
 * one above it, back to the root (the engine opens them:
 * src/engine/directories.ts). Directories are listed, symlinks read and
 * (the engine's reads) files opened through such a descriptor, and a
 * directory opened again for the reads must have the device and inode the
 * walk saw. A swap is then a refusal (`invalid-artifact`,
 * `changed-while-reading`), never a read from outside. Elsewhere the walk
 * falls back to paths.
 */

export interface TreeListing {
  readonly root: DirectoryEntry;
  /** Every file and symlink, sorted by the UTF-8 bytes of the path (tree-exec order; see compareSiblings in
   * order.ts). */
  readonly leaves: LeafEntry[];
  /** Every directory below the root, children before their parents. */
  readonly directories: DirectoryEntry[];
  /** The walk read from the disk (the page cache was cold): the reads may start their read-ahead at once
   * (ReadOptions.cold, src/engine/file-reader.ts). */
  readonly cold?: boolean;
}

/**
 * A file or symlink of a listing holds its name and parent; its path and
 * absolute path are spelled on each use. A listing of 20,000 files is held
 * twice during a retain (the source and the staged copy), and each of its
 * strings outlives the young generation: with both paths stored, the leaves
 * took about 5 MiB per listing and their survival grew V8's young
 * generation to its 32 MiB maximum (docs/design/performance.md, "Peak memory of a retain").
 * A path is one concatenation with the parent directory's stored path.
 */
class Leaf {
  constructor(
    readonly name: string,
    readonly parent: DirectoryEntry,
  ) {}
  get path(): string {
    const above = this.parent.path;
    return above ? `${above}/${this.name}` : this.name;
  }
  get absolute(): string {
    return `${this.parent.absolute}/${this.name}`;
  }
}

class FileLeaf extends Leaf implements FileEntry {
  readonly type = "file";
}

class SymlinkLeaf extends Leaf implements SymlinkEntry {
  readonly type = "symlink";
  constructor(
    name: string,
    parent: DirectoryEntry,
    readonly target: string,
  ) {
    super(name, parent);
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
function notUtf8(raw: Buffer, parentPath: string, what: string): OatsError {
  const shown = raw.toString("latin1");
  return new OatsError(
    "invalid-artifact",
    `${what} is not valid UTF-8: ${parentPath ? `${parentPath}/` : ""}${JSON.stringify(shown)}`,
    {
      path: parentPath ? `${parentPath}/${shown}` : shown,
      reason: "non-utf8-name",
    },
  );
}

/**
 * Names are listed as strings, which Node decodes lossily. Only a listing
 * that shows U+FFFD can hide an invalid name, and only then is the directory
 * listed again as raw bytes to tell a real U+FFFD from an invalid sequence.
 */
function checkNamesAreUtf8(absolute: string, path: string): void {
  const raw = readdirSync(absolute, { encoding: "buffer" });
  for (const name of raw) {
    try {
      utf8.decode(name);
    } catch {
      throw notUtf8(name, path, "file name");
    }
  }
}

function refuseSpecial(entry: Dirent<Buffer> | Listed, path: string): never {
  const type = entry.isFIFO()
    ? "FIFO"
    : entry.isSocket()
      ? "socket"
      : entry.isBlockDevice() || entry.isCharacterDevice()
        ? "device"
        : "special file";
  throw new OatsError("invalid-artifact", `unsupported ${type} in tree: ${path}`, {
    path,
    reason: "special-file",
    type,
  });
}

/**
 * Block reads (getrusage's ru_inblock, 512-byte units) since the walk began
 * that mark a cold cache: eight 4 KiB blocks, a few directories' worth. A
 * walk of a warm tree does none.
 */
const COLD_WALK_BLOCK_READS = 64;

/** Far deeper than any real package tree (this project's node_modules reaches 7); the extractor's default name depth
 * too. */
export const DEFAULT_MAX_DEPTH = 256;

export interface WalkOptions {
  /** The most segments a path in the tree may have; a deeper tree is `invalid-artifact` (`too-deep`). */
  readonly maxDepth?: number;
}

function tooDeep(path: string, depth: number, limit: number): OatsError {
  const shown = path.length <= 256 ? path : `${path.slice(0, 256)}...`;
  return new OatsError("invalid-artifact", `tree is deeper than the limit of ${limit} levels at ${shown}`, {
    path: shown,
    reason: "too-deep",
    limit,
    depth,
  });
}

/** One directory being listed: the walk keeps these on its own stack, never the JavaScript one. */
interface Frame {
  readonly directory: DirectoryEntry;
  /** The directory's own descriptor, closed when the frame is popped (or by the walk's finally). */
  readonly fd: number;
  /** Set when the addon opened it (closeOpened). */
  readonly native?: OpenedDirectory["native"];
  /** Filled once the frame holds the descriptor, so a failed listing still closes it. */
  listed: Listed[];
  readonly depth: number;
  next: number;
}

function listDirectory(fd: number, absolute: string, path: string): Listed[] {
  try {
    // Synchronous, like the small-file reads: one readdir is cheaper than
    // the thread-pool round trip that would carry it.
    const at = listingPath(fd, absolute);
    const listed = listNatively(fd) ?? readdirSync(at, { withFileTypes: true });
    let beyond = false;
    for (const entry of listed) if (BEYOND_UTF16_ORDER.test(entry.name)) beyond = true;
    if (beyond && listed.some((entry) => entry.name.includes("\uFFFD"))) checkNamesAreUtf8(at, path);
    listed.sort(beyond ? compareSiblingBytes : compareSiblings);
    return listed;
  } catch (error) {
    throw error instanceof OatsError ? error : changedOrUnreadable(error, path || ".");
  }
}

function readSymlink(at: string, path: string): string {
  let targetRaw: Buffer;
  try {
    targetRaw = readlinkSync(at, { encoding: "buffer" });
  } catch (error) {
    // EINVAL: what was listed as a symlink is no longer one.
    throw changedOrUnreadable(error, path);
  }
  try {
    return utf8.decode(targetRaw);
  } catch {
    throw notUtf8(targetRaw, path, "symlink target of");
  }
}

/**
 * Depth first, siblings in tree-exec order, with an explicit stack: a tree
 * deeper than `maxDepth` is refused when the walk first steps below the
 * limit, before anything under it is listed. One descriptor is open per
 * level being listed.
 */
export async function walkTree(rootAbsolute: string, options: WalkOptions = {}): Promise<TreeListing> {
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_DEPTH;
  const leaves: LeafEntry[] = [];
  const directories: DirectoryEntry[] = [];
  const stack: Frame[] = [];
  const mode = prefetchMode();
  let warming: Prefetcher | null = null;
  let watchCold = mode === "auto" && DIRECTORY_FDS;
  let listings = 0;
  const blockReadsAtStart = watchCold ? process.resourceUsage().fsRead : 0;
  try {
    const opened = openRoot(rootAbsolute);
    const root: DirectoryEntry = {
      type: "directory",
      name: "",
      path: "",
      absolute: rootAbsolute,
      children: [],
      parent: null,
      dev: opened.dev,
      ino: opened.ino,
      mode: opened.mode,
    };
    const top: Frame = { directory: root, fd: opened.fd, listed: [], depth: 0, next: 0 };
    stack.push(top);
    top.listed = listDirectory(opened.fd, rootAbsolute, "");
    if (mode === "always" && DIRECTORY_FDS) warming = warmDirectories(top.fd, maxDepth);
    while (stack.length > 0) {
      const frame = stack[stack.length - 1]!;
      if (frame.next === frame.listed.length) {
        stack.pop();
        closeOpened(frame);
        // Children before their parents.
        if (frame.directory.path) directories.push(frame.directory);
        continue;
      }
      const entry = frame.listed[frame.next++]!;
      const parent = frame.directory;
      const name = entry.name;
      const childPath = parent.path ? `${parent.path}/${name}` : name;
      if (frame.depth + 1 > maxDepth) throw tooDeep(childPath, frame.depth + 1, maxDepth);
      if (entry.isDirectory()) {
        const childAbsolute = `${parent.absolute}/${name}`;
        const child = openChildDirectory(frame.fd, parent.absolute, name, childPath);
        const directory: DirectoryEntry = {
          type: "directory",
          name,
          path: childPath,
          absolute: childAbsolute,
          children: [],
          parent,
          dev: child.dev,
          ino: child.ino,
          mode: child.mode,
        };
        const below: Frame = {
          directory,
          fd: child.fd,
          native: child.native,
          listed: [],
          depth: frame.depth + 1,
          next: 0,
        };
        stack.push(below);
        below.listed = listDirectory(child.fd, childAbsolute, childPath);
        parent.children.push(directory);
        // Every eighth listing, until the disk shows: then threads list the rest ahead of this
        // walk (engine/prefetch.ts).
        if (
          watchCold &&
          (++listings & 7) === 0 &&
          process.resourceUsage().fsRead - blockReadsAtStart >= COLD_WALK_BLOCK_READS
        ) {
          watchCold = false;
          warming = warmDirectories(top.fd, maxDepth);
        }
      } else if (entry.isFile()) {
        const file = new FileLeaf(name, parent);
        parent.children.push(file);
        leaves.push(file);
      } else if (entry.isSymbolicLink()) {
        const link = new SymlinkLeaf(
          name,
          parent,
          readSymlink(inDirectory(frame.fd, parent.absolute, name), childPath),
        );
        parent.children.push(link);
        leaves.push(link);
      } else {
        refuseSpecial(entry, childPath);
      }
    }
    const cold =
      warming !== null || (watchCold && process.resourceUsage().fsRead - blockReadsAtStart >= COLD_WALK_BLOCK_READS);
    return { root, leaves, directories, cold };
  } finally {
    warming?.stop();
    for (const frame of stack) closeOpened(frame);
  }
}
