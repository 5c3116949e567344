import { OatsError, bytesDigest, canonicalJsonBytes } from "../core/index.js";
import { parseExportRef, pinnedBlobs, type ExportRef } from "../acquisition/index.js";
import { referencedArtifacts, encodeRecord, readRecordBytes } from "../resolution/index.js";
import {
  TREE_EXEC,
  integrityText,
  parseIntegrity,
  type Integrity,
  readBlob,
  resolveScope,
  verifyTree,
} from "../retention/index.js";
import type { ArtifactKind } from "../retention/index.js";
import { compositionOf } from "../captures/index.js";
import { hashTreeLayer, treeLayerSource } from "./layer.js";
import { type AttachedAttestation, attachAttestations } from "./attestations.js";
import {
  EMPTY_CONFIG,
  OCI_MANIFEST_MEDIA_TYPE,
  captureTag,
  encodeManifest,
  oatsToOci,
  ociDigest,
  parsePulledManifest,
  resolutionManifest,
  resolutionTag,
  treesManifest,
  type BlobLayer,
  type OciManifest,
  type TreeLayer,
} from "./mapping.js";
import { openRegistry, type FleetTarget } from "./target.js";
import {
  headBlob,
  getManifest,
  putManifestEnsuring,
  bufferSource,
  putBlob,
  type BlobSource,
  type UploadOptions,
} from "../oci/index.js";
import type { RegistrySession } from "../oci/index.js";

/**
 * `oats push <ref...> --to oci://host/repo`: every named resolution becomes
 * one artifact manifest (tagged `oats-json-v1-<hex>` and, for a capture,
 * with its name); artifacts named on their own become one trees manifest
 * (tagged with the reference's tag, if it has one). Only what the registry
 * lacks is uploaded: each blob is HEADed first.
 *
 * The second push of a resolution is cheap: when the registry already has a
 * manifest under the resolution's tag whose config is the record's exact
 * bytes and whose layers name exactly the record's trees and blobs, and
 * every one of those blobs is present, nothing is written, not even the
 * layers (building a tree's tar means reading the whole tree). That trusts
 * the registry's claim of which tar digest a tree has; a registry (or a
 * writer to it) that lies there can make pushed content unpullable, never
 * pullable as something else: pull verifies every OCI and oats digest.
 */

export interface PushOptions {
  /** Plain HTTP (loopback registries only). */
  readonly insecure?: boolean;
  readonly signal?: AbortSignal;
}

export interface PushedManifest {
  readonly reference: string;
  readonly digest: string;
  readonly artifactType: string;
  readonly resolution: string | null;
  readonly tags: string[];
  readonly status: "pushed" | "kept";
}

export interface PushReport {
  readonly registry: string;
  readonly repository: string;
  readonly manifests: PushedManifest[];
  readonly blobs: {
    readonly digest: string;
    readonly size: number;
    readonly what: string;
    readonly status: "uploaded" | "present";
  }[];
  /** Bytes uploaded (0 when the registry had everything). */
  readonly uploadedBytes: number;
  /** The scope's signed statements about each pushed resolution, attached to its manifest as referrers. */
  readonly attestations: AttachedAttestation[];
}

interface Plan {
  readonly resolutions: {
    id: string;
    bytes: Buffer;
    capture: string | null;
    trees: TreeRef[];
    blobs: string[];
    blobBytes: Map<string, Buffer>;
  }[];
  readonly trees: TreeRef[];
}

type TreeRef = { kind: ArtifactKind; key: string; integrity: Integrity };

const treeId = (ref: { kind: string; key: string; integrity: Integrity | string }) =>
  `${ref.kind}\0${ref.key}\0${typeof ref.integrity === "string" ? ref.integrity : integrityText(ref.integrity)}`;

/** Read every record and blob, and name every tree by its exec digest (a legacy-named capability is verified to learn
 * it). */
