import { lstatSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { TreeListing } from "../digest/walk.js";
import { manifestPath } from "./manifest.js";

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
      if (stats.isDirectory() && (!best || stats.mtimeMs > best.mtimeMs)) best = { dir, value: `sha256-${match[1]}`, mtimeMs: stats.mtimeMs };
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
 * match or when there is no manifest in the form oats writes (it is
 * diagnostic, and may be missing).
 *
 * The manifest is scanned, not parsed: it is canonical JSON (manifestBytes),
 * where every string is JSON.stringify's and a `"` inside one is escaped, so
 * `"path":` and `"type":"` occur only as keys, once per row, in row order.
 * On 20,000 rows JSON.parse cost 12-18 ms on the thread that then hashes
 * the source; the scan a few.
 */
export function mayMatch(revisionDir: string, listing: TreeListing): boolean {
  let text: string;
  try {
    text = readFileSync(manifestPath(revisionDir), "utf8");
  } catch {
    return true;
  }
  if (!text.startsWith(HEAD) || !text.endsWith(TAIL)) return true;
  let at = HEAD.length;
  for (const leaf of listing.leaves) {
    const row = text.indexOf(PATH_KEY, at);
    if (row === -1) return false;
    const path = JSON.stringify(leaf.path);
    const end = row + PATH_KEY.length + path.length;
    if (!text.startsWith(path, row + PATH_KEY.length) || text.charCodeAt(end) !== COMMA) return false;
    const type = text.indexOf(TYPE_KEY, end);
    if (type === -1 || !text.startsWith(leaf.type === "file" ? FILE_TYPE : SYMLINK_TYPE, type)) return false;
    at = type + TYPE_KEY.length;
  }
  return text.indexOf(PATH_KEY, at) === -1;
}

const HEAD = '{"rows":[';
const TAIL = '],"schemaVersion":1}\n';
const PATH_KEY = '"path":';
const TYPE_KEY = '"type":"';
const COMMA = 0x2c;
const FILE_TYPE = '"type":"file"}';
const SYMLINK_TYPE = '"type":"symlink"}';
