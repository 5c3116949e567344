import { lstatSync } from "node:fs";
import { join } from "node:path";
import { hashFilesInLanes } from "../parallel/pool.js";
import { walkTree, type TreeListing, type WalkOptions } from "../digest/walk.js";
import type { FileHash } from "../parallel/file-hashes.js";
import { heldMode } from "./modes.js";
import type { WrittenFile } from "./sharing-writer.js";

/**
 * The read-back of a staged tree made mostly of links to held files, by
 * structure where the bytes were just verified (docs/design/retention.md,
 * "The shared file layer", Publication).
 *
 * A linked staged file's bytes are its inode's, and that inode was hashed
 * in this publication (its held file, verified before it was linked, with
 * the SHA-256, size and exec bit the source's file had in the copy pass).
 * Reading it again would hash the same inode a second time. Instead its
 * staged path must still be that inode (device and inode), as large, with
 * the modification time the verification's fstat saw (a write moves it) and
 * the held file's read-only mode (0444, or 0555 with the exec bit). A file
 * the pass wrote is read back and hashed (two lanes) and must have the
 * SHA-256, size and exec bit the pass measured from the source. The staged
 * walk must list the stored listing's leaves exactly (paths, types, link
 * text) and as many directories.
 *
 * Then every leaf of the staged tree has the path, type, exec bit, link
 * text and bytes (by SHA-256) of the source's leaf the copy pass hashed,
 * and the tree-exec digest is a function of exactly those: the staged
 * tree's digest is the one the pass measured over the source's bytes.
 *
 * Anything else answers false, and the caller reads the staged tree back in
 * full as before: the verdict is then that read's hash. This check only
 * decides when the full read may be skipped; it never passes a tree the
 * full read would refuse.
 */
export async function stagedByStructure(
  staging: string,
  stored: TreeListing,
  linked: ReadonlyMap<string, FileHash>,
  written: ReadonlyMap<string, WrittenFile>,
  walk: WalkOptions,
): Promise<boolean> {
  const listing = await walkTree(staging, walk);
  if (listing.leaves.length !== stored.leaves.length || listing.directories.length !== stored.directories.length)
    return false;
  const toHash: { path: string; expected: WrittenFile }[] = [];
  for (let i = 0; i < listing.leaves.length; i++) {
    const leaf = listing.leaves[i]!;
    const source = stored.leaves[i]!;
    if (leaf.path !== source.path || leaf.type !== source.type) return false;
    if (leaf.type === "symlink") {
      if (source.type !== "symlink" || leaf.target !== source.target) return false;
      continue;
    }
    const verified = linked.get(leaf.path);
    if (verified) {
      if (!sameInode(join(staging, leaf.path), verified)) return false;
      continue;
    }
    const expected = written.get(leaf.path);
    if (!expected) return false;
    toHash.push({ path: leaf.path, expected });
  }
  const hashes = await hashFilesInLanes(toHash.map((file) => join(staging, file.path)));
  return toHash.every(({ expected }, index) => {
    const found = hashes[index] ?? null;
    return (
      found !== null &&
      found.sha256 === expected.sha256 &&
      found.size === expected.size &&
      found.mode === heldMode(expected.exec)
    );
  });
}

/** The staged path is still the verified held file's inode, unwritten since, and read-only. */
function sameInode(path: string, verified: FileHash): boolean {
  let stats;
  try {
    stats = lstatSync(path);
  } catch {
    return false;
  }
  const exec = (verified.mode & 0o100) !== 0;
  return (
    stats.isFile() &&
    stats.dev === verified.dev &&
    stats.ino === verified.ino &&
    stats.size === verified.size &&
    stats.mtimeMs === verified.mtimeMs &&
    (stats.mode & 0o7777) === heldMode(exec)
  );
}
