import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode, isOatsError, bytesDigest } from "../core/index.js";
import {
  BLOBS_DIR,
  MAX_BLOB_BYTES,
  readBlob,
  digestListing,
  walkTree,
  TREE_EXEC,
  integrityText,
  checkSymlinks,
  inspectStore,
  inspectStoreAt,
  readRegularFile,
  retainedTreeDir,
  revisionParentSegments,
  verifyAllTrees,
  ManifestRecorder,
  settleInLanes,
  throwIfAborted,
} from "../retention/index.js";
import {
  readCanonicalJson,
  referencedArtifacts,
  resolutionRecordSchema,
  type ResolutionRecord,
  MAX_RECORD_BYTES,
  RESOLUTIONS_DIR,
  encodeRecord,
  readRecordBytes,
  resolutionPath,
} from "../resolution/index.js";
import type { VerifiedTree } from "../retention/index.js";
import {
  BUNDLE_MANIFEST,
  MAX_MANIFEST_BYTES,
  artifactId,
  manifestSchema,
  pinnedBlobs,
  type BundleManifest,
} from "./bundle-format.js";
import type { ImportOptions } from "./bundle-import.js";

/**
 * The checks of an extracted bundle, all made before anything is published
 * (see bundle.ts): the manifest strictly, the content exactly as listed,
 * every item against its digest, records complete, and what the target
 * already holds under the same names.
 */

export function invalidBundle(bundle: string, message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-input", `bundle ${bundle}: ${message}; nothing was imported`, { bundle, ...details });
}

/** Read a regular file of the extracted bundle (never through a symlink). */
function readExtracted(bundle: string, root: string, path: string, limit: number): Buffer {
  return readRegularFile(join(root, path), {
    limit,
    refuse: (failure, details) =>
      failure === "missing"
        ? invalidBundle(bundle, `${path} is missing`, { path, reason: "missing-entry" })
        : invalidBundle(bundle, `${path} is not a readable regular file (${failure})`, {
            ...details,
            path,
            reason: failure,
          }),
  });
}

export function readManifest(bundle: string, root: string): BundleManifest {
  const bytes = readExtracted(bundle, root, BUNDLE_MANIFEST, MAX_MANIFEST_BYTES);
  let json: unknown;
  try {
    json = readCanonicalJson(bytes, `bundle ${bundle}: ${BUNDLE_MANIFEST}`);
  } catch (error) {
    throw invalidBundle(
      bundle,
      `${BUNDLE_MANIFEST} is not canonical JSON ` +
        `(${isOatsError(error) ? String(error.details["reason"]) : String(error)})`,
      { path: BUNDLE_MANIFEST, reason: "manifest-not-canonical" },
    );
  }
  const parsed = manifestSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const pointer = `/${(issue?.path ?? []).join("/")}`;
    throw invalidBundle(bundle, `${BUNDLE_MANIFEST} ${pointer}: ${issue?.message ?? "malformed"}`, {
      path: BUNDLE_MANIFEST,
      pointer,
      reason: "invalid-manifest",
      issues: parsed.error.issues
        .slice(0, 20)
        .map((each) => ({ pointer: `/${each.path.join("/")}`, message: each.message })),
    });
  }
  return parsed.data as BundleManifest;
}

/**
 * The extracted content must be exactly what the manifest lists: each tree a
 * real directory at its path, each record and blob a regular file at its
 * path, the directories above them, and nothing else.
 */
export function checkContents(bundle: string, root: string, manifest: BundleManifest): void {
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
        if (!ok)
          throw invalidBundle(
            bundle,
            `${path} is not a ${expected === "directory" ? "directory (a tree)" : "regular file"}`,
            { path, reason: "wrong-entry-type" },
          );
        found.add(path);
      } else if (parents.has(path) && stats.isDirectory()) {
        walk(path);
      } else {
        throw invalidBundle(bundle, `${path} is not listed in the manifest`, { path, reason: "unlisted-entry" });
      }
    }
  };
  walk("");
  for (const path of items.keys())
    if (!found.has(path))
      throw invalidBundle(bundle, `${path} is listed in the manifest but not in the bundle`, {
        path,
        reason: "missing-entry",
      });
}

export interface VerifiedBundle {
  readonly manifest: BundleManifest;
  /**
   * Per artifact row, the verification read of a tree hashed on this thread
   * (walk, digest, manifest), which publication adopts instead of
   * reading the tree again (adoptVerifiedTree); undefined for a tree a worker
   * lane hashed, which publication reads back as before.
   */
  readonly trees: readonly (VerifiedTree | undefined)[];
  readonly records: Map<string, { bytes: Buffer; record: ResolutionRecord }>;
  readonly blobs: Map<string, Buffer>;
}

function mismatch(
  bundle: string,
  what: string,
  expected: string,
  actual: string,
  details: Record<string, unknown>,
): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `bundle ${bundle}: ${what}: expected ${expected}, found ${actual}; nothing was imported`,
    { bundle, expected, actual, ...details },
  );
}

/** Every item against its digest, every record against the strict reader and schema, every record's references
 * present. */
