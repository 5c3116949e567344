import { lstatSync, renameSync, unlinkSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { z } from "zod";
import { digestListing, digestTree, type TreeDigests } from "../digest/tree.js";
import type { TreeFormat } from "../digest/integrity.js";
import { walkTree } from "../digest/walk.js";
import { OatsError } from "../../core/index.js";
import { readRegularFile, writeStagedFile } from "./files.js";
import { manifestDocument } from "./manifest-encoding.js";
import { ManifestRowSink } from "./manifest-rows.js";

/**
 * A per-revision manifest, `.manifest-sha256-<hex>.json` beside the revision:
 * one row per file (path, exec bit, size, SHA-256 of the content) or symlink
 * (path, link text), in tree-exec order. It is measured from the staged copy
 * in the same read that re-verifies it.
 *
 * Verification never consults it for its verdict; when a revision fails
 * verification, the manifest lets the refusal name the first path that
 * differs. A missing or malformed manifest only means that path is not
 * known. It also records what a legacy (oats.tree-legacy.v0) name does not
 * cover, the exec bits: fsck compares a legacy revision with it
 * (modeDifference) and repair holds a legacy replacement to it
 * (lifecycle/repair-modes.ts); a missing manifest never makes either pass.
 */

export type ManifestRow =
  | {
      readonly path: string;
      readonly type: "file";
      readonly exec: boolean;
      readonly size: number;
      readonly sha256: string;
    }
  | { readonly path: string; readonly type: "symlink"; readonly target: string };

const manifestSchema = z
  .object({
    schemaVersion: z.literal(1),
    rows: z.array(
      z.union([
        z
          .object({
            path: z.string(),
            type: z.literal("file"),
            exec: z.boolean(),
            size: z.number().int().nonnegative(),
            sha256: z.string(),
          })
          .strict(),
        z.object({ path: z.string(), type: z.literal("symlink"), target: z.string() }).strict(),
      ]),
    ),
  })
  .strict();

/** The manifest rows of the tree it is fed, as objects (firstDifference compares them). */
export class ManifestBuilder extends ManifestRowSink {
  readonly rows: ManifestRow[] = [];

  protected add(row: ManifestRow): void {
    this.rows.push(row);
  }
}

export function manifestPath(revisionDir: string): string {
  return join(dirname(revisionDir), `.manifest-${basename(revisionDir)}.json`);
}

/** Far above any real manifest (some 150 bytes a file): a bound, not a budget. */
const MAX_MANIFEST_BYTES = 1 << 30;

/**
 * The bytes of a revision's manifest, or null when there is no regular file
 * to read there. Read as every store file is: never through a symlink, a
 * FIFO or a device (O_NOFOLLOW | O_NONBLOCK, then fstat), and bounded; a
 * manifest is diagnostic, so anything else only means it is not known.
 */
export function readManifestBytes(revisionDir: string): Buffer | null {
  try {
    return readRegularFile(manifestPath(revisionDir), {
      limit: MAX_MANIFEST_BYTES,
      refuse: (failure, details) => new OatsError("invalid-artifact", `manifest: ${failure}`, details),
    });
  } catch {
    return null;
  }
}

export function isManifestName(name: string): boolean {
  return name.startsWith(".manifest-");
}

/**
 * Write the manifest document (a ManifestRecorder's) beside its revision:
 * staged, fsync'd, renamed. Best effort: a failure, encoding included,
 * loses only diagnostics.
 */
export function writeManifest(revisionDir: string, document: { bytes(): Buffer }): void {
  let staged: string | null = null;
  try {
    staged = writeStagedFile(dirname(revisionDir), ".manifest", document.bytes());
    renameSync(staged, manifestPath(revisionDir));
  } catch {
    try {
      if (staged) unlinkSync(staged);
    } catch {
      // already gone
    }
  }
}

/** canonicalJsonBytes({ schemaVersion: 1, rows }), encoded a row at a time (manifest-encoding.ts). */
export function manifestBytes(rows: readonly ManifestRow[]): Buffer {
  return manifestDocument(rows);
}

/** The rows of a revision's manifest, or null when it has none that reads (a manifest is diagnostic). */
export function readManifestRows(revisionDir: string): ManifestRow[] | null {
  const bytes = readManifestBytes(revisionDir);
  return bytes ? parseManifestBytes(bytes) : null;
}

/** The rows of a manifest document, or null when it does not parse as one. */
export function parseManifestBytes(bytes: Buffer): ManifestRow[] | null {
  try {
    const parsed = manifestSchema.safeParse(JSON.parse(bytes.toString("utf8")));
    return parsed.success ? parsed.data.rows : null;
  } catch {
    return null;
  }
}

export interface Difference {
  readonly path: string;
  readonly change: "added" | "removed" | "content" | "exec-bit" | "symlink-target" | "type";
}

function compareRow(recorded: ManifestRow, found: ManifestRow, modesOnly = false): Difference["change"] | null {
  if (recorded.type !== found.type) return "type";
  if (recorded.type === "symlink")
    return recorded.target === (found as typeof recorded).target ? null : "symlink-target";
  const file = found as typeof recorded;
  if (!modesOnly && (recorded.size !== file.size || recorded.sha256 !== file.sha256)) return "content";
  if (recorded.exec !== file.exec) return "exec-bit";
  return null;
}

/** How many differing paths a refusal lists; `total` counts them all. */
export const DIFFERENCES_LISTED = 20;

export interface Differences {
  /** The first differing paths in tree-exec order, at most the limit asked for. */
  readonly listed: readonly Difference[];
  /** How many paths differ in all. */
  readonly total: number;
}

/**
 * Every path (in tree-exec order) where a revision differs from its manifest, the first `limit` of them listed and
 * all of them counted, or null when there is no usable manifest (or the tree cannot be read). A total of 0 is a
 * difference the rows cannot see, such as a legacy-only one.
 */
export async function treeDifferences(revisionDir: string, limit = DIFFERENCES_LISTED): Promise<Differences | null> {
  const recorded = readManifestRows(revisionDir);
  if (!recorded) return null;
  const builder = new ManifestBuilder();
  try {
    await digestListing(await walkTree(revisionDir), [], { sink: builder, sinkOrder: "bytes" });
  } catch {
    return null;
  }
  return rowsDifferences(recorded, builder.rows, false, limit);
}

/** The first path where a revision differs from its manifest, or null (treeDifferences). */
export async function firstDifference(revisionDir: string): Promise<Difference | null> {
  return (await treeDifferences(revisionDir, 1))?.listed[0] ?? null;
}

/**
 * Every path (in tree-exec order) where `found` differs from `recorded`, the first `limit` listed and all counted:
 * a path only one of them has, a type, content (size, SHA-256), exec bit or link target; with `modesOnly`, contents
 * are not compared.
 */
export function rowsDifferences(
  recorded: readonly ManifestRow[],
  found: readonly ManifestRow[],
  modesOnly = false,
  limit = DIFFERENCES_LISTED,
): Differences {
  const listed: Difference[] = [];
  let total = 0;
  const note = (difference: Difference) => {
    total++;
    if (listed.length < limit) listed.push(difference);
  };
  let i = 0;
  let j = 0;
  while (i < recorded.length || j < found.length) {
    const a = recorded[i];
    const b = found[j];
    const order = a && b ? Buffer.compare(Buffer.from(a.path), Buffer.from(b.path)) : a ? -1 : 1;
    if (order < 0) {
      note({ path: a!.path, change: "removed" });
      i++;
    } else if (order > 0) {
      note({ path: b!.path, change: "added" });
      j++;
    } else {
      const change = compareRow(a!, b!, modesOnly);
      if (change) note({ path: a!.path, change });
      i++;
      j++;
    }
  }
  return { listed, total };
}

/** The first path where `found` differs from `recorded`, or null (rowsDifferences). */
export function rowsDifference(
  recorded: readonly ManifestRow[],
  found: readonly ManifestRow[],
  modesOnly = false,
): Difference | null {
  return rowsDifferences(recorded, found, modesOnly, 1).listed[0] ?? null;
}

/**
 * Where a revision's paths, types, exec bits and link targets differ from its
 * manifest, or null (no usable manifest, or no difference). Contents are not
 * read: a legacy (oats.tree-legacy.v0) digest covers them but not the exec
 * bits, which only the manifest recorded, so fsck asks this of every legacy
 * revision that verifies. A walk that refuses is verification's to report.
 */
export async function modeDifference(revisionDir: string): Promise<Difference | null> {
  const recorded = readManifestRows(revisionDir);
  if (!recorded) return null;
  let found: ManifestRow[];
  try {
    found = (await walkTree(revisionDir)).leaves.map((leaf) =>
      leaf.type === "symlink"
        ? { path: leaf.path, type: "symlink" as const, target: leaf.target }
        : {
            path: leaf.path,
            type: "file" as const,
            exec: (lstatSync(leaf.absolute).mode & 0o100) !== 0,
            size: 0,
            sha256: "",
          },
    );
  } catch {
    return null;
  }
  return rowsDifference(recorded, found, true);
}

/** A tree's digests in `formats` and its manifest rows, measured in one read (repair compares them with the store's).
 * */
export async function digestTreeWithRows(
  dir: string,
  formats: readonly TreeFormat[],
): Promise<{ digests: TreeDigests; rows: ManifestRow[] }> {
  const builder = new ManifestBuilder();
  const digests = await digestTree(dir, formats, { sink: builder, sinkOrder: "bytes" });
  return { digests, rows: builder.rows };
}
