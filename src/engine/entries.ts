/**
 * What the engine reads: the entries of a tree as a walk lists them
 * (src/retention/digest/walk.ts makes them). A file or symlink is reached
 * through its parent directory, whose device and inode the walk saw, so the
 * reads can open it inside that directory's descriptor and check that the
 * directory is still the one listed (directory-cursor.ts).
 */

export interface FileEntry {
  readonly type: "file";
  readonly name: string;
  /** Relative POSIX path inside the tree. */
  readonly path: string;
  /** For messages and for trees that are ours (staging); reads go through `parent`. */
  readonly absolute: string;
  readonly parent: DirectoryEntry;
}

export interface SymlinkEntry {
  readonly type: "symlink";
  readonly name: string;
  readonly path: string;
  readonly absolute: string;
  /** The link text, verbatim. */
  readonly target: string;
  readonly parent: DirectoryEntry;
}

export interface DirectoryEntry {
  readonly type: "directory";
  readonly name: string;
  readonly path: string;
  readonly absolute: string;
  /** Children in the order the directory listed them; legacyOrder() collates. */
  readonly children: TreeEntry[];
  /** Null for the root. */
  readonly parent: DirectoryEntry | null;
  /** As the walk's own descriptor saw it: the reads check dev and ino again; mode is what a copy gets (masked). */
  readonly dev: number;
  readonly ino: number;
  readonly mode: number;
}

export type LeafEntry = FileEntry | SymlinkEntry;
export type TreeEntry = LeafEntry | DirectoryEntry;
