import { readlinkSync } from "node:fs";
import type { RetainedEntry } from "./inventory.js";
import { TREE_EXEC } from "./digest/integrity.js";
import { hashFilesInLanes } from "./parallel/pool.js";
import { inspectStore } from "./store/components.js";
import { anchoredManifest, manifestSha256 } from "./store/manifest-anchor.js";
import { parseManifestBytes, readManifestBytes, type ManifestRow } from "./store/manifest.js";
import { revisionParentSegments } from "./store/publish.js";
import type { EntryStats } from "./revision-walk.js";

/**
 * fsck's fast path for a revision named by its oats.tree-exec.v1 digest D:
 * when the operator's private state records the SHA-256 of D's manifest
 * (store/manifest-anchor.ts) and the manifest beside the revision hashes to
 * it, the rows are what D's bytes measured when this account verified them.
 * The revision is then taken as verified, without reading its bytes, when
 * its structure is exactly the rows (the same paths, no other entry, no
 * directory that holds no row, files and symlinks where the rows say, each
 * symlink's target) and each regular file is the inode of a held file that
 * hashed to its name in this fsck and is the one its row names (content and
 * exec bit); a regular file that is not such a link is hashed and compared
 * with its row. Since D is the digest of exactly those rows' paths, exec
 * bits and contents, the revision hashes to D.
 *
 * Anything else (no record, another manifest, a difference of structure, a
 * file that does not match) leaves the revision to the full re-hash, whose
 * findings are those of a fsck without the fast path.
 */

export interface AnchoredRevision {
  /** The rows by path. */
  readonly rows: ReadonlyMap<string, ManifestRow>;
  /** Paths of the regular files that are not links to a held file that matched, each with its row. */
  readonly unlinked: { path: string; row: Extract<ManifestRow, { type: "file" }> }[];
  /** Called for the revision's root (rel "") and each entry below it, as the walk lstats them. */
  entry(path: string, rel: string, stats: EntryStats, heldMatches: (row: ManifestRow) => boolean): void;
  /** Whether every entry matched and every row was met. */
  complete(): boolean;
}

/** The revision's manifest rows when they are anchored (the record matches the manifest's bytes), else null. */
export function anchoredRows(anchors: string | null, realScope: string, revision: RetainedEntry): ManifestRow[] | null {
  if (anchors === null || revision.integrity.format !== TREE_EXEC) return null;
  const recorded = anchoredManifest(anchors, revision.integrity.value);
  if (recorded === null) return null;
  // The full path refuses a revision whose store is not complete; so does this one, by leaving it to that path.
  const segments = revisionParentSegments(revision.key, TREE_EXEC);
  if (!inspectStore(realScope, revision.kind, segments).complete) return null;
  const bytes = readManifestBytes(revision.dir);
  if (bytes === null || manifestSha256(bytes) !== recorded) return null;
  return parseAnchoredManifest(bytes);
}

/**
 * The rows of a manifest whose bytes hash to its anchor: bytes this account's oats encoded
 * (manifest-encoding.ts), so a shape check stands in for the schema's parse, which was a tenth of fsck's layer
 * check over 50 revisions; anything else parses as any manifest does.
 */
function parseAnchoredManifest(bytes: Buffer): ManifestRow[] | null {
  let document: unknown;
  try {
    document = JSON.parse(bytes.toString("utf8"));
  } catch {
    return null;
  }
  const rows = (document as { rows?: unknown } | null)?.rows;
  if (!Array.isArray(rows) || (document as { schemaVersion?: unknown }).schemaVersion !== 1)
    return parseManifestBytes(bytes);
  for (const row of rows as ManifestRow[]) {
    const shaped =
      row !== null &&
      typeof row === "object" &&
      typeof row.path === "string" &&
      (row.type === "file"
        ? typeof row.exec === "boolean" && Number.isSafeInteger(row.size) && typeof row.sha256 === "string"
        : row.type === "symlink" && typeof row.target === "string");
    if (!shaped) return parseManifestBytes(bytes);
  }
  return rows as ManifestRow[];
}

/** A matcher of one revision's entries against its anchored rows (anchoredRows). */
export function anchoredRevision(rows: readonly ManifestRow[]): AnchoredRevision {
  const byPath = new Map<string, ManifestRow>();
  const directories = new Set<string>();
  for (const row of rows) {
    byPath.set(row.path, row);
    for (let at = row.path.lastIndexOf("/"); at > 0; at = row.path.lastIndexOf("/", at - 1))
      directories.add(row.path.slice(0, at));
  }
  let differs = byPath.size !== rows.length;
  let leaves = 0;
  let dirs = 0;
  const unlinked: AnchoredRevision["unlinked"] = [];
  return {
    rows: byPath,
    unlinked,
    entry(path, rel, stats, heldMatches) {
      if (differs) return;
      if (rel === "") {
        differs = !stats.isDirectory();
        return;
      }
      if (stats.isDirectory()) {
        dirs += 1;
        if (!directories.has(rel)) differs = true;
        return;
      }
      const row = byPath.get(rel);
      leaves += 1;
      if (!row) differs = true;
      else if (stats.isSymbolicLink()) differs = row.type !== "symlink" || readTarget(path) !== row.target;
      else if (!stats.isFile() || row.type !== "file") differs = true;
      else if (!heldMatches(row)) unlinked.push({ path, row });
    },
    complete: () => !differs && leaves === byPath.size && dirs === directories.size,
  };
}

function readTarget(path: string): string | null {
  try {
    return readlinkSync(path);
  } catch {
    return null;
  }
}

/** Hash the unlinked files of the revisions that matched; the dirs whose every file matched its row. */
export async function confirmUnlinked(matched: ReadonlyMap<string, AnchoredRevision>): Promise<Set<string>> {
  const files: { dir: string; path: string; row: AnchoredRevision["unlinked"][number]["row"] }[] = [];
  for (const [dir, match] of matched) for (const file of match.unlinked) files.push({ dir, ...file });
  const hashes = await hashFilesInLanes(files.map((file) => file.path));
  const verified = new Set(matched.keys());
  for (const [index, file] of files.entries()) {
    const found = hashes[index];
    if (
      !found ||
      found.sha256 !== file.row.sha256 ||
      found.size !== file.row.size ||
      ((found.mode & 0o100) !== 0) !== file.row.exec
    )
      verified.delete(file.dir);
  }
  return verified;
}
