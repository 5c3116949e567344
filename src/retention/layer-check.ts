import { anchoredRevision, anchoredRows, confirmUnlinked, type AnchoredRevision } from "./anchored-check.js";
import type { RetainedEntry } from "./inventory.js";
import { hashFilesInLanes } from "./parallel/pool.js";
import { HeldInodes, HeldLink, walkRevision, type EntryStats, type HeldStats } from "./revision-walk.js";
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
  const inodes = new HeldInodes<HeldInode>();
  const names = new Set<string>();
  for (const [index, entry] of held.entries()) {
    const found = hashes[index]!;
    names.add(entry.path);
    const damaged = found === null || found.sha256 !== entry.sha256 || ((found.mode & 0o100) !== 0) !== entry.exec;
    if (damaged) report.damaged.push({ path: entry.path, expected: entry.sha256, actual: found?.sha256 ?? null });
    if (found !== null) {
      inodes.set({ entry, stats: found, sound: !damaged });
      if ((found.mode & 0o222) !== 0) report.writable.push({ path: entry.path, mode: found.mode });
    }
  }
  const anchors = options.anchored ? manifestAnchorDir(scope) : null;
  const matched = new Map<string, AnchoredRevision>();
  for (const revision of revisions) {
    const rows = anchoredRows(anchors, scope, revision);
    const match = rows ? anchoredRevision(rows) : null;
    checkRevision(scope, revision.dir, { inodes, names }, report, rows, match);
    if (match?.complete()) matched.set(revision.dir, match);
  }
  return { ...report, anchored: await confirmUnlinked(matched) };
}

interface HeldIndex {
  readonly inodes: HeldInodes<HeldInode>;
  readonly names: ReadonlySet<string>;
}

/** A held file hashed in this check: its name's claim, its fstat, and whether it hashed to that claim (then an
 * anchored revision's file may link it). */
interface HeldInode {
  readonly entry: HeldEntry;
  readonly stats: HeldStats;
  readonly sound: boolean;
}

function checkRevision(
  scope: string,
  dir: string,
  index: HeldIndex,
  report: Omit<LayerCheck, "anchored">,
  anchoredRows: readonly ManifestRow[] | null,
  match: AnchoredRevision | null,
): void {
  // An anchored revision's rows are the matcher's; any other's are read here.
  const rows: ReadonlyMap<string, ManifestRow> =
    match?.rows ?? new Map((anchoredRows ?? readManifestRows(dir) ?? []).map((row) => [row.path, row]));
  const writable: { path: string; mode: number }[] = [];
  let linked = 0;
  let unshared = 0;
  const visit = (path: string, rel: string, stats: EntryStats) => {
    // A symlink's own mode (0777) means nothing.
    if (!stats.isSymbolicLink() && (stats.mode & 0o222) !== 0) writable.push({ path, mode: stats.mode & 0o7777 });
    const inode = !stats.isFile()
      ? undefined
      : stats instanceof HeldLink
        ? (stats.held as HeldInode)
        : index.inodes.get(stats.dev, stats.ino);
    if (match)
      match.entry(path, rel, stats, (row) => {
        const held = inode?.sound ? inode.entry : undefined;
        return row.type === "file" && held !== undefined && held.sha256 === row.sha256 && held.exec === row.exec;
      });
    if (!stats.isFile()) return;
    const found = rows.get(rel);
    const row = found?.type === "file" ? found : undefined;
    const linksTo = inode?.entry;
    if (linksTo && (row === undefined || (linksTo.sha256 === row.sha256 && linksTo.exec === row.exec))) {
      linked += 1;
      return;
    }
    const expected = row ? heldPath(scope, row.sha256, row.exec) : null;
    if (expected !== null && index.names.has(expected))
      report.brokenLinks.push({ revision: dir, path: rel, held: expected });
    else unshared += 1;
  };
  const root = walkRevision(dir, index.inodes, visit);
  if (root === null) return;
  const sealed = (root.mode & 0o222) === 0;
  // A revision published before the layer keeps its own modes; only a shared (or sealed) one is held to read-only.
  if (linked > 0 || sealed) report.writable.push(...writable);
  if (unshared > 0) report.unshared.push({ revision: dir, files: unshared });
}
