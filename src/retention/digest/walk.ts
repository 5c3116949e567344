import { promises as fsp, readdirSync, type Dirent } from "node:fs";
import { OatsError, errnoCode } from "../../errors.js";

/**
 * One walk of a directory tree, never following a symlink. It lists what a
 * digest or a copy needs and refuses what no format can name: special files
 * and names or link targets that are not valid UTF-8.
 */

export interface FileEntry {
  readonly type: "file";
  readonly name: string;
  /** Relative POSIX path inside the tree. */
  readonly path: string;
  readonly absolute: string;
}

export interface SymlinkEntry {
  readonly type: "symlink";
  readonly name: string;
  readonly path: string;
  readonly absolute: string;
  /** The link text, verbatim. */
  readonly target: string;
}

export interface DirectoryEntry {
  readonly type: "directory";
  readonly name: string;
  readonly path: string;
  readonly absolute: string;
  /** Children in the order the directory listed them; legacyOrder() collates. */
  readonly children: TreeEntry[];
}

export type LeafEntry = FileEntry | SymlinkEntry;
export type TreeEntry = LeafEntry | DirectoryEntry;

export interface TreeListing {
  readonly root: DirectoryEntry;
  /** Every file and symlink, sorted by the UTF-8 bytes of the path (tree-exec order; see compareSiblings). */
  readonly leaves: LeafEntry[];
  /** Every directory below the root, children before their parents. */
  readonly directories: DirectoryEntry[];
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
/** Built on first use: constructing it loads ICU collation data (~10 ms), which only legacy digests need. */
let collator: Intl.Collator | undefined;

function notUtf8(raw: Buffer, parentPath: string, what: string): OatsError {
  const shown = raw.toString("latin1");
  return new OatsError("invalid-artifact", `${what} is not valid UTF-8: ${parentPath ? `${parentPath}/` : ""}${JSON.stringify(shown)}`, {
    path: parentPath ? `${parentPath}/${shown}` : shown,
    reason: "non-utf8-name",
  });
}

/**
 * Names are listed as strings, which Node decodes lossily. Only a listing
 * that shows U+FFFD can hide an invalid name, and only then is the directory
 * listed again as raw bytes to tell a real U+FFFD from an invalid sequence.
 */
async function checkNamesAreUtf8(absolute: string, path: string): Promise<void> {
  const raw = await fsp.readdir(absolute, { encoding: "buffer" });
  for (const name of raw) {
    try {
      utf8.decode(name);
    } catch {
      throw notUtf8(name, path, "file name");
    }
  }
}

function refuseSpecial(entry: Dirent<Buffer> | Dirent, path: string): never {
  const type = entry.isFIFO() ? "FIFO" : entry.isSocket() ? "socket" : entry.isBlockDevice() || entry.isCharacterDevice() ? "device" : "special file";
  throw new OatsError("invalid-artifact", `unsupported ${type} in tree: ${path}`, { path, reason: "special-file", type });
}

/** Legacy collation, with a byte-order tie-break so that names the collator deems equal still sort one way. */
export function compareLegacyNames(a: string, b: string): number {
  collator ??= new Intl.Collator("en-US");
  return collator.compare(a, b) || Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/**
 * UTF-16 code units from U+D800 up: where comparing JS strings stops agreeing
 * with comparing their UTF-8 bytes (a surrogate pair sorts below U+E000..U+FFFF
 * as UTF-16, above it as UTF-8). U+FFFD, the mark of a name Node could not
 * decode, is among them.
 */
const BEYOND_UTF16_ORDER = /[\uD800-\uFFFF]/;

/**
 * Siblings in tree-exec order: by the UTF-8 bytes of their names, a directory
 * taken as its name followed by "/" (which every path below it starts with).
 * Visiting sorted siblings depth first then yields every leaf in the order of
 * the UTF-8 bytes of its full path, with no sort of the whole tree. Names are
 * distinct and hold no "/", so only a name that is a prefix of its sibling's
 * needs the "/" looked at. For names below U+D800, UTF-16 order is UTF-8 order.
 */
function compareSiblings(a: Dirent, b: Dirent): number {
  const x = a.name;
  const y = b.name;
  if (x.length < y.length && a.isDirectory() && y.startsWith(x)) return "/" < y[x.length]! ? -1 : 1;
  if (y.length < x.length && b.isDirectory() && x.startsWith(y)) return x[y.length]! < "/" ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}

const siblingKey = (entry: Dirent): Buffer => Buffer.from(entry.isDirectory() ? `${entry.name}/` : entry.name);

function compareSiblingBytes(a: Dirent, b: Dirent): number {
  return Buffer.compare(siblingKey(a), siblingKey(b));
}

/** Far deeper than any real package tree (this project's node_modules reaches 7); the extractor's default name depth too. */
export const DEFAULT_MAX_DEPTH = 256;

export interface WalkOptions {
  /** The most segments a path in the tree may have; a deeper tree is `invalid-artifact` (`too-deep`). */
  readonly maxDepth?: number;
}

function tooDeep(path: string, depth: number, limit: number): OatsError {
  const shown = path.length <= 256 ? path : `${path.slice(0, 256)}...`;
  return new OatsError("invalid-artifact", `tree is deeper than the limit of ${limit} levels at ${shown}`, { path: shown, reason: "too-deep", limit, depth });
}

/** One directory being listed: the walk keeps these on its own stack, never the JavaScript one. */
interface Frame {
  readonly directory: DirectoryEntry;
  readonly listed: Dirent[];
  readonly depth: number;
  next: number;
}

async function listDirectory(absolute: string, path: string): Promise<Dirent[]> {
  try {
    // Synchronous, like the small-file reads: one readdir is cheaper than
    // the thread-pool round trip that would carry it.
    const listed = readdirSync(absolute, { withFileTypes: true });
    let beyond = false;
    for (const entry of listed) if (BEYOND_UTF16_ORDER.test(entry.name)) beyond = true;
    if (beyond && listed.some((entry) => entry.name.includes("\uFFFD"))) await checkNamesAreUtf8(absolute, path);
    listed.sort(beyond ? compareSiblingBytes : compareSiblings);
    return listed;
  } catch (error) {
    throw error instanceof OatsError ? error : changedOrUnreadable(error, path || ".");
  }
}

async function readSymlink(absolute: string, path: string): Promise<string> {
  let targetRaw: Buffer;
  try {
    targetRaw = await fsp.readlink(absolute, { encoding: "buffer" });
  } catch (error) {
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
 * limit, before anything under it is listed.
 */
export async function walkTree(rootAbsolute: string, options: WalkOptions = {}): Promise<TreeListing> {
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_DEPTH;
  const leaves: LeafEntry[] = [];
  const directories: DirectoryEntry[] = [];
  const root: DirectoryEntry = { type: "directory", name: "", path: "", absolute: rootAbsolute, children: [] };
  const stack: Frame[] = [{ directory: root, listed: await listDirectory(rootAbsolute, ""), depth: 0, next: 0 }];
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!;
    if (frame.next === frame.listed.length) {
      stack.pop();
      // Children before their parents.
      if (frame.directory.path) directories.push(frame.directory);
      continue;
    }
    const entry = frame.listed[frame.next++]!;
    const parent = frame.directory;
    const name = entry.name;
    const childPath = parent.path ? `${parent.path}/${name}` : name;
    const childAbsolute = `${parent.absolute}/${name}`;
    if (frame.depth + 1 > maxDepth) throw tooDeep(childPath, frame.depth + 1, maxDepth);
    if (entry.isDirectory()) {
      const directory: DirectoryEntry = { type: "directory", name, path: childPath, absolute: childAbsolute, children: [] };
      parent.children.push(directory);
      stack.push({ directory, listed: await listDirectory(childAbsolute, childPath), depth: frame.depth + 1, next: 0 });
    } else if (entry.isFile()) {
      const file: FileEntry = { type: "file", name, path: childPath, absolute: childAbsolute };
      parent.children.push(file);
      leaves.push(file);
    } else if (entry.isSymbolicLink()) {
      const link: SymlinkEntry = { type: "symlink", name, path: childPath, absolute: childAbsolute, target: await readSymlink(childAbsolute, childPath) };
      parent.children.push(link);
      leaves.push(link);
    } else {
      refuseSpecial(entry, childPath);
    }
  }
  return { root, leaves, directories };
}

/** Legacy order: depth-first pre-order over the collated children (an explicit stack, like the walk). */
export function legacyOrder(root: DirectoryEntry): LeafEntry[] {
  const out: LeafEntry[] = [];
  const collate = (directory: DirectoryEntry) => [...directory.children].sort((a, b) => compareLegacyNames(a.name, b.name));
  const stack: { children: TreeEntry[]; next: number }[] = [{ children: collate(root), next: 0 }];
  while (stack.length > 0) {
    const frame = stack[stack.length - 1]!;
    if (frame.next === frame.children.length) {
      stack.pop();
      continue;
    }
    const child = frame.children[frame.next++]!;
    if (child.type === "directory") stack.push({ children: collate(child), next: 0 });
    else out.push(child);
  }
  return out;
}

export function changedOrUnreadable(error: unknown, path: string): OatsError {
  const code = errnoCode(error);
  if (code === "ENOENT" || code === "ENOTDIR" || code === "ELOOP") {
    return new OatsError("invalid-artifact", `tree changed while it was read: ${path}`, { path, reason: "changed-while-reading", errno: code }, { cause: error });
  }
  if (code === "ENAMETOOLONG") {
    return new OatsError("invalid-artifact", `path too long to open: ${path.length <= 256 ? path : `${path.slice(0, 256)}...`}`, { path: path.slice(0, 256), reason: "path-too-long", errno: code }, { cause: error });
  }
  if (code === "EACCES" || code === "EPERM") {
    return new OatsError("invalid-artifact", `cannot read ${path}: permission denied`, { path, reason: "unreadable", errno: code }, { cause: error });
  }
  return new OatsError("internal-error", `reading ${path} failed: ${error instanceof Error ? error.message : String(error)}`, { step: "read", path, errno: code }, { cause: error });
}
