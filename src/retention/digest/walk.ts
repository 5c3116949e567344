import { promises as fsp, type Dirent } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode } from "../../errors.js";

/**
 * One walk of a directory tree, never following a symlink. It lists what a
 * digest or a copy needs and refuses what no format can name: special files
 * and names or link targets that are not valid UTF-8.
 */

export interface FileEntry {
  readonly type: "file";
  /** Relative POSIX path inside the tree. */
  readonly path: string;
  readonly absolute: string;
}

export interface SymlinkEntry {
  readonly type: "symlink";
  readonly path: string;
  readonly absolute: string;
  /** The link text, verbatim. */
  readonly target: string;
}

export interface DirectoryEntry {
  readonly type: "directory";
  readonly path: string;
  readonly absolute: string;
  /** Children in legacy order (en-US collation of names). */
  readonly children: TreeEntry[];
}

export type LeafEntry = FileEntry | SymlinkEntry;
export type TreeEntry = LeafEntry | DirectoryEntry;

export interface TreeListing {
  readonly root: DirectoryEntry;
  /** Every file and symlink, sorted by the UTF-8 bytes of the path (tree-exec order). */
  readonly leaves: LeafEntry[];
  /** Every directory below the root, parents before children. */
  readonly directories: DirectoryEntry[];
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const collator = new Intl.Collator("en-US");

function decodeName(raw: Buffer, parentPath: string, what: string): string {
  try {
    return utf8.decode(raw);
  } catch {
    const shown = raw.toString("latin1");
    throw new OatsError("invalid-artifact", `${what} is not valid UTF-8: ${parentPath ? `${parentPath}/` : ""}${JSON.stringify(shown)}`, {
      path: parentPath ? `${parentPath}/${shown}` : shown,
      reason: "non-utf8-name",
    });
  }
}

function refuseSpecial(entry: Dirent<Buffer> | Dirent, path: string): never {
  const type = entry.isFIFO() ? "FIFO" : entry.isSocket() ? "socket" : entry.isBlockDevice() || entry.isCharacterDevice() ? "device" : "special file";
  throw new OatsError("invalid-artifact", `unsupported ${type} in tree: ${path}`, { path, reason: "special-file", type });
}

/** Legacy collation, with a byte-order tie-break so that names the collator deems equal still sort one way. */
export function compareLegacyNames(a: string, b: string): number {
  return collator.compare(a, b) || Buffer.compare(Buffer.from(a), Buffer.from(b));
}

export function compareExecPaths(a: LeafEntry, b: LeafEntry): number {
  return Buffer.compare(Buffer.from(a.path), Buffer.from(b.path));
}

export async function walkTree(rootAbsolute: string): Promise<TreeListing> {
  const leaves: LeafEntry[] = [];
  const directories: DirectoryEntry[] = [];

  async function walkDirectory(absolute: string, path: string): Promise<DirectoryEntry> {
    let raw: Dirent<Buffer>[];
    try {
      raw = (await fsp.readdir(absolute, { withFileTypes: true, encoding: "buffer" })) as unknown as Dirent<Buffer>[];
    } catch (error) {
      throw changedOrUnreadable(error, path || ".");
    }
    const named = raw.map((entry) => ({ entry, name: decodeName(entry.name as unknown as Buffer, path, "file name") }));
    named.sort((x, y) => compareLegacyNames(x.name, y.name));
    const children: TreeEntry[] = [];
    for (const { entry, name } of named) {
      const childPath = path ? `${path}/${name}` : name;
      const childAbsolute = join(absolute, name);
      if (entry.isDirectory()) {
        const directory = await walkDirectory(childAbsolute, childPath);
        children.push(directory);
      } else if (entry.isFile()) {
        const file: FileEntry = { type: "file", path: childPath, absolute: childAbsolute };
        children.push(file);
        leaves.push(file);
      } else if (entry.isSymbolicLink()) {
        let targetRaw: Buffer;
        try {
          targetRaw = await fsp.readlink(childAbsolute, { encoding: "buffer" });
        } catch (error) {
          throw changedOrUnreadable(error, childPath);
        }
        const link: SymlinkEntry = { type: "symlink", path: childPath, absolute: childAbsolute, target: decodeName(targetRaw, childPath, "symlink target of") };
        children.push(link);
        leaves.push(link);
      } else {
        refuseSpecial(entry, childPath);
      }
    }
    const directory: DirectoryEntry = { type: "directory", path, absolute, children };
    if (path) directories.push(directory);
    return directory;
  }

  const root = await walkDirectory(rootAbsolute, "");
  leaves.sort(compareExecPaths);
  directories.sort((a, b) => a.path.split("/").length - b.path.split("/").length);
  return { root, leaves, directories };
}

/** Legacy order: depth-first pre-order over the collated children. */
export function legacyOrder(root: DirectoryEntry): LeafEntry[] {
  const out: LeafEntry[] = [];
  const visit = (directory: DirectoryEntry): void => {
    for (const child of directory.children) {
      if (child.type === "directory") visit(child);
      else out.push(child);
    }
  };
  visit(root);
  return out;
}

export function changedOrUnreadable(error: unknown, path: string): OatsError {
  const code = errnoCode(error);
  if (code === "ENOENT" || code === "ENOTDIR" || code === "ELOOP") {
    return new OatsError("invalid-artifact", `tree changed while it was read: ${path}`, { path, reason: "changed-while-reading", errno: code }, { cause: error });
  }
  if (code === "EACCES" || code === "EPERM") {
    return new OatsError("invalid-artifact", `cannot read ${path}: permission denied`, { path, reason: "unreadable", errno: code }, { cause: error });
  }
  return new OatsError("internal-error", `reading ${path} failed: ${error instanceof Error ? error.message : String(error)}`, { step: "read", path, errno: code }, { cause: error });
}
