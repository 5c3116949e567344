import { createHash } from "node:crypto";
import { lstatSync, readdirSync, rmdirSync, unlinkSync } from "node:fs";
import { rename } from "node:fs/promises";
import { dirname, join } from "node:path";
import { OatsError, asStepError, errnoCode } from "../core/index.js";
import { audit } from "../ledger/index.js";
import { listResolutionIds, recordReader, resolutionPath } from "../resolution/index.js";
import {
  integrityText,
  type Integrity,
  storeRevisions,
  BLOBS_DIR,
  blobPath,
  readBlob,
  inspectStoreAt,
  resolveScope,
  AGENTS_DIR,
  stagingName,
  withGcLock,
  manifestPath,
  readManifestBytes,
  DEFAULT_LOCK_WAIT_MS,
  removeTree,
  verifyTree,
} from "../retention/index.js";
import type { ArtifactKind } from "../retention/index.js";
import { collectRoots, reachableFrom } from "./roots.js";
import { removeHeld, unreferencedHeld, type GcHeld } from "./gc-held.js";

/**
 * gc: delete what no root reaches (docs/design/lifecycle.md). The default
 * is a dry run. `delete` runs under the gc lock once no publisher holds a
 * lease (retention/store/lease.ts), and plans again under it, so what it
 * deletes is what nothing needed at that moment. Unreachable items younger
 * than the grace period (their mtime; retaining again refreshes it) stay; so
 * do damaged ones unless `includeDamaged`. A revision is renamed to a
 * staging name beside it (atomic: readers see it or not), then removed; a
 * crash in between leaves staging that `oats cleanup` removes. The deletion
 * is audited before it happens: no audit, no deletion.
 */

export const DEFAULT_GRACE_MS = 24 * 60 * 60 * 1000;

export interface GcOptions {
  readonly graceMs?: number;
  readonly delete?: boolean;
  readonly includeDamaged?: boolean;
  readonly lockWaitMs?: number;
}

export interface GcItem {
  readonly type: "revision" | "record" | "blob";
  /** `<kind>:<key>@<integrity>`, a resolution id or a blob digest. */
  readonly ref: string;
  readonly path: string;
  readonly bytes: number;
  readonly ageMs: number;
  readonly kind?: ArtifactKind;
  readonly key?: string;
  readonly integrity?: Integrity;
  readonly damaged?: { code: string; message: string };
}

export interface GcReport {
  readonly scope: string;
  readonly dryRun: boolean;
  readonly graceMs: number;
  readonly roots: {
    instances: number;
    jobs: number;
    pins: number;
    runFiles: number;
    records: number;
    missing: { root: string; id: string }[];
  };
  /** What roots reach. `trees` counts the legacy- and exec-named copies of one capability once. */
  readonly kept: { revisions: number; trees: number; records: number; blobs: number };
  /** Unreachable but younger than the grace period: kept. */
  readonly young: GcItem[];
  /** Unreachable and damaged: reported, kept (unless includeDamaged, then in `collect`). */
  readonly damaged: GcItem[];
  /** What goes (dry run) or went. */
  readonly collect: GcItem[];
  /** Distinct trees among the collected revisions (identical legacy/exec copies count once). */
  readonly collectTrees: number;
  readonly bytes: number;
  /**
   * Files of the shared layer that no revision will link once `collect` is
   * gone (gc-held.ts): what deleting those revisions frees, beside their
   * manifests and unshared files. `bytes` counts revisions at their full
   * size; a shared file's space is freed only with its last link, here.
   */
  readonly heldFiles: { readonly files: GcHeld[]; readonly bytes: number };
  readonly deleted: boolean;
  readonly audit: { seq: number; hash: string } | null;
}

function pathBytes(path: string): number {
  const stats = lstatSync(path);
  if (!stats.isDirectory()) return stats.size;
  let total = 0;
  for (const name of readdirSync(path)) total += pathBytes(join(path, name));
  return total;
}

function fileSize(path: string): number {
  try {
    return lstatSync(path).size;
  } catch {
    return 0;
  }
}

function damageOf(error: unknown): { code: string; message: string } {
  if (error instanceof OatsError && error.kind !== "internal") return { code: error.code, message: error.message };
  throw error;
}

