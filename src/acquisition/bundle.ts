import { withPublishLease } from "../retention/store/lease.js";
import { closeSync, constants, createReadStream, fsyncSync, linkSync, lstatSync, openSync, readdirSync, renameSync, statSync, unlinkSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { z } from "zod";
import { OatsError, asStepError, errnoCode, isOatsError } from "../errors.js";
import { BLOBS_DIR, MAX_BLOB_BYTES, parseBlobDigest, putBlob, readBlob } from "../retention/store/blobs.js";
import { readCanonicalJson } from "../resolution/canonical-read.js";
import { referencedArtifacts } from "../resolution/read.js";
import { resolutionRecordSchema, type ResolutionRecord } from "../resolution/record.js";
import { MAX_RECORD_BYTES, RESOLUTIONS_DIR, encodeRecord, parseResolutionId, readRecordBytes, resolutionPath, writeResolution } from "../resolution/store.js";
import { bytesDigest, canonicalJsonBytes } from "../retention/digest/json.js";
import { digestListing } from "../retention/digest/tree.js";
import { walkTree } from "../retention/digest/walk.js";
import { TarWriter, TreeSink } from "./tar-writer.js";
import { ARTIFACT_KINDS, IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN, SOURCE_KEY_PATTERN, type ArtifactKind } from "../retention/ids.js";
import { TREE_EXEC, TREE_LEGACY, digestHex, integrityText, type Integrity } from "../retention/integrity.js";
import { adoptTree } from "../retention/retain.js";
import { checkSymlinks } from "../retention/source-check.js";
import { fsyncDirectory, inspectStore, inspectStoreAt, resolveScope } from "../retention/store/components.js";
import { readRegularFile } from "../retention/store/files.js";
import { parseArtifactRef, retainedTreeDir, type ArtifactRef } from "../retention/store/layout.js";
import { revisionParentSegments } from "../retention/store/publish.js";
import { verifyTree } from "../retention/verify.js";
import { verifyAllTrees } from "../retention/verify-many.js";
import { settleInLanes } from "../retention/parallel/pool.js";
import { extractLimits, extractTar, type ExtractLimits } from "./extract.js";
import { withExtractionDir } from "./staging.js";
import { exportProgress } from "./bundle-progress.js";
import { noteRemoved, throwIfAborted, type ProgressListener } from "../retention/progress.js";

/**
 * Offline and deferred transfer of retained artifacts: a bundle is an
 * uncompressed tar holding
 *
 *   manifest.json                         first; canonical JSON (oats.json.v1 form)
 *   artifacts/<kind>/<key>/<64 hex>/...   each tree, exec bits and symlink text verbatim
 *   resolutions/sha256-<hex>.json         each record's exact bytes
 *   blobs/sha256-<hex>                    each pinned blob's exact bytes
 *
 * and the manifest `{schemaVersion: 1, artifacts: [{kind, key, integrity,
 * path}], resolutions: [{id, path}], blobs: [{digest, path}]}` names every
 * item by its digest. Trees are always named by oats.tree-exec.v1.
 *
 * Export reads only the store. Every tree is hashed from the very bytes that
 * are written into the bundle (one read: a revision damaged or changed while
 * it is read is `integrity-mismatch`, never a bundle), every record and blob
 * is read through its checking reader, and the bundle is written to a
 * dot-prefixed temporary file beside its destination, fsync'd, and only then
 * linked (or with `force`, renamed) to its name.
 *
 * A capability revision named by its lock's oats.tree-legacy.v0 integrity is
 * accepted: it is verified under that name first, and exported under the
 * oats.tree-exec.v1 digest measured by the same verification (the report
 * says `translatedFrom`). A bundle never carries a legacy name: that format
 * ignores exec bits and has no length framing, so it cannot vouch for a
 * bundle's bytes. The import retains the tree under `tree-exec-v1/`.
 *
 * Import extracts with the safe extractor into a staging directory inside
 * the scope (`.agents/extract/`, see staging.ts), validates the manifest
 * strictly, checks that the extracted content is exactly what the manifest
 * lists, verifies every tree, record and blob against its digest, checks
 * that every record's artifacts and blobs travel with it, and checks what
 * the target scope already holds under the same names, all before anything
 * is published. Only then does each item go through its normal publication
 * path (adoptTree with `expect`, putBlob, writeResolution; records last, so
 * a record never appears before what it names). The staging directory is
 * always removed.
 */

export const BUNDLE_MANIFEST = "manifest.json";
export const BUNDLE_SCHEMA_VERSION = 1;
/** The manifest is small (one row per item); anything larger is not ours. */
const MAX_MANIFEST_BYTES = 16 << 20;

export interface BundleArtifactRow {
  readonly kind: ArtifactKind;
  readonly key: string;
  /** `oats.tree-exec.v1:sha256-<hex>` */
  readonly integrity: string;
  readonly path: string;
}

export interface BundleManifest {
  readonly schemaVersion: 1;
  readonly artifacts: BundleArtifactRow[];
  readonly resolutions: { readonly id: string; readonly path: string }[];
  readonly blobs: { readonly digest: string; readonly path: string }[];
}

// ------------------------------------------------------------------ layout

export function bundleArtifactPath(kind: ArtifactKind, key: string, integrity: Integrity): string {
  return `artifacts/${kind}/${key}/${digestHex(integrity)}`;
}

export function bundleResolutionPath(id: string): string {
  return `resolutions/${id}.json`;
}

export function bundleBlobPath(digest: string): string {
  return `blobs/${digest}`;
}

// ------------------------------------------------------------------ refs

export type ExportRef = string | { readonly kind?: unknown; readonly key: unknown; readonly integrity: unknown };

export type ParsedExportRef = { readonly type: "artifact"; readonly ref: ArtifactRef } | { readonly type: "resolution"; readonly id: string };

const RESOLUTION_ID_TEXT = /^(?:oats\.json\.v1:)?sha256-[0-9a-f]{64}$/;

/**
 * One export operand: a resolution id (`sha256-<64 hex>`, an `oats.json.v1:`
 * prefix accepted), an artifact ref object, or the text form
 * `<kind>:<key>@<integrity>` (e.g. `capability:demo.hello@oats.tree-exec.v1:sha256-...`).
 */
export function parseExportRef(input: ExportRef): ParsedExportRef {
  if (typeof input === "string") {
    if (RESOLUTION_ID_TEXT.test(input)) return { type: "resolution", id: parseResolutionId(input) };
    const match = /^([a-z]+):([^@]+)@(.+)$/.exec(input);
    if (!match) {
      throw new OatsError("invalid-artifact-reference", `invalid export reference ${JSON.stringify(input)}: expected <kind>:<key>@<integrity> or a resolution id sha256-<64 hex>`, { ref: input });
    }
    return { type: "artifact", ref: parseArtifactRef({ kind: match[1], key: match[2], integrity: match[3] }) };
  }
  if (typeof input !== "object" || input === null) throw new OatsError("invalid-artifact-reference", "an export reference is a string or {kind, key, integrity}", { ref: input });
  return { type: "artifact", ref: parseArtifactRef(input) };
}

// ------------------------------------------------------------------ export

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

function artifactId(kind: string, key: string, value: string): string {
  return `${kind}\0${key}\0${value}`;
}

/** The blobs a record pins: a capture's classification config, profile and spec. */
export function pinnedBlobs(record: ResolutionRecord): string[] {
  if (!record.capture) return [];
  const digests = [record.capture.classification.config, record.capture.profile, record.capture.spec.blob];
  return [...new Set(digests.filter((digest): digest is string => digest !== null))];
}

function outputState(outPath: string, force: boolean): void {
  let stats;
  try {
    stats = lstatSync(outPath);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return;
    throw new OatsError("invalid-input", `cannot inspect the output path ${outPath}: ${errnoCode(error) ?? String(error)}`, { path: outPath });
  }
  if (!force) throw new OatsError("invalid-input", `${outPath} already exists; pass --force (force: true) to replace it`, { path: outPath, reason: "output-exists" });
  if (stats.isDirectory()) throw new OatsError("invalid-input", `${outPath} is a directory, not a bundle file`, { path: outPath, reason: "output-is-directory" });
}

/** Check that a tree revision exists (and, for a legacy name, verify it to learn its exec digest). */
async function planTree(scope: string, ref: ArtifactRef): Promise<PlannedTree> {
  const segments = revisionParentSegments(ref.key, ref.integrity.format === TREE_LEGACY ? TREE_LEGACY : TREE_EXEC);
  const dir = retainedTreeDir(scope, ref);
  const missing = () =>
    new OatsError("artifact-not-found", `${ref.kind} ${ref.key} has no retained revision ${integrityText(ref.integrity)}`, { kind: ref.kind, key: ref.key, integrity: integrityText(ref.integrity), dir });
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
    if (!stats.isDirectory()) throw new OatsError("invalid-artifact", `retained revision is not a real directory: ${dir}`, { kind: ref.kind, key: ref.key, dir });
  }
  const row: BundleArtifactRow = { kind: ref.kind, key: ref.key, integrity: integrityText(exec), path: bundleArtifactPath(ref.kind, ref.key, exec) };
  return { ref: { kind: ref.kind, key: ref.key, integrity: exec }, dir, row, ...(translatedFrom ? { translatedFrom } : {}) };
}