async function plan(realScope: string, refs: readonly ExportRef[]): Promise<Plan> {
  const parsed = refs.map((ref) => parseExportRef(ref));
  const resolutions: Plan["resolutions"] = [];
  const trees: TreeRef[] = [];
  const execOf = async (ref: { kind: ArtifactKind; key: string; integrity: Integrity }): Promise<TreeRef> => {
    if (ref.integrity.format === TREE_EXEC) return ref;
    const verified = await verifyTree(realScope, ref);
    return { kind: ref.kind, key: ref.key, integrity: verified.execIntegrity };
  };
  for (const item of parsed) {
    if (item.type === "artifact") {
      const ref = await execOf({
        kind: item.ref.kind,
        key: item.ref.key,
        integrity: parseIntegrity(item.ref.integrity),
      });
      if (!trees.some((tree) => treeId(tree) === treeId(ref))) trees.push(ref);
      continue;
    }
    if (resolutions.some((row) => row.id === item.id)) continue;
    const { id, record } = readRecordBytes(realScope, item.id);
    const { id: reencoded, bytes } = encodeRecord(record);
    if (reencoded !== id)
      throw new OatsError("integrity-mismatch", `resolution ${id}: the record re-encodes to ${reencoded}`, {
        id,
        expected: id,
        actual: reencoded,
      });
    const recordTrees: TreeRef[] = [];
    for (const ref of referencedArtifacts(record))
      recordTrees.push(await execOf({ kind: ref.kind, key: ref.key, integrity: ref.integrity }));
    // Present and intact before anything leaves.
    const blobBytes = new Map(pinnedBlobs(record).map((digest) => [digest, readBlob(realScope, digest)]));
    if (record.capture) {
      // The composition an operator approves travels too (derived from the record, so always the same bytes): `oats
      // approve` on the pulling host shows and records it.
      const composition = canonicalJsonBytes(compositionOf(record));
      blobBytes.set(bytesDigest(composition), composition);
    }
    resolutions.push({
      id,
      bytes,
      capture: record.capture?.name ?? null,
      trees: recordTrees,
      blobs: [...blobBytes.keys()],
      blobBytes,
    });
  }
  return { resolutions, trees };
}

/** The registry's manifest under `tag`, if it is exactly what this resolution maps to (all but the tar digests, which
 * it vouches for). */
async function existingResolution(
  session: RegistrySession,
  resolution: Plan["resolutions"][number],
): Promise<{ digest: string; manifest: OciManifest } | null> {
  let served;
  try {
    served = await getManifest(session, resolutionTag(resolution.id), { accept: [OCI_MANIFEST_MEDIA_TYPE] });
  } catch (error) {
    if (
      error instanceof OatsError &&
      (error.code === "artifact-not-found" || error.code === "invalid-artifact" || error.code === "integrity-mismatch")
    )
      return null;
    throw error;
  }
  let pulled;
  try {
    pulled = parsePulledManifest(served.bytes, "registry");
  } catch {
    return null;
  }
  if (pulled.resolution?.id !== resolution.id) return null;
  const want = new Set([
    ...resolution.trees.map((tree) => `t\0${treeId(tree)}`),
    ...resolution.blobs.map((blob) => `b\0${blob}`),
  ]);
  const have = new Set(
    pulled.layers.map((layer) => (layer.type === "tree" ? `t\0${treeId(layer)}` : `b\0${layer.blob}`)),
  );
  if (want.size !== have.size || [...want].some((each) => !have.has(each))) return null;
  const trees = pulled.layers.filter(
    (layer): layer is Extract<typeof layer, { type: "tree" }> => layer.type === "tree",
  );
  const blobs: BlobLayer[] = pulled.layers
    .filter((layer) => layer.type === "blob")
    .map((layer) => ({ blob: (layer as BlobLayer).blob, size: layer.size }));
  // Rebuilt from our own mapping: the bytes must be what we would push, or it is not ours to keep.
  const manifest = resolutionManifest({
    id: resolution.id,
    recordBytes: resolution.bytes,
    capture: resolution.capture,
    trees,
    blobs,
  });
  const encoded = encodeManifest(manifest);
  if (encoded.digest !== served.digest) return null;
  for (const digest of [manifest.config.digest, ...manifest.layers.map((layer) => layer.digest)]) {
    if ((await headBlob(session, digest)) === null) return null;
  }
  return { digest: encoded.digest, manifest };
}

