import { lstatSync, readdirSync, type Stats } from "node:fs";
import { join } from "node:path";
import type { RetainedEntry } from "./inventory.js";
import { hashFilesInLanes } from "./parallel/pool.js";
import { readManifestRows, type ManifestRow } from "./store/manifest.js";
import { heldPath, listHeldFiles, type HeldEntry } from "./store/shared-layer.js";

/**
 * fsck's view of the shared file layer (store/shared-layer.ts): each held
 * file is hashed once, however many revisions link it, and each revision's
 * structure is read without its bytes: which held file each path links
 * (dev and ino), and the modes. What it finds:
 *
 * - a held file that does not hash to its name (or whose exec bit is not its
 *   name's): reported once, whatever links it;
 * - a held file, or a file or directory of a shared revision, that has a
 *   write bit: a published store entry is read-only;
 * - a path that no longer links its held file: the layer holds its content
 *   (by the revision's manifest), but the path is another inode;
 * - revisions whose files are not links into the layer (stored before the
 *   layer, or copied where a link failed): counted, for `oats dedupe`.
 */

export interface LayerCheck {
  /** Held files hashed. */
  readonly held: number;
  readonly damaged: { path: string; expected: string; actual: string | null }[];
  readonly writable: { path: string; mode: number }[];
  /** A path of `revision` whose file is not the inode of the held file its manifest row names. */
  readonly brokenLinks: { revision: string; path: string; held: string }[];
  /** Revisions with regular files that are not links into the layer, and how many. */
  readonly unshared: { revision: string; files: number }[];
}

const key = (stats: Stats) => `${stats.dev}:${stats.ino}`;

export async function checkSharedLayer(scope: string, revisions: readonly RetainedEntry[]): Promise<LayerCheck> {
  const { held } = listHeldFiles(scope);
  const hashes = await hashFilesInLanes(held.map((entry) => entry.path));
  const report: LayerCheck = { held: held.length, damaged: [], writable: [], brokenLinks: [], unshared: [] };
  const byInode = new Map<string, HeldEntry>();
  const names = new Set<string>();
  for (const [index, entry] of held.entries()) {
    const found = hashes[index]!;
    names.add(entry.path);
    if (found === null || found.sha256 !== entry.sha256 || ((found.mode & 0o100) !== 0) !== entry.exec)
      report.damaged.push({ path: entry.path, expected: entry.sha256, actual: found?.sha256 ?? null });
    if (found !== null) {
      byInode.set(`${found.dev}:${found.ino}`, entry);
      if ((found.mode & 0o222) !== 0) report.writable.push({ path: entry.path, mode: found.mode });
    }
  }
  for (const revision of revisions) checkRevision(scope, revision.dir, byInode, names, report);
  return report;
}

function checkRevision(
  scope: string,
  dir: string,
  byInode: ReadonlyMap<string, HeldEntry>,
  names: ReadonlySet<string>,
  report: LayerCheck,
): void {
  const rows = new Map<string, Extract<ManifestRow, { type: "file" }>>();
  for (const row of readManifestRows(dir) ?? []) if (row.type === "file") rows.set(row.path, row);
  const writable: { path: string; mode: number }[] = [];
  let linked = 0;
  let unshared = 0;
  let sealed = false;
  const visit = (path: string, rel: string, stats: Stats) => {
    // A symlink's own mode (0777) means nothing.
    if (!stats.isSymbolicLink() && (stats.mode & 0o222) !== 0) writable.push({ path, mode: stats.mode & 0o7777 });
    if (stats.isDirectory()) {
      let entries: string[];
      try {
        entries = readdirSync(path);
      } catch {
        return; // verification reports a tree it cannot read
      }
      for (const name of entries) {
        const child = join(path, name);
        try {
          visit(child, rel ? `${rel}/${name}` : name, lstatSync(child));
        } catch {
          // gone meanwhile: verification reports it
        }
      }
      return;
    }
    if (!stats.isFile()) return;
    const row = rows.get(rel);
    const expected = row ? heldPath(scope, row.sha256, row.exec) : null;
    const linksTo = byInode.get(key(stats));
    if (linksTo && (expected === null || linksTo.path === expected)) {
      linked += 1;
      return;
    }
    if (expected !== null && names.has(expected)) report.brokenLinks.push({ revision: dir, path: rel, held: expected });
    else unshared += 1;
  };
  try {
    const root = lstatSync(dir);
    sealed = (root.mode & 0o222) === 0;
    visit(dir, "", root);
  } catch {
    return;
  }
  // A revision published before the layer keeps its own modes; only a shared (or sealed) one is held to read-only.
  if (linked > 0 || sealed) report.writable.push(...writable);
  if (unshared > 0) report.unshared.push({ revision: dir, files: unshared });
}
