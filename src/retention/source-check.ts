import { realpath } from "node:fs/promises";
import { dirname, isAbsolute, posix, resolve, sep } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import type { TreeListing } from "./digest/walk.js";

/**
 * Checks a source tree must pass before anything is copied from it
 * (contract section 5): every symlink relative, resolvable and inside the
 * tree, and the tree must not contain the store it is about to be copied
 * into. Special files and non-UTF-8 names were already refused by the walk.
 */

function inside(root: string, path: string): boolean {
  return path === root || path.startsWith(root + sep);
}

export async function checkSymlinks(root: string, listing: TreeListing): Promise<void> {
  for (const leaf of listing.leaves) {
    if (leaf.type !== "symlink") continue;
    const details = { path: leaf.path, target: leaf.target };
    // Not contained even when it points back into the tree: the tree's meaning would depend on where it sits
    // (upstream agrees).
    if (isAbsolute(leaf.target)) {
      throw new OatsError("artifact-not-contained", `absolute symlink refused: ${leaf.path} -> ${leaf.target}`, {
        ...details,
        reason: "absolute-symlink",
      });
    }
    // Lexically first: the link text itself must not climb out of the tree.
    const lexical = posix.normalize(posix.join(posix.dirname(leaf.path), leaf.target));
    if (lexical === ".." || lexical.startsWith("../")) {
      throw new OatsError("artifact-not-contained", `symlink escapes the tree: ${leaf.path} -> ${leaf.target}`, {
        ...details,
        reason: "escaping-symlink",
      });
    }
    // Then for real: the whole chain must resolve, and inside the tree.
    let resolved: string;
    try {
      resolved = await realpath(leaf.absolute);
    } catch (error) {
      const code = errnoCode(error);
      const reason = code === "ELOOP" ? "symlink-loop" : "broken-symlink";
      throw new OatsError(
        "invalid-artifact",
        `${code === "ELOOP" ? "symlink loop" : "broken symlink"}: ${leaf.path} -> ${leaf.target}`,
        { ...details, reason, errno: code },
      );
    }
    if (!inside(root, resolved)) {
      throw new OatsError(
        "artifact-not-contained",
        `symlink resolves outside the tree: ${leaf.path} -> ${leaf.target}`,
        { ...details, resolved, reason: "escaping-symlink" },
      );
    }
  }
}

/** Refuse a source that is, or contains, any directory the publication writes into. */
export async function checkSourceOutsideStore(sourceRoot: string, storePaths: readonly string[]): Promise<void> {
  for (const storePath of storePaths) {
    // The store may not exist yet: resolve its nearest existing ancestor and re-append the rest.
    const target = await realpathOfPossiblyMissing(storePath);
    if (inside(sourceRoot, target)) {
      throw new OatsError(
        "invalid-input",
        `source ${sourceRoot} contains the store ${target}: retaining it would copy the store into itself`,
        {
          source: sourceRoot,
          store: target,
          reason: "source-contains-store",
        },
      );
    }
  }
}

async function realpathOfPossiblyMissing(path: string): Promise<string> {
  let missing = "";
  let current = path;
  for (;;) {
    try {
      const real = await realpath(current);
      return missing ? resolve(real, missing) : real;
    } catch (error) {
      if (errnoCode(error) !== "ENOENT") throw error;
      const parent = dirname(current);
      if (parent === current) return path;
      missing = missing ? `${current.slice(parent.length + 1)}/${missing}` : current.slice(parent.length + 1);
      current = parent;
    }
  }
}