const blobsOf = (manifest: OciManifest): string[] => [
  manifest.config.digest,
  ...manifest.layers.map((layer) => layer.digest),
];

/**
 * Push resolutions and retained revisions to an OCI registry (src/fleet/push.ts), uploading only the blobs it
 * lacks. Refuses an empty or malformed list of references (`invalid-input`, `invalid-artifact-reference`), one
 * not held here (`artifact-not-found`, `resolution-not-found`) and a registry that cannot be used
 * (`registry-refused`).
 * @param refs resolution ids and `<kind>:<key>@<integrity>` references
 * @param to `oci://host/repository[:tag]`
 */
export async function pushToRegistry(
  scope: string,
  refs: readonly ExportRef[],
  to: string,
  options: PushOptions = {},
): Promise<PushReport> {
  if (!Array.isArray(refs) || refs.length === 0)
    throw new OatsError("invalid-input", "push needs at least one artifact reference or resolution id", {});
  const target: FleetTarget = openRegistry(to, options);
  const realScope = resolveScope(scope);
  const work = await plan(realScope, refs);
  const { session } = target;
  const report: PushReport = {
    registry: target.registry,
    repository: target.repository,
    manifests: [],
    blobs: [],
    uploadedBytes: 0,
    attestations: [],
  };
  // Every blob this push has checked or sent, and how to send it again.
  const blobsDone = new Map<string, { size: number; source: () => BlobSource; options: UploadOptions }>();

  const sendUnlessPresent = async (digest: string) => {
    const blob = blobsDone.get(digest)!;
    const present = await headBlob(session, digest);
    if (present !== null && present.size === blob.size) return "present" as const;
    await putBlob(session, blob.source(), blob.options);
    (report as { uploadedBytes: number }).uploadedBytes += blob.size;
    return "uploaded" as const;
  };
  const ensureBlob = async (
    digest: string,
    size: number,
    what: string,
    source: () => BlobSource,
    options: UploadOptions = {},
  ) => {
    if (blobsDone.has(digest)) return;
    blobsDone.set(digest, { size, source, options });
    report.blobs.push({ digest, size, what, status: await sendUnlessPresent(digest) });
  };
  // Checked again (and sent again if really gone) when the registry refuses a manifest as naming an unknown blob; a
  // kept manifest's blobs were only HEADed, and are only asked about again through the retried PUT.
  const ensureAgain = (blobs: readonly string[]) => async () => {
    for (const digest of blobs) {
      if (!blobsDone.has(digest) || (await sendUnlessPresent(digest)) === "present") continue;
      const row = report.blobs.find((each) => each.digest === digest);
      if (row) (row as { status: string }).status = "uploaded";
    }
  };
  const tagAll = async (
    manifestBytes: Buffer,
    digest: string,
    tags: string[],
    blobs: readonly string[],
  ): Promise<string[]> => {
    const written: string[] = [];
    for (const tag of tags) {
      const { digest: stored } = await putManifestEnsuring(
        session,
        tag,
        manifestBytes,
        OCI_MANIFEST_MEDIA_TYPE,
        ensureAgain(blobs),
      );
      if (stored !== digest)
        throw new OatsError("integrity-mismatch", `${target.registry} stored ${tag} as ${stored}, not ${digest}`, {
          expected: digest,
          actual: stored,
          tag,
        });
      written.push(tag);
    }
    return written;
  };

  // Resolutions the registry already holds completely need no layer at all.
  const pending: Plan["resolutions"] = [];
  for (const resolution of work.resolutions) {
    const existing = await existingResolution(session, resolution);
    if (existing === null) {
      pending.push(resolution);
      continue;
    }
    const captureName = resolution.capture === null ? null : captureTag(resolution.capture);
    const tags = [resolutionTag(resolution.id)];
    if (captureName !== null) {
      // The human tag follows the newest push; rewritten only when it names something else.
      let current: string | null = null;
      try {
        current = (await getManifest(session, captureName, { accept: [OCI_MANIFEST_MEDIA_TYPE] })).digest;
      } catch (error) {
        if (!(error instanceof OatsError) || error.code !== "artifact-not-found") throw error;
      }
      if (current !== existing.digest)
        tags.push(
          ...(await tagAll(
            encodeManifest(existing.manifest).bytes,
            existing.digest,
            [captureName],
            blobsOf(existing.manifest),
          )),
        );
      else tags.push(captureName);
    }
    report.manifests.push({
      reference: `${target.registry}/${target.repository}@${existing.digest}`,
      digest: existing.digest,
      artifactType: existing.manifest.artifactType,
      resolution: resolution.id,
      tags,
      status: "kept",
    });
    report.attestations.push(
      ...(await attachAttestations(realScope, session, resolution.id, {
        digest: existing.digest,
        size: encodeManifest(existing.manifest).bytes.length,
      })),
    );
  }
  if (pending.length === 0 && work.trees.length === 0) return report;

  const layers = new Map<string, TreeLayer>();
  const layerOf = async (ref: TreeRef) => {
    const id = treeId(ref);
    let layer = layers.get(id);
    if (!layer) {
      layer = await hashTreeLayer(realScope, ref);
      layers.set(id, layer);
    }
    const ready = layer;
    // One streamed PUT: the tar is generated again as it is sent (a lost connection restarts the blob; each PATCH
    // would mean another pass over the tree).
    await ensureBlob(
      ready.digest,
      ready.size,
      `${ref.kind} ${ref.key} ${integrityText(ref.integrity)}`,
      () => treeLayerSource(realScope, ref, ready),
      { chunked: false, chunkSize: Number.MAX_SAFE_INTEGER },
    );
    return ready;
  };

  for (const resolution of pending) {
    const trees: TreeLayer[] = [];
    for (const ref of resolution.trees) trees.push(await layerOf(ref));
    const blobs: BlobLayer[] = [];
    for (const digest of resolution.blobs) {
      const bytes = resolution.blobBytes.get(digest)!;
      await ensureBlob(oatsToOci(digest), bytes.length, `blob ${digest}`, () => bufferSource(bytes, oatsToOci(digest)));
      blobs.push({ blob: digest, size: bytes.length });
    }
    await ensureBlob(oatsToOci(resolution.id), resolution.bytes.length, `resolution ${resolution.id}`, () =>
      bufferSource(resolution.bytes, oatsToOci(resolution.id)),
    );
    const manifest = resolutionManifest({
      id: resolution.id,
      recordBytes: resolution.bytes,
      capture: resolution.capture,
      trees,
      blobs,
    });
    const { bytes, digest } = encodeManifest(manifest);
    const captureName = resolution.capture === null ? null : captureTag(resolution.capture);
    const tags = await tagAll(
      bytes,
      digest,
      [resolutionTag(resolution.id), ...(captureName !== null ? [captureName] : [])],
      blobsOf(manifest),
    );
    report.manifests.push({
      reference: `${target.registry}/${target.repository}@${digest}`,
      digest,
      artifactType: manifest.artifactType,
      resolution: resolution.id,
      tags,
      status: "pushed",
    });
    report.attestations.push(
      ...(await attachAttestations(realScope, session, resolution.id, { digest, size: bytes.length })),
    );
  }

  if (work.trees.length > 0) {
    const trees: TreeLayer[] = [];
    for (const ref of work.trees) trees.push(await layerOf(ref));
    await ensureBlob(ociDigest(EMPTY_CONFIG), EMPTY_CONFIG.length, "empty config", () =>
      bufferSource(EMPTY_CONFIG, ociDigest(EMPTY_CONFIG)),
    );
    const manifest = treesManifest(trees);
    const { bytes, digest } = encodeManifest(manifest);
    const tags = target.tag !== null ? await tagAll(bytes, digest, [target.tag], blobsOf(manifest)) : [];
    if (target.tag === null) await tagAll(bytes, digest, [digest], blobsOf(manifest));
    report.manifests.push({
      reference: `${target.registry}/${target.repository}@${digest}`,
      digest,
      artifactType: manifest.artifactType,
      resolution: null,
      tags,
      status: "pushed",
    });
  }
  return report;
}
