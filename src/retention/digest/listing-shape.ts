import type { DirectoryEntry } from "../../engine/index.js";
import type { TreeListing } from "./walk.js";

/**
 * The shape of a listing: its leaves' types and paths, in tree-exec order,
 * as one short string. Trees of the same shape have the same string; trees
 * of different shapes almost never do. A kept retain without an expected
 * digest compares the source's shape with that of the revision a worker is
 * verifying, to tell early that the source cannot hash to it (store/kept.ts).
 *
 * Only ever a hint for which path to take, never a verdict, so a fast
 * non-cryptographic hash will do: two 32-bit multiplicative hashes over each
 * leaf's type and name, and over its directory's path wherever the
 * directory changes from the leaf before (the same (directory, name)
 * sequence, the same points of change). Spelling each path and hashing
 * them with SHA-256 cost about 3 ms for 20,000 leaves, this about 1.
 */
export function listingShape(listing: TreeListing): string {
  const leaves = listing.leaves;
  let a = 0x811c9dc5;
  let b = 0x9747b28c;
  const mix = (code: number): void => {
    a = Math.imul(a ^ code, 0x01000193);
    b = Math.imul(b ^ code, 0x5bd1e995) ^ (b >>> 15);
  };
  const mixText = (text: string): void => {
    for (let i = 0; i < text.length; i++) mix(text.charCodeAt(i));
    // A NUL ends each text: no name or path holds one.
    mix(0);
  };
  let directory: DirectoryEntry | null = null;
  for (let i = 0; i < leaves.length; i++) {
    const leaf = leaves[i]!;
    if (leaf.parent !== directory) {
      directory = leaf.parent;
      mix(0x2f);
      mixText(directory.path);
    }
    mix(leaf.type === "file" ? 0x46 : 0x53);
    mixText(leaf.name);
  }
  return `${leaves.length}:${(a >>> 0).toString(16).padStart(8, "0")}${(b >>> 0).toString(16).padStart(8, "0")}`;
}
