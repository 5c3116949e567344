import { rmdirSync } from "node:fs";
import { join } from "node:path";
import { asStepError } from "../../core/index.js";
import type { DirectoryEntry } from "../../engine/index.js";
import type { TreeListing } from "../digest/walk.js";

/**
 * A store holds exactly what tree identity covers (contract section 2:
 * directories add nothing, so an empty one is outside every format). A
 * directory that holds no file or symlink at any depth is therefore never
 * retained: kept, it would make two revisions with one digest different
 * trees (a host that pulled it, or imported it from a bundle that never
 * carried it, would run without it). Retain drops such directories and says
 * so in its receipt (LeftOut).
 */

/** How many dropped paths a receipt names; the count is always whole. */
export const LEFT_OUT_PATHS = 20;

/** What a retain left out of the stored tree because identity does not cover it. */
export interface LeftOut {
  /** How many directories below the root held no file or symlink at any depth. */
  readonly emptyDirectories: number;
  /** The first LEFT_OUT_PATHS of them, relative to the tree, in the order of their UTF-8 bytes. */
  readonly paths: readonly string[];
}

/** The directories of `listing` under which no leaf lies, children before their parents (the listing's order). */
export function emptyDirectories(listing: TreeListing): DirectoryEntry[] {
  if (listing.directories.length === 0) return [];
  const holding = new Set<DirectoryEntry>();
  for (const leaf of listing.leaves) {
    for (let directory: DirectoryEntry | null = leaf.parent; directory?.parent; directory = directory.parent) {
      if (holding.has(directory)) break;
      holding.add(directory);
    }
  }
  if (holding.size === listing.directories.length) return [];
  return listing.directories.filter((directory) => !holding.has(directory));
}

/** The listing without its empty directories (the same listing when it has none). */
export function withoutDirectories(listing: TreeListing, empty: readonly DirectoryEntry[]): TreeListing {
  if (empty.length === 0) return listing;
  const dropped = new Set(empty);
  return { ...listing, directories: listing.directories.filter((directory) => !dropped.has(directory)) };
}

/** The receipt's account of the dropped directories; undefined when none was. */
export function leftOut(empty: readonly DirectoryEntry[]): LeftOut | undefined {
  if (empty.length === 0) return undefined;
  const paths = empty.map((directory) => directory.path).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  return { emptyDirectories: empty.length, paths: paths.slice(0, LEFT_OUT_PATHS) };
}

/**
 * Remove the empty directories of a tree adopted into staging (only this
 * process writes there), deepest first, so a directory that held only empty
 * ones is empty when its turn comes.
 */
export function removeEmptyDirectories(staging: string, empty: readonly DirectoryEntry[]): void {
  for (const directory of empty) {
    try {
      rmdirSync(join(staging, directory.path));
    } catch (error) {
      throw asStepError("adopt", error, { path: directory.path });
    }
  }
}
