import { lstatSync, readdirSync, rmdirSync, unlinkSync, type Stats } from "node:fs";
import { dirname, join } from "node:path";
import { asStepError, errnoCode } from "../core/index.js";
import { listHeldFiles } from "../retention/index.js";

/**
 * gc and the shared file layer (docs/design/lifecycle.md, "Held files"): a
 * held file that no revision links is garbage. Its link count says so: the
 * held name is one link, and each revision (or crashed publisher's staging)
 * that shares it is another, so a count of 1 is a file nothing links. A
 * plan counts, as well, the held files whose every other link is in a
 * revision the plan collects; a deletion removes, after the revisions, each
 * planned held file whose count has indeed come down to 1, under the gc
 * lock, where no publisher is between its link steps.
 */

export interface GcHeld {
  readonly path: string;
  readonly sha256: string;
  readonly exec: boolean;
  readonly bytes: number;
}

const inode = (stats: Stats) => `${stats.dev}:${stats.ino}`;

/** Links to each inode under `dir` (regular files only), added to `counts`. */
function countLinks(dir: string, counts: Map<string, number>): void {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const path = join(dir, name);
    let stats: Stats;
    try {
      stats = lstatSync(path);
    } catch {
      continue;
    }
    if (stats.isDirectory()) countLinks(path, counts);
    else if (stats.isFile()) counts.set(inode(stats), (counts.get(inode(stats)) ?? 0) + 1);
  }
}

/** The held files nothing will link once the revisions in `going` are deleted. */
export function unreferencedHeld(realScope: string, going: readonly string[]): GcHeld[] {
  const { held } = listHeldFiles(realScope);
  if (held.length === 0) return [];
  const counts = new Map<string, number>();
  for (const dir of going) countLinks(dir, counts);
  const out: GcHeld[] = [];
  for (const entry of held) {
    let stats: Stats;
    try {
      stats = lstatSync(entry.path);
    } catch {
      continue;
    }
    if (stats.nlink - 1 - (counts.get(inode(stats)) ?? 0) > 0) continue;
    out.push({ path: entry.path, sha256: entry.sha256, exec: entry.exec, bytes: stats.size });
  }
  return out;
}

/** Unlink each planned held file that is linked by nothing now (a link count of 1); returns those removed. */
export function removeHeld(planned: readonly GcHeld[], stillHeld: () => void): GcHeld[] {
  const removed: GcHeld[] = [];
  for (const entry of planned) {
    stillHeld();
    try {
      const stats = lstatSync(entry.path);
      if (!stats.isFile() || stats.nlink !== 1) continue;
      unlinkSync(entry.path);
      removed.push(entry);
    } catch (error) {
      if (errnoCode(error) === "ENOENT") continue;
      throw asStepError("gc-delete", error, { path: entry.path });
    }
    try {
      rmdirSync(dirname(entry.path));
    } catch {
      // not empty: other held files share the prefix
    }
  }
  return removed;
}