/**
 * Write a bundle of retained artifacts and resolutions (with everything each
 * resolution references and pins) to `outPath`.
 */
export async function exportBundle(scope: string, refs: readonly ExportRef[], outPath: string, options: ExportOptions = {}): Promise<ExportReport> {
  // 1. Validate every operand before anything is read or written.
  if (!Array.isArray(refs) || refs.length === 0) throw new OatsError("invalid-input", "export needs at least one artifact reference or resolution id", {});
  const parsed = refs.map((ref) => parseExportRef(ref));
  if (typeof outPath !== "string" || outPath === "") throw new OatsError("invalid-input", "export needs an output path", {});
  const out = resolve(outPath);
  const realScope = resolveScope(scope);
  outputState(out, options.force === true);

  // 2. Read and check every record and blob; collect every tree.
  const trees = new Map<string, PlannedTree>();
  const requested = new Map<string, ArtifactRef>();
  const records = new Map<string, Buffer>();
  const blobs = new Map<string, Buffer>();
  const addArtifact = (ref: ArtifactRef) => requested.set(artifactId(ref.kind, ref.key, integrityText(ref.integrity)), ref);
  for (const item of parsed) {
    if (item.type === "artifact") {
      addArtifact(item.ref);
      continue;
    }
    if (records.has(item.id)) continue;
    const { id, record } = readRecordBytes(realScope, item.id);
    const { id: reencoded, bytes } = encodeRecord(record);
    // readRecordBytes checked the stored bytes are canonical and hash to the id, so its canonical encoding is those bytes.
    if (reencoded !== id) throw new OatsError("integrity-mismatch", `resolution ${id}: the record re-encodes to ${reencoded}`, { id, expected: id, actual: reencoded });
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
    throw new OatsError("invalid-input", `cannot create the bundle beside ${out}: ${errnoCode(error) ?? String(error)}`, { path: out, errno: errnoCode(error) });
  }
  let open = true;
  let bytes = 0;
  try {
    const tar = new TarWriter(fd);
    tar.wholeFile(BUNDLE_MANIFEST, canonicalJsonBytes(manifest));
    const listings = [];
    for (const tree of treeList) listings.push(await walkTree(tree.dir));
    const progress = exportProgress(listings, options);
    for (const [index, tree] of treeList.entries()) {
      tar.directory(tree.row.path);
      const digests = await digestListing(listings[index]!, [TREE_EXEC], { ...progress.options(), sink: new TreeSink(tar, tree.row.path), sinkOrder: "bytes" });
      const actual = digests[TREE_EXEC]!;
      if (actual !== tree.ref.integrity.value) {
        // The full verification names the first path that differs; if the tree changed back meanwhile, say what was read.
        await verifyTree(realScope, tree.translatedFrom ? { ...tree.ref, integrity: tree.translatedFrom } : tree.ref);
        throw new OatsError("integrity-mismatch", `${tree.ref.kind} ${tree.ref.key}: expected ${tree.row.integrity}, read ${TREE_EXEC}:${actual} while exporting it`, {
          kind: tree.ref.kind,
          key: tree.ref.key,
          expected: tree.ref.integrity.value,
          actual,
          dir: tree.dir,
          reason: "changed-while-exporting",
        });
      }
    }
    for (const [id, record] of records) tar.wholeFile(bundleResolutionPath(id), record);
    for (const [digest, blob] of blobs) tar.wholeFile(bundleBlobPath(digest), blob);
    throwIfAborted(options.signal);
    tar.end();
    bytes = tar.bytes;
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
        if (errnoCode(error) === "EEXIST") throw new OatsError("invalid-input", `${out} already exists; pass --force (force: true) to replace it`, { path: out, reason: "output-exists" });
        throw error;
      }
      unlinkSync(temp);
    }
    fsyncDirectory(dirname(out));
  } catch (error) {
    if (open) closeSync(fd);
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
    artifacts: treeList.map((tree) => ({ ...tree.row, ...(tree.translatedFrom ? { translatedFrom: tree.translatedFrom } : {}) })),
    resolutions: manifest.resolutions,
    blobs: manifest.blobs,
  };
}

