import { chmodSync, lstatSync, readdirSync, type Stats } from "node:fs";
import { dirname, join } from "node:path";
import { OatsError, asStepError, errnoCode } from "../core/index.js";
import { integrityText, type Integrity, type TreeFormat } from "./digest/integrity.js";
import { listStore, type RetainedEntry } from "./inventory.js";
import { hashFileHere } from "./parallel/file-hashes.js";
import { resolveScope, ensureDirectory, ensureStoreAt, fsyncDirectory } from "./store/components.js";
import { withPublishLease } from "./store/lease.js";
import { digestTreeWithRows, type ManifestRow } from "./store/manifest.js";
import { REVISION_DIRECTORY_MODE, heldMode } from "./store/modes.js";
import { FILES_STORE, HELD_ALGORITHM_DIR, heldPath, intern, linkOver } from "./store/shared-layer.js";

/**
 * `oats dedupe`: convert revisions stored before the shared file layer (full
 * copies) into links to it (docs/design/retention.md, "Converting a store
 * made before the layer"). A dry run (the default) counts, per revision, the
 * regular files that are not links (a link count of 1). `apply`, under a
 * publisher's lease (gc waits for it), verifies each such revision in full
 * (its tree must hash to its name; a damaged one is reported and left
 * alone), then converts it a file at a time: a held file is hashed before
 * it is linked, and the revision's file is replaced by a link to it with a
 * rename (a reader sees the old copy or the link, the same bytes); a file
 * the layer does not hold becomes the held file itself, linked into place;
 * a damaged held file is replaced by the verified copy. Where a link fails
 * (EXDEV, EMLINK, EPERM) the file stays a copy. Finally the revision's
 * directories are made read-only.
 */

export interface DedupeRevision {
  readonly kind: RetainedEntry["kind"];
  readonly key: string;
  readonly integrity: Integrity;
  readonly dir: string;
  /** Regular files that are not links into the layer (before a conversion). */
  readonly unshared: number;
  /** Their bytes: what converting them may free. */
  readonly bytes: number;
  /** With apply: how each was converted. */
  readonly linked?: number;
  readonly stored?: number;
  readonly copied?: number;
  readonly fallback?: string;
  /** With apply: the revision did not verify, and was left as it is. */
  readonly damaged?: { code: string; message: string };
}

export interface DedupeReport {
  readonly scope: string;
  readonly dryRun: boolean;
  /** Revisions with files not yet shared. */
  readonly revisions: DedupeRevision[];
  /** Revisions already fully shared. */
  readonly shared: number;
  readonly files: number;
  readonly bytes: number;
}

export interface DedupeOptions {
  readonly apply?: boolean;
  readonly lockWaitMs?: number;
}

const FALLBACK_CODES = new Set(["EXDEV", "EMLINK", "EPERM", "ENOTSUP", "EOPNOTSUPP", "EACCES", "EROFS"]);

/** Regular files with a link count of 1 under `dir`, and their bytes. */
function unsharedFiles(dir: string): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  const visit = (path: string) => {
    for (const name of readdirSync(path)) {
      const child = join(path, name);
      const stats = lstatSync(child);
      if (stats.isDirectory()) visit(child);
      else if (stats.isFile() && stats.nlink === 1) {
        files += 1;
        bytes += stats.size;
      }
    }
  };
  visit(dir);
  return { files, bytes };
}

function directoriesOf(dir: string): string[] {
  const out = [dir];
  for (const name of readdirSync(dir)) {
    const child = join(dir, name);
    if (lstatSync(child).isDirectory()) out.push(...directoriesOf(child));
  }
  return out;
}

/**
 * List (the default) or, with `apply`, convert the revisions of `scope`
 * whose regular files are not links into the shared file layer (stored
 * before it). A conversion runs under a publisher's lease; each revision is
 * verified in full first, and a damaged one is reported and left alone.
 */