function manifestDigest(dir: string): string | null {
  const bytes = readManifestBytes(dir);
  return bytes && createHash("sha256").update(bytes).digest("hex");
}

/**
 * How long ago `path` was last written. Never negative: a file written in the
 * same millisecond as `now` has an mtime with a fraction that Date.now() drops,
 * and `--grace 0` must still mean no grace at all.
 */
function ageOf(path: string, now: number): number {
  return Math.max(0, now - lstatSync(path).mtimeMs);
}

async function plan(realScope: string, options: GcOptions, dryRun: boolean): Promise<GcReport> {
  const graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
  const now = Date.now();
  const roots = collectRoots(realScope);
  const reachable = reachableFrom(realScope, roots);
  const young: GcItem[] = [];
  const damaged: GcItem[] = [];
  const collect: GcItem[] = [];
  const sort = (item: GcItem, damage: { code: string; message: string } | null) => {
    if (!damage) collect.push(item);
    else if (options.includeDamaged) collect.push({ ...item, damaged: damage });
    else damaged.push({ ...item, damaged: damage });
  };

  // A source's qualified identity is pinned as the blob named by its key (source-identity.ts):
  // it stays while any revision of that source stays.
  const identityBlobs = new Set<string>();
  const keptDirs = new Set<string>();
  // One revision at a time, as the store walk reaches it: no list of the scope's revisions is held.
  for (const entry of storeRevisions(realScope)) {
    const identity = entry.kind === "source" ? `sha256-${entry.key}` : null;
    if (reachable.revisions.has(entry.dir)) {
      keptDirs.add(entry.dir);
      if (identity) identityBlobs.add(identity);
      continue;
    }
    const ageMs = ageOf(entry.dir, now);
    const item: GcItem = {
      type: "revision",
      ref: `${entry.kind}:${entry.key}@${integrityText(entry.integrity)}`,
      path: entry.dir,
      bytes: 0,
      ageMs,
      kind: entry.kind,
      key: entry.key,
      integrity: entry.integrity,
    };
    if (ageMs < graceMs) {
      young.push(item);
      if (identity) identityBlobs.add(identity);
      continue;
    }
    let damage: { code: string; message: string } | null = null;
    try {
      await verifyTree(realScope, entry);
    } catch (error) {
      damage = damageOf(error);
    }
    sort({ ...item, bytes: pathBytes(entry.dir) + fileSize(manifestPath(entry.dir)) }, damage);
    // Kept unless sort() collected it: damaged and not included.
    if (identity && damage && !options.includeDamaged) identityBlobs.add(identity);
  }
  let keptTrees = keptDirs.size;
  for (const [legacy, exec] of reachable.copies) if (keptDirs.has(legacy) && keptDirs.has(exec)) keptTrees -= 1;

  let keptRecords = 0;
  const readRecord = recordReader(realScope);
  for (const id of listResolutionIds(realScope)) {
    if (reachable.records.has(id)) {
      keptRecords += 1;
      continue;
    }
    const path = resolutionPath(realScope, id);
    const ageMs = ageOf(path, now);
    const item: GcItem = { type: "record", ref: id, path, bytes: fileSize(path), ageMs };
    if (ageMs < graceMs) {
      young.push(item);
      continue;
    }
    let damage: { code: string; message: string } | null = null;
    try {
      readRecord(id);
    } catch (error) {
      damage = damageOf(error);
    }
    sort(item, damage);
  }

  let keptBlobs = 0;
  if (inspectStoreAt(realScope, BLOBS_DIR).complete) {
    for (const name of readdirSync(join(realScope, ...BLOBS_DIR)).sort()) {
      if (!/^sha256-[0-9a-f]{64}$/.test(name)) continue;
      if (reachable.blobs.has(name) || identityBlobs.has(name)) {
        keptBlobs += 1;
        continue;
      }
      const path = blobPath(realScope, name);
      const ageMs = ageOf(path, now);
      const item: GcItem = { type: "blob", ref: name, path, bytes: fileSize(path), ageMs };
      if (ageMs < graceMs) {
        young.push(item);
        continue;
      }
      let damage: { code: string; message: string } | null = null;
      try {
        readBlob(realScope, name);
      } catch (error) {
        damage = damageOf(error);
      }
      sort(item, damage);
    }
  }

  // Identical copies of one capability under its legacy and exec names are one tree.
  const trees = new Set<string>();
  for (const item of collect) {
    if (item.type !== "revision") continue;
    const manifest = manifestDigest(item.path);
    trees.add(manifest ? `${item.kind}\0${item.key}\0${manifest}` : item.path);
  }

  return {
    scope: realScope,
    dryRun,
    graceMs,
    roots: {
      instances: roots.counts.instances,
      jobs: roots.counts.jobs,
      pins: roots.counts.pins,
      runFiles: roots.counts.runs,
      records: roots.records.size,
      missing: roots.missing,
    },
    kept: { revisions: keptDirs.size, trees: keptTrees, records: keptRecords, blobs: keptBlobs },
    young,
    damaged,
    collect,
    collectTrees: trees.size,
    bytes: collect.reduce((sum, item) => sum + item.bytes, 0),
    heldFiles: heldReport(
      unreferencedHeld(
        realScope,
        collect.filter((item) => item.type === "revision").map((item) => item.path),
      ),
    ),
    deleted: false,
    audit: null,
  };
}

