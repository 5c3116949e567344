import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { TreeListing } from "../digest/walk.js";
import { readManifestBytes } from "./manifest.js";

/**
 * Which stored revision a retain without `--expect` is most likely to meet
 * again: the key's most recently retained one (a retain, and a kept retain,
 * set its mtime). Only a hint, for reading the source and that revision at
 * once (publish.ts, keptIfUnchanged): the verdict is still the source's
 * digest compared with the revision's name, and the revision's own
 * verification, both read in full.
 */

const REVISION_NAME = /^sha256-([0-9a-f]{64})$/;

export interface Candidate {
  readonly dir: string;
  /** `sha256-<hex>`: what the revision's name says its digest is. */
  readonly value: string;
}

/** The newest revision directory under `parent`, or null when there is none (or the parent cannot be listed). */
export function newestRevision(parent: string): Candidate | null {
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return null;
  }
  let best: (Candidate & { mtimeMs: number }) | null = null;
  for (const name of names) {
    const match = REVISION_NAME.exec(name);
    if (!match) continue;
    const dir = join(parent, name);
    try {
      const stats = lstatSync(dir);
      if (stats.isDirectory() && (!best || stats.mtimeMs > best.mtimeMs))
        best = { dir, value: `sha256-${match[1]}`, mtimeMs: stats.mtimeMs };
    } catch {
      // gone meanwhile: not a candidate
    }
  }
  return best && { dir: best.dir, value: best.value };
}

/**
 * False when the revision's manifest shows a different set of leaves than
 * the source's listing (paths and types, in tree-exec order): the source
 * then cannot hash to it, and reading both would be wasted. True when they
 * match or when there is no readable manifest (it is diagnostic, and may be
 * missing).
 */
export function mayMatch(revisionDir: string, listing: TreeListing): boolean {
  const bytes = readManifestBytes(revisionDir);
  if (!bytes) return true;
  let rows: unknown;
  try {
    rows = (JSON.parse(bytes.toString("utf8")) as { rows?: unknown }).rows;
  } catch {
    return true;
  }
  if (!Array.isArray(rows)) return true;
  const leaves = listing.leaves;
  if (rows.length !== leaves.length) return false;
  for (let i = 0; i < leaves.length; i++) {
    const row = rows[i] as { path?: unknown; type?: unknown } | null;
    if (row === null || typeof row !== "object" || row.path !== leaves[i]!.path || row.type !== leaves[i]!.type)
      return false;
  }
  return true;
}