export async function dedupe(scope: string, options: DedupeOptions = {}): Promise<DedupeReport> {
  const realScope = resolveScope(scope);
  const survey = (): { pending: { entry: RetainedEntry; files: number; bytes: number }[]; shared: number } => {
    const pending: { entry: RetainedEntry; files: number; bytes: number }[] = [];
    let shared = 0;
    for (const entry of listStore(realScope).revisions) {
      let counted: { files: number; bytes: number };
      try {
        counted = unsharedFiles(entry.dir);
      } catch (error) {
        throw asStepError("dedupe", error, { dir: entry.dir });
      }
      if (counted.files === 0) shared += 1;
      else pending.push({ entry, ...counted });
    }
    return { pending, shared };
  };
  const report = (revisions: DedupeRevision[], shared: number, dryRun: boolean): DedupeReport => ({
    scope: realScope,
    dryRun,
    revisions,
    shared,
    files: revisions.reduce((sum, revision) => sum + revision.unshared, 0),
    bytes: revisions.reduce((sum, revision) => sum + revision.bytes, 0),
  });
  const describe = (entry: RetainedEntry, files: number, bytes: number): DedupeRevision => ({
    kind: entry.kind,
    key: entry.key,
    integrity: entry.integrity,
    dir: entry.dir,
    unshared: files,
    bytes,
  });
  if (!options.apply) {
    const { pending, shared } = survey();
    return report(
      pending.map(({ entry, files, bytes }) => describe(entry, files, bytes)),
      shared,
      true,
    );
  }
  return withPublishLease(
    realScope,
    async () => {
      const { pending, shared } = survey();
      const done: DedupeRevision[] = [];
      for (const { entry, files, bytes } of pending)
        done.push({ ...describe(entry, files, bytes), ...(await convert(realScope, entry)) });
      return report(done, shared, false);
    },
    options.lockWaitMs,
  );
}

type Converted = Pick<DedupeRevision, "linked" | "stored" | "copied" | "fallback" | "damaged">;

/** Verify one revision in full, then link its unshared files into the layer and seal its directories. */
async function convert(scope: string, entry: RetainedEntry): Promise<Converted> {
  let rows: ManifestRow[];
  const format = entry.integrity.format as TreeFormat;
  try {
    const measured = await digestTreeWithRows(entry.dir, [format]);
    if (measured.digests[format] !== entry.integrity.value)
      throw new OatsError(
        "integrity-mismatch",
        `${entry.kind} ${entry.key} ${integrityText(entry.integrity)} does not verify: not converted`,
        { dir: entry.dir, expected: entry.integrity.value, actual: measured.digests[format] },
      );
    rows = measured.rows;
  } catch (error) {
    if (error instanceof OatsError && error.kind !== "internal")
      return { damaged: { code: error.code, message: error.message } };
    throw error;
  }
  ensureStoreAt(scope, FILES_STORE, [HELD_ALGORITHM_DIR]);
  const outcome = { linked: 0, stored: 0, copied: 0 } as {
    linked: number;
    stored: number;
    copied: number;
    fallback?: string;
  };
  const directories = directoriesOf(entry.dir);
  // Writable only while its files are replaced.
  for (const dir of directories) chmodSync(dir, 0o755);
  const touched = new Set<string>();
  const verified = new Map<string, Stats | null>();
  try {
    for (const row of rows) {
      if (row.type !== "file") continue;
      const file = join(entry.dir, row.path);
      const stats = lstatSync(file);
      if (!stats.isFile() || stats.nlink !== 1) continue;
      const held = heldPath(scope, row.sha256, row.exec);
      try {
        if (!verified.has(held)) {
          const found = hashFileHere(held);
          const good = found !== null && found.sha256 === row.sha256 && ((found.mode & 0o100) !== 0) === row.exec;
          verified.set(held, good ? lstatSync(held) : null);
        }
        if (verified.get(held)) {
          linkOver(held, file);
          touched.add(dirname(file));
          outcome.linked += 1;
          continue;
        }
        chmodSync(file, heldMode(row.exec));
        if (ensureDirectory(dirname(held))) touched.add(dirname(dirname(held)));
        // Absent: linked into place; present but damaged: replaced by this verified copy.
        if (!intern(file, held, lstatExists(held))) {
          // Stored meanwhile by a publisher: linked once it verifies, replaced otherwise.
          const found = hashFileHere(held);
          if (found !== null && found.sha256 === row.sha256 && ((found.mode & 0o100) !== 0) === row.exec) {
            linkOver(held, file);
            touched.add(dirname(file));
            verified.set(held, lstatSync(held));
            outcome.linked += 1;
            continue;
          }
          intern(file, held, true);
        }
        touched.add(dirname(held));
        verified.set(held, lstatSync(held));
        outcome.stored += 1;
      } catch (error) {
        const code = errnoCode(error);
        if (!code || !FALLBACK_CODES.has(code)) throw asStepError("dedupe", error, { path: row.path, held });
        chmodSync(file, heldMode(row.exec));
        outcome.copied += 1;
        outcome.fallback ??= code;
      }
    }
  } finally {
    for (const dir of directories.reverse()) chmodSync(dir, REVISION_DIRECTORY_MODE);
  }
  for (const dir of touched) fsyncDirectory(dir);
  return outcome;
}

function lstatExists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}
