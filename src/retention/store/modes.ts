import { chmodSync, lstatSync } from "node:fs";
import { join } from "node:path";
import type { TreeListing } from "../digest/walk.js";

/**
 * Retained trees are read-only to everyone but their owner (contract
 * section 3: group and other never get write permission on anything in a
 * store). A source with 0666/0777 modes (umask 000, vfat, 9p, WSL mounts)
 * would otherwise be retained writable by every local user, who could then
 * rewrite approved code between verification and exec. Setuid, setgid and
 * sticky are dropped too. Only the owner-exec bit is identity
 * (oats.tree-exec.v1), so masking never changes a digest.
 */
export const RETAINED_MODE_MASK = 0o755;

/** The mode a retained file or directory gets for a source `mode`. */
export function retainedMode(mode: number): number {
  return mode & RETAINED_MODE_MASK;
}

/**
 * Mask the modes of a tree written elsewhere and adopted into staging (an
 * extraction). Our extractor already writes 0644/0755 files and 0755
 * directories; this makes the guarantee publishAdopted's, whoever wrote the
 * tree. `dir` is staging, which only this process writes to, so lstat then
 * chmod cannot be raced by another user.
 */
export function maskAdoptedModes(dir: string, listing: TreeListing): void {
  const mask = (path: string) => {
    const mode = lstatSync(path).mode & 0o7777;
    if (mode !== retainedMode(mode)) chmodSync(path, retainedMode(mode));
  };
  for (const leaf of listing.leaves) if (leaf.type === "file") mask(join(dir, leaf.path));
  for (const directory of listing.directories) mask(join(dir, directory.path));
  mask(dir);
}

/**
 * The shared file layer's modes (shared-layer.ts): a held file, and so every
 * revision's regular file (a hard link to it), is 0444, or 0555 when its
 * owner-exec bit is set; every directory of a published revision is 0555.
 * Nobody, the owner included, writes a published revision without first
 * changing a mode, which fsck reports.
 */
export const HELD_FILE_MODE = 0o444;
export const HELD_EXEC_MODE = 0o555;
export const REVISION_DIRECTORY_MODE = 0o555;

export function heldMode(exec: boolean): number {
  return exec ? HELD_EXEC_MODE : HELD_FILE_MODE;
}
