import { closeSync, constants, fsyncSync, linkSync, lstatSync, openSync, renameSync, unlinkSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { OatsError, asStepError, errnoCode, canonicalJsonBytes } from "../core/index.js";
import {
  readBlob,
  digestListing,
  walkTree,
  TREE_EXEC,
  TREE_LEGACY,
  integrityText,
  type Integrity,
  fsyncDirectory,
  inspectStore,
  resolveScope,
  parseArtifactRef,
  retainedTreeDir,
  type ArtifactRef,
  revisionParentSegments,
  verifyTree,
  noteRemoved,
  throwIfAborted,
  type ProgressListener,
  linksSettled,
} from "../retention/index.js";
import { referencedArtifacts, encodeRecord, readRecordBytes } from "../resolution/index.js";
import { TarWriter, TreeSink } from "./tar-writer.js";
import { SyncBehind } from "./sync-behind.js";
import { exportProgress } from "./bundle-progress.js";
import {
  BUNDLE_MANIFEST,
  BUNDLE_SCHEMA_VERSION,
  artifactId,
  bundleArtifactPath,
  bundleBlobPath,
  bundleResolutionPath,
  parseExportRef,
  pinnedBlobs,
  type BundleArtifactRow,
  type BundleManifest,
  type ExportRef,
} from "./bundle-format.js";

/** Export: a bundle of retained artifacts and records from the store, each tree hashed from the bytes written (see
 * bundle.ts). */

export interface ExportOptions {
  /** Replace an existing file at the output path. */
  readonly force?: boolean;
  /** `export` events: files written of the trees' total. */
  readonly onProgress?: ProgressListener;
  /** Checked before each file is written; an abort removes the temporary bundle file (details.removed names it). */
  readonly signal?: AbortSignal;
}

export interface ExportReport {
  readonly path: string;
  readonly bytes: number;
  readonly artifacts: (BundleArtifactRow & { readonly translatedFrom?: string })[];
  readonly resolutions: { readonly id: string; readonly path: string }[];
  readonly blobs: { readonly digest: string; readonly path: string }[];
}

interface PlannedTree {
  readonly ref: ArtifactRef & { integrity: Integrity };
  /** The revision directory to read (a legacy-named one for a translated ref). */
  readonly dir: string;
  readonly row: BundleArtifactRow;
  readonly translatedFrom?: string;
}

function outputState(outPath: string, force: boolean): void {
  let stats;
  try {
    stats = lstatSync(outPath);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return;
    throw new OatsError(
      "invalid-input",
      `cannot inspect the output path ${outPath}: ${errnoCode(error) ?? String(error)}`,
      { path: outPath },
    );
  }
  if (!force)
    throw new OatsError("invalid-input", `${outPath} already exists; pass --force (force: true) to replace it`, {
      path: outPath,
      reason: "output-exists",
    });
  if (stats.isDirectory())
    throw new OatsError("invalid-input", `${outPath} is a directory, not a bundle file`, {
      path: outPath,
      reason: "output-is-directory",
    });
}

/** Check that a tree revision exists (and, for a legacy name, verify it to learn its exec digest). */
async function planTree(scope: string, ref: ArtifactRef): Promise<PlannedTree> {
  const segments = revisionParentSegments(ref.key, ref.integrity.format === TREE_LEGACY ? TREE_LEGACY : TREE_EXEC);
  const dir = retainedTreeDir(scope, ref);
  const missing = () =>
    new OatsError(
      "artifact-not-found",
      `${ref.kind} ${ref.key} has no retained revision ${integrityText(ref.integrity)}`,
      { kind: ref.kind, key: ref.key, integrity: integrityText(ref.integrity), dir },
    );
  if (!inspectStore(scope, ref.kind, segments).complete) throw missing();
  let exec: Integrity = ref.integrity;
  let translatedFrom: string | undefined;
  if (ref.integrity.format === TREE_LEGACY) {
    const verified = await verifyTree(scope, ref);
    exec = verified.execIntegrity;
    translatedFrom = integrityText(ref.integrity);
  } else {
    let stats;
    try {
      stats = lstatSync(dir);
    } catch (error) {
      if (errnoCode(error) === "ENOENT") throw missing();
      throw asStepError("export", error, { dir });
    }
    if (!stats.isDirectory())
      throw new OatsError("invalid-artifact", `retained revision is not a real directory: ${dir}`, {
        kind: ref.kind,
        key: ref.key,
        dir,
      });
  }
  const row: BundleArtifactRow = {
    kind: ref.kind,
    key: ref.key,
    integrity: integrityText(exec),
    path: bundleArtifactPath(ref.kind, ref.key, exec),
  };
  return {
    ref: { kind: ref.kind, key: ref.key, integrity: exec },
    dir,
    row,
    ...(translatedFrom ? { translatedFrom } : {}),
  };
}

/**
 * Write a bundle of retained artifacts and resolutions (with everything each
 * resolution references and pins) to `outPath`.
 */
export async function exportBundle(
  scope: string,
  refs: readonly ExportRef[],
  outPath: string,
  options: ExportOptions = {},
): Promise<ExportReport> {
  // Another publisher linking a file a tree shares changes its ctime, not its bytes: export again.
  return linksSettled(() => exportOnce(scope, refs, outPath, options));
}

async function exportOnce(
  scope: string,
  refs: readonly ExportRef[],
  outPath: string,
  options: ExportOptions,
): Promise<ExportReport> {
  // 1. Validate every operand before anything is read or written.
  if (!Array.isArray(refs) || refs.length === 0)
    throw new OatsError("invalid-input", "export needs at least one artifact reference or resolution id", {});
  const parsed = refs.map((ref) => parseExportRef(ref));
  if (typeof outPath !== "string" || outPath === "")
    throw new OatsError("invalid-input", "export needs an output path", {});
  const out = resolve(outPath);
  const realScope = resolveScope(scope);
  outputState(out, options.force === true);

  // 2. Read and check every record and blob; collect every tree.
  const trees = new Map<string, PlannedTree>();
  const requested = new Map<string, ArtifactRef>();
  const records = new Map<string, Buffer>();
  const blobs = new Map<string, Buffer>();
  const addArtifact = (ref: ArtifactRef) =>
    requested.set(artifactId(ref.kind, ref.key, integrityText(ref.integrity)), ref);
  for (const item of parsed) {
    if (item.type === "artifact") {
      addArtifact(item.ref);
      continue;
    }
    if (records.has(item.id)) continue;
    const { id, record } = readRecordBytes(realScope, item.id);
    const { id: reencoded, bytes } = encodeRecord(record);
    // readRecordBytes checked the stored bytes are canonical and hash to the id, so its canonical encoding is
    // those bytes.
    if (reencoded !== id)
      throw new OatsError("integrity-mismatch", `resolution ${id}: the record re-encodes to ${reencoded}`, {
        id,
        expected: id,
        actual: reencoded,
      });
    records.set(id, bytes);
    for (const ref of referencedArtifacts(record)) addArtifact(parseArtifactRef(ref));
    for (const digest of pinnedBlobs(record)) if (!blobs.has(digest)) blobs.set(digest, readBlob(realScope, digest));
  }
  for (const ref of requested.values()) {
    const planned = await planTree(realScope, ref);
    const id = artifactId(planned.ref.kind, planned.ref.key, planned.ref.integrity.value);
    if (!trees.has(id)) trees.set(id, planned);
  }

  const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  const treeList = [...trees.values()].sort((a, b) => compare(a.row.path, b.row.path));
  const manifest: BundleManifest = {
    schemaVersion: BUNDLE_SCHEMA_VERSION,
    artifacts: treeList.map((tree) => tree.row),
    resolutions: [...records.keys()].sort(compare).map((id) => ({ id, path: bundleResolutionPath(id) })),
    blobs: [...blobs.keys()].sort(compare).map((digest) => ({ digest, path: bundleBlobPath(digest) })),
  };

  // 3. Write to a temporary file beside the destination; hash each tree from the bytes written.
  const temp = join(dirname(out), `.${basename(out)}.partial-${process.pid}-${randomBytes(6).toString("hex")}`);
  let fd: number;
  try {
    fd = openSync(temp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o644);
  } catch (error) {
    throw new OatsError(
      "invalid-input",
      `cannot create the bundle beside ${out}: ${errnoCode(error) ?? String(error)}`,
      { path: out, errno: errnoCode(error) },
    );
  }
  let open = true;
  let bytes = 0;
  const behind = new SyncBehind(fd);
  try {
    const tar = new TarWriter(fd, undefined, behind);
    tar.wholeFile(BUNDLE_MANIFEST, canonicalJsonBytes(manifest));
    const listings = [];
    for (const tree of treeList) listings.push(await walkTree(tree.dir));
    const progress = exportProgress(listings, options);
    for (const [index, tree] of treeList.entries()) {
      tar.directory(tree.row.path);
      const digests = await digestListing(listings[index]!, [TREE_EXEC], {
        ...progress.options(),
        sink: new TreeSink(tar, tree.row.path),
        sinkOrder: "bytes",
      });
      const actual = digests[TREE_EXEC]!;
      if (actual !== tree.ref.integrity.value) {
        // The full verification names the first path that differs; if the tree changed back meanwhile, say what
        // was read.
        await verifyTree(realScope, tree.translatedFrom ? { ...tree.ref, integrity: tree.translatedFrom } : tree.ref);
        throw new OatsError(
          "integrity-mismatch",
          `${tree.ref.kind} ${tree.ref.key}: expected ${tree.row.integrity}, read ` +
            `${TREE_EXEC}:${actual} while exporting it`,
          {
            kind: tree.ref.kind,
            key: tree.ref.key,
            expected: tree.ref.integrity.value,
            actual,
            dir: tree.dir,
            reason: "changed-while-exporting",
          },
        );
      }
    }
    for (const [id, record] of records) tar.wholeFile(bundleResolutionPath(id), record);
    for (const [digest, blob] of blobs) tar.wholeFile(bundleBlobPath(digest), blob);
    throwIfAborted(options.signal);
    tar.end();
    bytes = tar.bytes;
    await behind.settle();
    fsyncSync(fd);
    closeSync(fd);
    open = false;
    if (options.force === true) {
      renameSync(temp, out);
    } else {
      // link() never replaces: a file that appeared meanwhile is refused, not overwritten.
      try {
        linkSync(temp, out);
      } catch (error) {
        if (errnoCode(error) === "EEXIST")
          throw new OatsError("invalid-input", `${out} already exists; pass --force (force: true) to replace it`, {
            path: out,
            reason: "output-exists",
          });
        throw error;
      }
      unlinkSync(temp);
    }
    fsyncDirectory(dirname(out));
  } catch (error) {
    if (open) {
      // Never close the descriptor under a background sync (its number could be reused meanwhile).
      await behind.settle().catch(() => undefined);
      closeSync(fd);
    }
    try {
      unlinkSync(temp);
      noteRemoved(error, "temp", temp);
    } catch {
      // already renamed or never written
    }
    throw asStepError("export", error, { path: out });
  }
  return {
    path: out,
    bytes,
    artifacts: treeList.map((tree) => ({
      ...tree.row,
      ...(tree.translatedFrom ? { translatedFrom: tree.translatedFrom } : {}),
    })),
    resolutions: manifest.resolutions,
    blobs: manifest.blobs,
  };
}
