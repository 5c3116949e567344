import { lstatSync, readdirSync, type Stats } from "node:fs";
import { join } from "node:path";
import { anchoredRevision, anchoredRows, confirmUnlinked, type AnchoredRevision } from "./anchored-check.js";
import type { RetainedEntry } from "./inventory.js";
import { hashFilesInLanes } from "./parallel/pool.js";
import { manifestAnchorDir } from "./store/manifest-anchor.js";
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
 *
 * The same walk matches each revision with an anchored manifest against its
 * rows (anchored-check.ts); `anchored` lists the revisions that matched, which
 * fsck then need not re-hash.
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
  /** Revisions (dirs) whose structure and files matched their anchored manifest: verified without their bytes. */
  readonly anchored: ReadonlySet<string>;
}

export interface LayerCheckOptions {
  /** Match revisions against their anchored manifests (the operator's private state), for `anchored`. */
  readonly anchored?: boolean;
}

const key = (stats: Stats) => `${stats.dev}:${stats.ino}`;

export async function checkSharedLayer(
  scope: string,
  revisions: readonly RetainedEntry[],
  options: LayerCheckOptions = {},
): Promise<LayerCheck> {
  const { held } = listHeldFiles(scope);
  const hashes = await hashFilesInLanes(held.map((entry) => entry.path));
  const report = { held: held.length, damaged: [], writable: [], brokenLinks: [], unshared: [] } as Omit<
    LayerCheck,
    "anchored"
  >;
  const byInode = new Map<string, HeldEntry>();
  // Held files that hashed to their name, with its exec bit: what an anchored revision's file may link.
  const sound = new Map<string, HeldEntry>();
  const names = new Set<string>();
  for (const [index, entry] of held.entries()) {
    const found = hashes[index]!;
    names.add(entry.path);
    const damaged = found === null || found.sha256 !== entry.sha256 || ((found.mode & 0o100) !== 0) !== entry.exec;
    if (damaged) report.damaged.push({ path: entry.path, expected: entry.sha256, actual: found?.sha256 ?? null });
    if (found !== null) {
      byInode.set(`${found.dev}:${found.ino}`, entry);
      if (!damaged) sound.set(`${found.dev}:${found.ino}`, entry);
      if ((found.mode & 0o222) !== 0) report.writable.push({ path: entry.path, mode: found.mode });
    }
  }
  const anchors = options.anchored ? manifestAnchorDir(scope) : null;
  const matched = new Map<string, AnchoredRevision>();
  for (const revision of revisions) {
    const rows = anchoredRows(anchors, scope, revision);
    const match = rows ? anchoredRevision(rows) : null;
    checkRevision(scope, revision.dir, { byInode, sound, names }, report, rows, match);
    if (match?.complete()) matched.set(revision.dir, match);
  }
  return { ...report, anchored: await confirmUnlinked(matched) };
}

interface HeldIndex {
  readonly byInode: ReadonlyMap<string, HeldEntry>;
  readonly sound: ReadonlyMap<string, HeldEntry>;
  readonly names: ReadonlySet<string>;
}

function checkRevision(
  scope: string,
  dir: string,
  index: HeldIndex,
  report: Omit<LayerCheck, "anchored">,
  anchoredRows: readonly ManifestRow[] | null,
  match: AnchoredRevision | null,
): void {
  const rows = new Map<string, Extract<ManifestRow, { type: "file" }>>();
  for (const row of anchoredRows ?? readManifestRows(dir) ?? []) if (row.type === "file") rows.set(row.path, row);
  const writable: { path: string; mode: number }[] = [];
  let linked = 0;
  let unshared = 0;
  let sealed = false;
  const visit = (path: string, rel: string, stats: Stats) => {
    // A symlink's own mode (0777) means nothing.
    if (!stats.isSymbolicLink() && (stats.mode & 0o222) !== 0) writable.push({ path, mode: stats.mode & 0o7777 });
    if (match)
      match.entry(path, rel, stats, (row) => {
        const held = index.sound.get(key(stats));
        return row.type === "file" && held !== undefined && held.path === heldPath(scope, row.sha256, row.exec);
      });
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
    const linksTo = index.byInode.get(key(stats));
    if (linksTo && (expected === null || linksTo.path === expected)) {
      linked += 1;
      return;
    }
    if (expected !== null && index.names.has(expected))
      report.brokenLinks.push({ revision: dir, path: rel, held: expected });
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