// ------------------------------------------------------------------ import: manifest

const digestValue = /^sha256-[0-9a-f]{64}$/;
const keySchema = z.string().min(1).max(IDENTIFIER_MAX_LENGTH);

const manifestSchema = z
  .object({
    schemaVersion: z.literal(BUNDLE_SCHEMA_VERSION),
    artifacts: z.array(
      z
        .object({
          kind: z.enum(ARTIFACT_KINDS),
          key: keySchema,
          integrity: z.string().regex(/^oats\.tree-exec\.v1:sha256-[0-9a-f]{64}$/, "must be oats.tree-exec.v1:sha256-<64 hex>"),
          path: z.string(),
        })
        .strict(),
    ),
    resolutions: z.array(z.object({ id: z.string().regex(digestValue, "must be sha256-<64 hex>"), path: z.string() }).strict()),
    blobs: z.array(z.object({ digest: z.string().regex(digestValue, "must be sha256-<64 hex>"), path: z.string() }).strict()),
  })
  .strict()
  .superRefine((manifest, context) => {
    const seen = new Set<string>();
    const unique = (what: string, name: string, path: (string | number)[]) => {
      if (seen.has(name)) context.addIssue({ code: "custom", path, message: `${what} is listed more than once` });
      seen.add(name);
    };
    manifest.artifacts.forEach((row, index) => {
      const keyOk = row.kind === "source" ? SOURCE_KEY_PATTERN.test(row.key) : IDENTIFIER_PATTERN.test(row.key);
      if (!keyOk) context.addIssue({ code: "custom", path: ["artifacts", index, "key"], message: `invalid ${row.kind} key ${JSON.stringify(row.key)}` });
      const integrity: Integrity = { format: TREE_EXEC, value: row.integrity.slice(TREE_EXEC.length + 1) };
      if (row.path !== bundleArtifactPath(row.kind, row.key, integrity)) {
        context.addIssue({ code: "custom", path: ["artifacts", index, "path"], message: `must be ${bundleArtifactPath(row.kind, row.key, integrity)}` });
      }
      unique(`artifact ${row.kind} ${row.key} ${row.integrity}`, `a\0${row.kind}\0${row.key}\0${row.integrity}`, ["artifacts", index]);
    });
    manifest.resolutions.forEach((row, index) => {
      if (row.path !== bundleResolutionPath(row.id)) context.addIssue({ code: "custom", path: ["resolutions", index, "path"], message: `must be ${bundleResolutionPath(row.id)}` });
      unique(`resolution ${row.id}`, `r\0${row.id}`, ["resolutions", index]);
    });
    manifest.blobs.forEach((row, index) => {
      if (row.path !== bundleBlobPath(row.digest)) context.addIssue({ code: "custom", path: ["blobs", index, "path"], message: `must be ${bundleBlobPath(row.digest)}` });
      unique(`blob ${row.digest}`, `b\0${row.digest}`, ["blobs", index]);
    });
  });