function heldReport(files: GcHeld[]): GcReport["heldFiles"] {
  return { files, bytes: files.reduce((sum, file) => sum + file.bytes, 0) };
}

function tidyParents(dir: string, stop: string): void {
  for (let parent = dirname(dir); parent.startsWith(`${stop}/`) && parent !== stop; parent = dirname(parent)) {
    try {
      if (readdirSync(parent).length > 0) return;
      rmdirSync(parent);
    } catch {
      return;
    }
  }
}

async function remove(realScope: string, item: GcItem): Promise<void> {
  try {
    if (item.type === "revision") {
      // Atomic: the revision disappears from its name in one rename; what follows only frees space.
      const staged = join(dirname(item.path), stagingName());
      await rename(item.path, staged);
      try {
        unlinkSync(manifestPath(item.path));
      } catch (error) {
        if (errnoCode(error) !== "ENOENT") throw error;
      }
      await removeTree(staged);
      tidyParents(item.path, join(realScope, AGENTS_DIR));
    } else {
      unlinkSync(item.path);
    }
  } catch (error) {
    throw asStepError("gc-delete", error, { path: item.path, ref: item.ref });
  }
}

/** Plan (and with `delete`, carry out) a collection of what no root reaches. */
export async function gc(scope: string, options: GcOptions = {}): Promise<GcReport> {
  const graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
  if (!Number.isSafeInteger(graceMs) || graceMs < 0)
    throw new OatsError("invalid-input", `invalid grace period ${String(options.graceMs)} ms`, {
      graceMs: options.graceMs,
    });
  const realScope = resolveScope(scope);
  if (!options.delete) return plan(realScope, options, true);
  try {
    if (!lstatSync(join(realScope, AGENTS_DIR)).isDirectory())
      throw new OatsError("invalid-artifact-store", `${join(realScope, AGENTS_DIR)} is not a directory`, {
        path: join(realScope, AGENTS_DIR),
      });
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return plan(realScope, options, false);
    throw error;
  }
  return withGcLock(realScope, options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS, async (stillHeld) => {
    const report = await plan(realScope, options, false);
    if (report.collect.length === 0 && report.heldFiles.files.length === 0) return { ...report, deleted: true };
    const entry = await audit(realScope, {
      action: "gc",
      subject: null,
      outcome: "ok",
      details: {
        delete: report.collect.map((item) => ({
          type: item.type,
          ref: item.ref,
          bytes: item.bytes,
          ...(item.damaged ? { damaged: item.damaged.code } : {}),
        })),
        bytes: report.bytes,
        heldFiles: { files: report.heldFiles.files.length, bytes: report.heldFiles.bytes },
        graceMs: report.graceMs,
      },
    });
    for (const item of report.collect) {
      stillHeld();
      await remove(realScope, item);
    }
    const heldFiles = heldReport(removeHeld(report.heldFiles.files, stillHeld));
    return { ...report, heldFiles, deleted: true, audit: { seq: entry.seq, hash: entry.hash } };
  });
}