export async function verifyBundle(
  bundle: string,
  root: string,
  manifest: BundleManifest,
  maxDepth: number,
  watch: Pick<ImportOptions, "onProgress" | "signal">,
): Promise<VerifiedBundle> {
  // The trees on every core (worker lanes hash without progress events); the first refusal in manifest order, as a
  // loop would meet it.
  const trees = await settleInLanes(manifest.artifacts, async (row, measure) => {
    const dir = join(root, row.path);
    const listing = await walkTree(dir, { maxDepth });
    // The extractor kept symlinks inside the bundle; each must also stay inside its own tree.
    await checkSymlinks(dir, listing);
    const manifestOf = measure ? null : new ManifestRecorder();
    const digests = measure
      ? await measure({ dir, formats: [TREE_EXEC], maxDepth })
      : await digestListing(listing, [TREE_EXEC], { ...watch, phase: "verify", sink: manifestOf!, sinkOrder: "bytes" });
    const actual = digests[TREE_EXEC]!;
    const expected = row.integrity.slice(TREE_EXEC.length + 1);
    if (actual !== expected) {
      throw mismatch(bundle, `${row.kind} ${row.key}`, row.integrity, `${TREE_EXEC}:${actual}`, {
        kind: row.kind,
        key: row.key,
        path: row.path,
        format: TREE_EXEC,
      });
    }
    return manifestOf ? { listing, digests, manifest: manifestOf } : undefined;
  });
  const verifiedTrees: (VerifiedTree | undefined)[] = [];
  for (const tree of trees) {
    if (!tree.ok) throw tree.error;
    verifiedTrees.push(tree.value);
  }
  throwIfAborted(watch.signal);
  const blobs = new Map<string, Buffer>();
  for (const row of manifest.blobs) {
    const bytes = readExtracted(bundle, root, row.path, MAX_BLOB_BYTES);
    const actual = bytesDigest(bytes);
    if (actual !== row.digest)
      throw mismatch(bundle, `blob ${row.digest}`, row.digest, actual, { digest: row.digest, path: row.path });
    blobs.set(row.digest, bytes);
  }
  const records = new Map<string, { bytes: Buffer; record: ResolutionRecord }>();
  const artifacts = new Set(
    manifest.artifacts.map((row) => artifactId(row.kind, row.key, row.integrity.slice(TREE_EXEC.length + 1))),
  );
  for (const row of manifest.resolutions) {
    const bytes = readExtracted(bundle, root, row.path, MAX_RECORD_BYTES);
    const actual = bytesDigest(bytes);
    if (actual !== row.id)
      throw mismatch(bundle, `resolution ${row.id}`, row.id, actual, { id: row.id, path: row.path });
    // As readRecordBytes: digest first, then the canonical form, then the schema.
    const json = readCanonicalJson(bytes, `bundle ${bundle}: resolution ${row.id}`);
    const parsed = resolutionRecordSchema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new OatsError(
        "invalid-resolution",
        `bundle ${bundle}: resolution ${row.id}: ` +
          `${issue?.path.join("/") || "(root)"}: ${issue?.message ?? "malformed"}; ` +
          `nothing was imported`,
        {
          bundle,
          id: row.id,
          pointer: `/${(issue?.path ?? []).join("/")}`,
        },
      );
    }
    const record = parsed.data;
    if (encodeRecord(record).id !== row.id)
      throw new OatsError(
        "invalid-resolution",
        `bundle ${bundle}: resolution ${row.id} does not re-encode to its own bytes; nothing was imported`,
        { bundle, id: row.id },
      );
    for (const ref of referencedArtifacts(record)) {
      if (!artifacts.has(artifactId(ref.kind, ref.key, ref.integrity.value))) {
        throw invalidBundle(
          bundle,
          `resolution ${row.id} references ${ref.kind} ${ref.key} ` +
            `${integrityText(ref.integrity)}, which the bundle does not carry`,
          {
            id: row.id,
            artifact: { kind: ref.kind, key: ref.key, integrity: integrityText(ref.integrity) },
            reason: "incomplete-resolution",
          },
        );
      }
    }
    for (const digest of pinnedBlobs(record)) {
      if (!blobs.has(digest))
        throw invalidBundle(bundle, `resolution ${row.id} pins blob ${digest}, which the bundle does not carry`, {
          id: row.id,
          digest,
          reason: "incomplete-resolution",
        });
    }
    records.set(row.id, { bytes, record });
  }
  return { manifest, trees: verifiedTrees, records, blobs };
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
export async function checkTarget(scope: string, verified: VerifiedBundle): Promise<void> {
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
      if (!readBlob(scope, digest).equals(bytes))
        throw new OatsError("integrity-mismatch", `blob ${digest} exists with other bytes`, { digest });
    }
  }
  if (verified.manifest.resolutions.length > 0 && inspectStoreAt(scope, RESOLUTIONS_DIR).complete) {
    for (const id of verified.records.keys()) if (exists(resolutionPath(scope, id))) readRecordBytes(scope, id);
  }
}