function invalidBundle(bundle: string, message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-input", `bundle ${bundle}: ${message}; nothing was imported`, { bundle, ...details });
}

/** Read a regular file of the extracted bundle (never through a symlink). */
function readExtracted(bundle: string, root: string, path: string, limit: number): Buffer {
  return readRegularFile(join(root, path), {
    limit,
    refuse: (failure, details) =>
      failure === "missing"
        ? invalidBundle(bundle, `${path} is missing`, { path, reason: "missing-entry" })
        : invalidBundle(bundle, `${path} is not a readable regular file (${failure})`, { ...details, path, reason: failure }),
  });
}

function readManifest(bundle: string, root: string): BundleManifest {
  const bytes = readExtracted(bundle, root, BUNDLE_MANIFEST, MAX_MANIFEST_BYTES);
  let json: unknown;
  try {
    json = readCanonicalJson(bytes, `bundle ${bundle}: ${BUNDLE_MANIFEST}`);
  } catch (error) {
    throw invalidBundle(bundle, `${BUNDLE_MANIFEST} is not canonical JSON (${isOatsError(error) ? String(error.details["reason"]) : String(error)})`, { path: BUNDLE_MANIFEST, reason: "manifest-not-canonical" });
  }
  const parsed = manifestSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const pointer = `/${(issue?.path ?? []).join("/")}`;
    throw invalidBundle(bundle, `${BUNDLE_MANIFEST} ${pointer}: ${issue?.message ?? "malformed"}`, {
      path: BUNDLE_MANIFEST,
      pointer,
      reason: "invalid-manifest",
      issues: parsed.error.issues.slice(0, 20).map((each) => ({ pointer: `/${each.path.join("/")}`, message: each.message })),
    });
  }
  return parsed.data as BundleManifest;
}

/**
 * The extracted content must be exactly what the manifest lists: each tree a
 * real directory at its path, each record and blob a regular file at its
 * path, the directories above them, and nothing else.
 */
function checkContents(bundle: string, root: string, manifest: BundleManifest): void {
  const items = new Map<string, "directory" | "file">([[BUNDLE_MANIFEST, "file"]]);
  const parents = new Set<string>();
  const add = (path: string, type: "directory" | "file") => {
    items.set(path, type);
    const segments = path.split("/");
    for (let end = 1; end < segments.length; end += 1) parents.add(segments.slice(0, end).join("/"));
  };
  for (const row of manifest.artifacts) add(row.path, "directory");
  for (const row of manifest.resolutions) add(row.path, "file");
  for (const row of manifest.blobs) add(row.path, "file");

  const found = new Set<string>();
  const walk = (rel: string) => {
    for (const name of readdirSync(rel ? join(root, rel) : root).sort()) {
      const path = rel ? `${rel}/${name}` : name;
      const stats = lstatSync(join(root, path));
      const expected = items.get(path);
      if (expected !== undefined) {
        const ok = expected === "directory" ? stats.isDirectory() : stats.isFile();
        if (!ok) throw invalidBundle(bundle, `${path} is not a ${expected === "directory" ? "directory (a tree)" : "regular file"}`, { path, reason: "wrong-entry-type" });
        found.add(path);
      } else if (parents.has(path) && stats.isDirectory()) {
        walk(path);
      } else {
        throw invalidBundle(bundle, `${path} is not listed in the manifest`, { path, reason: "unlisted-entry" });
      }
    }
  };
  walk("");
  for (const path of items.keys()) if (!found.has(path)) throw invalidBundle(bundle, `${path} is listed in the manifest but not in the bundle`, { path, reason: "missing-entry" });
}

// ------------------------------------------------------------------ import

export interface ImportOptions {
  /** Limits on the archive (entries, expanded bytes, name bytes and depth, header bytes); the extractor's defaults otherwise. */
  readonly limits?: Partial<ExtractLimits>;
  /** `extract` then `verify` events. */
  readonly onProgress?: ProgressListener;
  /**
   * Checked during extraction and verification; an abort removes the
   * extraction directory (details.removed names it) and publishes nothing.
   * Once publication has begun it is finished, not interrupted.
   */
  readonly signal?: AbortSignal;
}

export interface ImportReport {
  readonly bundle: string;
  readonly artifacts: { readonly kind: ArtifactKind; readonly key: string; readonly integrity: string; readonly status: "retained" | "kept" }[];
  readonly resolutions: { readonly id: string; readonly status: "written" | "kept" }[];
  readonly blobs: { readonly digest: string; readonly status: "written" | "kept" }[];
}

interface VerifiedBundle {
  readonly manifest: BundleManifest;
  readonly records: Map<string, { bytes: Buffer; record: ResolutionRecord }>;
  readonly blobs: Map<string, Buffer>;
}

function mismatch(bundle: string, what: string, expected: string, actual: string, details: Record<string, unknown>): OatsError {
  return new OatsError("integrity-mismatch", `bundle ${bundle}: ${what}: expected ${expected}, found ${actual}; nothing was imported`, { bundle, expected, actual, ...details });
}

/** Every item against its digest, every record against the strict reader and schema, every record's references present. */
async function verifyBundle(bundle: string, root: string, manifest: BundleManifest, maxDepth: number, watch: Pick<ImportOptions, "onProgress" | "signal">): Promise<VerifiedBundle> {
  // The trees on every core (worker lanes hash without progress events); the first refusal in manifest order, as a loop would meet it.
  const trees = await settleInLanes(manifest.artifacts, async (row, measure) => {
    const dir = join(root, row.path);
    const listing = await walkTree(dir, { maxDepth });
    // The extractor kept symlinks inside the bundle; each must also stay inside its own tree.
    await checkSymlinks(dir, listing);
    const digests = measure ? await measure({ dir, formats: [TREE_EXEC], maxDepth }) : await digestListing(listing, [TREE_EXEC], { ...watch, phase: "verify" });
    const actual = digests[TREE_EXEC]!;
    const expected = row.integrity.slice(TREE_EXEC.length + 1);
    if (actual !== expected) {
      throw mismatch(bundle, `${row.kind} ${row.key}`, row.integrity, `${TREE_EXEC}:${actual}`, { kind: row.kind, key: row.key, path: row.path, format: TREE_EXEC });
    }
  });
  for (const tree of trees) if (!tree.ok) throw tree.error;
  throwIfAborted(watch.signal);
  const blobs = new Map<string, Buffer>();
  for (const row of manifest.blobs) {
    const bytes = readExtracted(bundle, root, row.path, MAX_BLOB_BYTES);
    const actual = bytesDigest(bytes);
    if (actual !== row.digest) throw mismatch(bundle, `blob ${row.digest}`, row.digest, actual, { digest: row.digest, path: row.path });
    blobs.set(row.digest, bytes);
  }
  const records = new Map<string, { bytes: Buffer; record: ResolutionRecord }>();
  const artifacts = new Set(manifest.artifacts.map((row) => artifactId(row.kind, row.key, row.integrity.slice(TREE_EXEC.length + 1))));
  for (const row of manifest.resolutions) {
    const bytes = readExtracted(bundle, root, row.path, MAX_RECORD_BYTES);
    const actual = bytesDigest(bytes);
    if (actual !== row.id) throw mismatch(bundle, `resolution ${row.id}`, row.id, actual, { id: row.id, path: row.path });
    // As readRecordBytes: digest first, then the canonical form, then the schema.
    const json = readCanonicalJson(bytes, `bundle ${bundle}: resolution ${row.id}`);
    const parsed = resolutionRecordSchema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new OatsError("invalid-resolution", `bundle ${bundle}: resolution ${row.id}: ${issue?.path.join("/") || "(root)"}: ${issue?.message ?? "malformed"}; nothing was imported`, {
        bundle,
        id: row.id,
        pointer: `/${(issue?.path ?? []).join("/")}`,
      });
    }
    const record = parsed.data;
    if (encodeRecord(record).id !== row.id) throw new OatsError("invalid-resolution", `bundle ${bundle}: resolution ${row.id} does not re-encode to its own bytes; nothing was imported`, { bundle, id: row.id });
    for (const ref of referencedArtifacts(record)) {
      if (!artifacts.has(artifactId(ref.kind, ref.key, ref.integrity.value))) {
        throw invalidBundle(bundle, `resolution ${row.id} references ${ref.kind} ${ref.key} ${integrityText(ref.integrity)}, which the bundle does not carry`, {
          id: row.id,
          artifact: { kind: ref.kind, key: ref.key, integrity: integrityText(ref.integrity) },
          reason: "incomplete-resolution",
        });
      }
    }
    for (const digest of pinnedBlobs(record)) {
      if (!blobs.has(digest)) throw invalidBundle(bundle, `resolution ${row.id} pins blob ${digest}, which the bundle does not carry`, { id: row.id, digest, reason: "incomplete-resolution" });
    }
    records.set(row.id, { bytes, record });
  }
  return { manifest, records, blobs };
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return false;
    throw error;
  }
}

/**
 * What the target already holds under the same names is checked before
 * anything is published: a damaged revision, record or blob there is a
 * refusal now, not halfway through the publication.
 */
async function checkTarget(scope: string, verified: VerifiedBundle): Promise<void> {
  const present = [];
  for (const row of verified.manifest.artifacts) {
    const ref = { kind: row.kind, key: row.key, integrity: row.integrity };
    if (!inspectStore(scope, row.kind, revisionParentSegments(row.key, TREE_EXEC)).complete) continue;
    if (exists(retainedTreeDir(scope, ref))) present.push(ref);
  }
  // On every core; the first refusal in manifest order, as a loop would meet it.
  await verifyAllTrees(scope, present);
  if (verified.manifest.blobs.length > 0 && inspectStoreAt(scope, BLOBS_DIR).complete) {
    for (const [digest, bytes] of verified.blobs) {
      if (!exists(join(scope, ...BLOBS_DIR, digest))) continue;
      if (!readBlob(scope, digest).equals(bytes)) throw new OatsError("integrity-mismatch", `blob ${digest} exists with other bytes`, { digest });
    }
  }
  if (verified.manifest.resolutions.length > 0 && inspectStoreAt(scope, RESOLUTIONS_DIR).complete) {
    for (const id of verified.records.keys()) if (exists(resolutionPath(scope, id))) readRecordBytes(scope, id);
  }
}

/** Import a bundle: extract to staging, verify everything, then publish each item through its normal path. */
export async function importBundle(scope: string, bundlePath: string, options: ImportOptions = {}): Promise<ImportReport> {
  if (typeof bundlePath !== "string" || bundlePath === "") throw new OatsError("invalid-input", "import needs a bundle path", {});
  const bundle = resolve(bundlePath);
  let stats;
  try {
    stats = statSync(bundle);
  } catch (error) {
    throw new OatsError("invalid-input", `bundle ${bundle} cannot be read: ${errnoCode(error) ?? String(error)}`, { bundle, errno: errnoCode(error) });
  }
  if (!stats.isFile()) throw new OatsError("invalid-input", `bundle ${bundle} is not a regular file`, { bundle });
  const realScope = resolveScope(scope);
  const limits = extractLimits(options.limits);

  return withPublishLease(realScope, () => withExtractionDir(realScope, async (staging) => {
    const { onProgress, signal } = options;
    const watch = { ...(onProgress ? { onProgress } : {}), ...(signal ? { signal } : {}) };
    await extractTar(createReadStream(bundle), staging, { origin: bundle, prefix: null, limits, ...watch });
    return { bundle, ...(await importStaged(realScope, bundle, staging, limits.maxDepth, watch)) };
  }));
}

/**
 * The verified half of import, for a staging directory laid out as an
 * extracted bundle (`manifest.json`, `artifacts/…`, `resolutions/…`,
 * `blobs/…`): the manifest strictly, the content exactly as listed, every
 * item against its digest, records complete, the target checked; only then
 * publication (trees, blobs, then records). `oats import` extracts a bundle
 * into staging; `oats pull` (src/fleet/pull.ts) fills staging from a
 * registry's layers; both then publish only through here. `origin` names the
 * source in refusals. The caller holds the publish lease and owns staging.
 */
export async function importStaged(
  realScope: string,
  origin: string,
  staging: string,
  maxDepth: number,
  watch: Pick<ImportOptions, "onProgress" | "signal"> = {},
): Promise<Omit<ImportReport, "bundle">> {
  const bundle = origin;
  const limits = { maxDepth };
  const signal = watch.signal;
  const manifest = readManifest(bundle, staging);
  checkContents(bundle, staging, manifest);
  const verified = await verifyBundle(bundle, staging, manifest, limits.maxDepth, watch);
  await checkTarget(realScope, verified);
  throwIfAborted(signal);

  // Publication: trees, then blobs, then the records that name them.
  const artifacts: ImportReport["artifacts"][number][] = [];
  for (const row of manifest.artifacts) {
    // Verified above; adopted (moved, made durable, read back once) rather than copied a second time.
    const receipt = await adoptTree(realScope, { kind: row.kind, key: row.key, source: join(staging, row.path), expect: row.integrity }, { maxDepth: limits.maxDepth });
    artifacts.push({ kind: row.kind, key: row.key, integrity: row.integrity, status: receipt.status === "kept" ? "kept" : "retained" });
  }
  const blobs: ImportReport["blobs"][number][] = [];
  for (const row of manifest.blobs) {
    const put = putBlob(realScope, verified.blobs.get(row.digest)!);
    if (put.digest !== parseBlobDigest(row.digest)) throw new OatsError("internal-error", `blob ${row.digest} was published as ${put.digest}`, { digest: row.digest });
    blobs.push({ digest: row.digest, status: put.status });
  }
  const resolutions: ImportReport["resolutions"][number][] = [];
  for (const row of manifest.resolutions) {
    const written = writeResolution(realScope, verified.records.get(row.id)!.record);
    if (written.id !== row.id) throw new OatsError("internal-error", `resolution ${row.id} was published as ${written.id}`, { id: row.id });
    resolutions.push({ id: row.id, status: written.status });
  }
  return { artifacts, resolutions, blobs };
}
