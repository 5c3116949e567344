import { createHash } from "node:crypto";
import { z } from "zod";
import { OatsError, canonicalJsonBytes } from "../core/index.js";
import {
  ARTIFACT_KINDS,
  IDENTIFIER_MAX_LENGTH,
  IDENTIFIER_PATTERN,
  SOURCE_KEY_PATTERN,
  type ArtifactKind,
  MAX_BLOB_BYTES,
} from "../retention/index.js";
import { MAX_RECORD_BYTES } from "../resolution/index.js";

/**
 * How oats items map onto OCI artifacts (image spec 1.1, distribution spec
 * 1.1). Pure: no I/O, so the same inputs give the same manifest bytes, and
 * so the same manifest digest, on every host.
 *
 * - A retained tree is one layer: the tar that the bundle writer produces for
 *   it (acquisition/tar-writer.ts; entries at the archive root, a `./` entry
 *   first, mtime 0, owner 0, modes from the exec bit), media type
 *   `application/vnd.oats.tree.v1.tar`, annotated with its kind, key and
 *   `oats.tree-exec.v1` integrity.
 * - A pinned blob (a capture's spec, profile, classification config) is a
 *   layer of its exact bytes, `application/vnd.oats.blob.v1`; its OCI digest
 *   `sha256:<hex>` and its oats digest `sha256-<hex>` name the same bytes.
 * - A resolution is an image manifest with `artifactType`
 *   `application/vnd.oats.resolution.v1+json`, whose config is the record's
 *   exact (canonical) bytes, so the config digest is the resolution id; its
 *   layers are the record's trees, then its pinned blobs, each sorted.
 * - Trees pushed without a record form a manifest of artifactType
 *   `application/vnd.oats.trees.v1` with the OCI empty config.
 * - Tags: `oats-json-v1-<hex>` names a resolution id (a tag cannot hold
 *   `:`), and a capture record is also tagged with its capture name.
 *
 * The manifest is serialised as canonical JSON (oats.json.v1: sorted keys,
 * no spaces, one trailing LF), so
 * two hosts pushing the same resolution push byte-identical manifests.
 */

export const OCI_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json";
export const TREE_MEDIA_TYPE = "application/vnd.oats.tree.v1.tar";
export const BLOB_MEDIA_TYPE = "application/vnd.oats.blob.v1";
export const RESOLUTION_MEDIA_TYPE = "application/vnd.oats.resolution.v1+json";
export const TREES_ARTIFACT_TYPE = "application/vnd.oats.trees.v1";
export const EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json";
/** The OCI empty descriptor's content: `{}`. */
export const EMPTY_CONFIG = Buffer.from("{}");

export const ANNOTATION_KIND = "vnd.oats.kind";
export const ANNOTATION_KEY = "vnd.oats.key";
export const ANNOTATION_INTEGRITY = "vnd.oats.integrity";
export const ANNOTATION_BLOB = "vnd.oats.blob";
export const ANNOTATION_RESOLUTION = "vnd.oats.resolution";
export const ANNOTATION_CAPTURE = "vnd.oats.capture";

/** Registries commonly refuse manifests over 4 MiB; ours are a few KiB. */
export const MAX_MANIFEST_BYTES = 4 << 20;
/** A tree layer is bounded by the extractor's byte limit; this only refuses an absurd declared size early. */
export const MAX_TREE_LAYER_BYTES = 64 * 1024 ** 3;
/**
 * The most layers a manifest may name, pushed or pulled: far above a real
 * resolution (its trees and pinned blobs), and low enough that a manifest
 * naming thousands of layers is refused before any of them is fetched.
 */
export const MAX_LAYERS = 1_000;
/** Tar headers and padding a pull allows on top of twice the extractor's byte limit (pullByteBudget). */
const PULL_TAR_OVERHEAD = 64 << 20;

const TREE_EXEC_PREFIX = "oats.tree-exec.v1:";
const OCI_DIGEST = /^sha256:[0-9a-f]{64}$/;
const TAG_PATTERN = /^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$/;

export interface Descriptor {
  readonly mediaType: string;
  readonly digest: string;
  readonly size: number;
  readonly annotations?: Readonly<Record<string, string>>;
}

export interface OciManifest {
  readonly schemaVersion: 2;
  readonly mediaType: typeof OCI_MANIFEST_MEDIA_TYPE;
  readonly artifactType: string;
  readonly config: Descriptor;
  readonly layers: readonly Descriptor[];
  readonly annotations?: Readonly<Record<string, string>>;
}

export interface TreeLayer {
  readonly kind: ArtifactKind;
  readonly key: string;
  /** `oats.tree-exec.v1:sha256-<hex>` */
  readonly integrity: string;
  /** `sha256:<hex>` of the layer tar. */
  readonly digest: string;
  readonly size: number;
}

export interface BlobLayer {
  /** The oats digest `sha256-<hex>`. */
  readonly blob: string;
  readonly size: number;
}

/** `sha256:<hex>` of bytes. */
export function ociDigest(bytes: Uint8Array): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

/** `sha256-<hex>` (oats) to `sha256:<hex>` (OCI) and back: both name the SHA-256 of the same bytes. */
export function oatsToOci(digest: string): string {
  return `sha256:${digest.slice("sha256-".length)}`;
}
export function ociToOats(digest: string): string {
  return `sha256-${digest.slice("sha256:".length)}`;
}

/** The tag naming a resolution id: `oats-json-v1-<hex>`. */
export function resolutionTag(id: string): string {
  return `oats-json-v1-${id.slice("sha256-".length)}`;
}

/** The capture name as a tag, or null when it is not a valid tag (every identifier of up to 128 characters is). */
export function captureTag(name: string): string | null {
  return TAG_PATTERN.test(name) ? name : null;
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function treeDescriptor(tree: TreeLayer): Descriptor {
  return {
    mediaType: TREE_MEDIA_TYPE,
    digest: tree.digest,
    size: tree.size,
    annotations: { [ANNOTATION_INTEGRITY]: tree.integrity, [ANNOTATION_KEY]: tree.key, [ANNOTATION_KIND]: tree.kind },
  };
}

function blobDescriptor(blob: BlobLayer): Descriptor {
  return {
    mediaType: BLOB_MEDIA_TYPE,
    digest: oatsToOci(blob.blob),
    size: blob.size,
    annotations: { [ANNOTATION_BLOB]: blob.blob },
  };
}

function layers(trees: readonly TreeLayer[], blobs: readonly BlobLayer[]): Descriptor[] {
  const treeRows = [...trees].sort((a, b) =>
    compare(`${a.kind}\0${a.key}\0${a.integrity}`, `${b.kind}\0${b.key}\0${b.integrity}`),
  );
  const blobRows = [...blobs].sort((a, b) => compare(a.blob, b.blob));
  if (treeRows.length + blobRows.length > MAX_LAYERS)
    throw new OatsError(
      "invalid-input",
      `${treeRows.length} trees and ${blobRows.length} blobs make more than ${MAX_LAYERS} layers, ` +
        "which no pull accepts; push fewer trees at a time",
      { reason: "too-many-layers", layers: treeRows.length + blobRows.length, limit: MAX_LAYERS },
    );
  return [...treeRows.map(treeDescriptor), ...blobRows.map(blobDescriptor)];
}

/** The manifest of a resolution: config = the record's exact bytes. */
export function resolutionManifest(input: {
  id: string;
  recordBytes: Buffer;
  capture: string | null;
  trees: readonly TreeLayer[];
  blobs: readonly BlobLayer[];
}): OciManifest {
  const config: Descriptor = {
    mediaType: RESOLUTION_MEDIA_TYPE,
    digest: oatsToOci(input.id),
    size: input.recordBytes.length,
  };
  if (ociDigest(input.recordBytes) !== config.digest)
    throw new OatsError("internal-error", `resolution ${input.id}: the record bytes do not hash to the id`, {
      id: input.id,
    });
  return {
    schemaVersion: 2,
    mediaType: OCI_MANIFEST_MEDIA_TYPE,
    artifactType: RESOLUTION_MEDIA_TYPE,
    config,
    layers: layers(input.trees, input.blobs),
    annotations: {
      [ANNOTATION_RESOLUTION]: input.id,
      ...(input.capture !== null ? { [ANNOTATION_CAPTURE]: input.capture } : {}),
    },
  };
}

/** The manifest of trees pushed without a record. */
export function treesManifest(trees: readonly TreeLayer[]): OciManifest {
  return {
    schemaVersion: 2,
    mediaType: OCI_MANIFEST_MEDIA_TYPE,
    artifactType: TREES_ARTIFACT_TYPE,
    config: { mediaType: EMPTY_MEDIA_TYPE, digest: ociDigest(EMPTY_CONFIG), size: EMPTY_CONFIG.length },
    layers: layers(trees, []),
  };
}

/** The manifest's bytes (canonical JSON) and their digest. */
export function encodeManifest(manifest: OciManifest): { bytes: Buffer; digest: string } {
  const bytes = canonicalJsonBytes(manifest);
  return { bytes, digest: ociDigest(bytes) };
}

// ------------------------------------------------------------------ reading a pulled manifest

export type PulledLayer =
  | ({ readonly type: "tree" } & TreeLayer)
  | ({ readonly type: "blob"; readonly digest: string } & BlobLayer);

export interface PulledManifest {
  readonly artifactType: typeof RESOLUTION_MEDIA_TYPE | typeof TREES_ARTIFACT_TYPE;
  /** The resolution id (config digest) for a resolution manifest, else null. */
  readonly resolution: { readonly id: string; readonly size: number } | null;
  readonly layers: readonly PulledLayer[];
}

const digestField = z.string().regex(OCI_DIGEST, "must be sha256:<64 hex>");
const annotationsField = z.record(z.string(), z.string()).optional();
const descriptorSchema = z
  .object({
    mediaType: z.string(),
    digest: digestField,
    size: z.number().int().nonnegative(),
    annotations: annotationsField,
    // Descriptor fields a registry or another tool may add; they are not ours to interpret and change nothing here.
    urls: z.array(z.string()).max(0, "external URLs are not followed").optional(),
    artifactType: z.string().optional(),
    data: z.string().optional(),
  })
  .strict();
const manifestSchema = z
  .object({
    schemaVersion: z.literal(2),
    mediaType: z.literal(OCI_MANIFEST_MEDIA_TYPE),
    artifactType: z.string(),
    config: descriptorSchema,
    layers: z.array(descriptorSchema).max(MAX_LAYERS),
    annotations: annotationsField,
    subject: descriptorSchema.optional(),
  })
  .strict();

function refused(origin: string, reason: string, message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-input", `${origin}: ${message}; nothing was pulled`, { origin, reason, ...details });
}

function parseJson(bytes: Buffer, origin: string): unknown {
  try {
    return JSON.parse(bytes.toString("utf8"));
  } catch {
    throw refused(origin, "manifest-not-json", "the manifest is not JSON");
  }
}

/**
 * Read a manifest a registry served: its size, its media types and every
 * field are checked before any blob is fetched. An unknown media type (of
 * the manifest, its artifactType, its config or a layer) is refused: oats
 * never guesses what a layer is. The layers' digests are only claims here;
 * pull checks each blob against them while it streams, then every oats
 * digest in staging.
 */
export function parsePulledManifest(bytes: Buffer, origin: string): PulledManifest {
  if (bytes.length > MAX_MANIFEST_BYTES)
    throw refused(
      origin,
      "manifest-too-large",
      `the manifest is ${bytes.length} bytes, over the limit of ${MAX_MANIFEST_BYTES}`,
      { size: bytes.length, limit: MAX_MANIFEST_BYTES },
    );
  const json = parseJson(bytes, origin);
  const mediaType = (json as { mediaType?: unknown } | null)?.mediaType;
  if (mediaType !== OCI_MANIFEST_MEDIA_TYPE)
    throw refused(
      origin,
      "unknown-media-type",
      `the manifest's media type ${JSON.stringify(mediaType)} is not ${OCI_MANIFEST_MEDIA_TYPE}`,
      { mediaType: mediaType ?? null },
    );
  const listed = (json as { layers?: unknown }).layers;
  if (Array.isArray(listed) && listed.length > MAX_LAYERS)
    throw refused(
      origin,
      "too-many-layers",
      `the manifest names ${listed.length} layers, over the limit of ${MAX_LAYERS}`,
      { layers: listed.length, limit: MAX_LAYERS },
    );
  const parsed = manifestSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw refused(
      origin,
      "invalid-manifest",
      `the manifest /${(issue?.path ?? []).join("/")}: ${issue?.message ?? "malformed"}`,
      { pointer: `/${(issue?.path ?? []).join("/")}` },
    );
  }
  const manifest = parsed.data;
  let resolution: PulledManifest["resolution"] = null;
  if (manifest.artifactType === RESOLUTION_MEDIA_TYPE) {
    if (manifest.config.mediaType !== RESOLUTION_MEDIA_TYPE)
      throw refused(
        origin,
        "unknown-media-type",
        `a resolution manifest's config must be ${RESOLUTION_MEDIA_TYPE}, not ${manifest.config.mediaType}`,
        { mediaType: manifest.config.mediaType },
      );
    if (manifest.config.size > MAX_RECORD_BYTES)
      throw refused(
        origin,
        "too-large",
        `the record is declared as ${manifest.config.size} bytes, over ${MAX_RECORD_BYTES}`,
        { size: manifest.config.size, limit: MAX_RECORD_BYTES },
      );
    resolution = { id: ociToOats(manifest.config.digest), size: manifest.config.size };
  } else if (manifest.artifactType === TREES_ARTIFACT_TYPE) {
    if (manifest.config.mediaType !== EMPTY_MEDIA_TYPE)
      throw refused(
        origin,
        "unknown-media-type",
        `a trees manifest's config must be ${EMPTY_MEDIA_TYPE}, not ${manifest.config.mediaType}`,
        { mediaType: manifest.config.mediaType },
      );
  } else {
    throw refused(
      origin,
      "unknown-media-type",
      `artifactType ${JSON.stringify(manifest.artifactType)} is not an oats artifact`,
      { artifactType: manifest.artifactType },
    );
  }

  const seen = new Set<string>();
  const pulled: PulledLayer[] = manifest.layers.map((layer, index) => {
    const annotations = layer.annotations ?? {};
    const at = { layer: index, digest: layer.digest };
    if (layer.mediaType === TREE_MEDIA_TYPE) {
      const kind = annotations[ANNOTATION_KIND];
      const key = annotations[ANNOTATION_KEY];
      const integrity = annotations[ANNOTATION_INTEGRITY];
      if (!(ARTIFACT_KINDS as readonly string[]).includes(kind ?? ""))
        throw refused(
          origin,
          "invalid-manifest",
          `layer ${index}: ${ANNOTATION_KIND} ${JSON.stringify(kind ?? null)} is not an artifact kind`,
          at,
        );
      const keyOk =
        typeof key === "string" &&
        key.length <= IDENTIFIER_MAX_LENGTH &&
        (kind === "source" ? SOURCE_KEY_PATTERN.test(key) : IDENTIFIER_PATTERN.test(key));
      if (!keyOk)
        throw refused(
          origin,
          "invalid-manifest",
          `layer ${index}: ${ANNOTATION_KEY} ${JSON.stringify(key ?? null)} is not a valid ${kind} key`,
          at,
        );
      if (typeof integrity !== "string" || !/^oats\.tree-exec\.v1:sha256-[0-9a-f]{64}$/.test(integrity)) {
        throw refused(
          origin,
          "invalid-manifest",
          `layer ${index}: ${ANNOTATION_INTEGRITY} must be ${TREE_EXEC_PREFIX}sha256-<64 hex>`,
          at,
        );
      }
      if (layer.size > MAX_TREE_LAYER_BYTES)
        throw refused(origin, "too-large", `layer ${index} is declared as ${layer.size} bytes`, {
          ...at,
          size: layer.size,
          limit: MAX_TREE_LAYER_BYTES,
        });
      const id = `t\0${kind}\0${key}\0${integrity}`;
      if (seen.has(id))
        throw refused(origin, "invalid-manifest", `layer ${index}: ${kind} ${key} ${integrity} is listed twice`, at);
      seen.add(id);
      return { type: "tree", kind: kind as ArtifactKind, key, integrity, digest: layer.digest, size: layer.size };
    }
    if (layer.mediaType === BLOB_MEDIA_TYPE) {
      const blob = annotations[ANNOTATION_BLOB];
      if (blob !== ociToOats(layer.digest))
        throw refused(
          origin,
          "invalid-manifest",
          `layer ${index}: ${ANNOTATION_BLOB} must name the layer's own digest`,
          at,
        );
      if (layer.size > MAX_BLOB_BYTES)
        throw refused(
          origin,
          "too-large",
          `layer ${index} is declared as ${layer.size} bytes, over ${MAX_BLOB_BYTES}`,
          { ...at, size: layer.size, limit: MAX_BLOB_BYTES },
        );
      if (seen.has(`b\0${blob}`))
        throw refused(origin, "invalid-manifest", `layer ${index}: blob ${blob} is listed twice`, at);
      seen.add(`b\0${blob}`);
      return { type: "blob", blob, digest: layer.digest, size: layer.size };
    }
    throw refused(
      origin,
      "unknown-media-type",
      `layer ${index} has media type ${JSON.stringify(layer.mediaType)}, which is not an oats layer`,
      { ...at, mediaType: layer.mediaType },
    );
  });
  return { artifactType: manifest.artifactType, resolution, layers: pulled };
}

/**
 * The most bytes a pull may fetch, given the extractor's byte limit: a
 * bundle is extracted under `maxBytes` as a whole, and a pull is held to the
 * same as a whole, with room for tar headers (twice the limit, plus 64 MiB).
 */
export function pullByteBudget(maxBytes: number): number {
  return maxBytes * 2 + PULL_TAR_OVERHEAD;
}

/**
 * Refuse, before any blob is fetched, a manifest whose declared sizes (the
 * record's and every layer's, together) pass the pull's byte budget: a
 * registry that declares a layer of 2^53 bytes, or thousands of large ones,
 * is told no at once instead of being read until the limit trips, layer
 * after layer.
 */
export function checkDeclaredSizes(manifest: PulledManifest, budget: number, origin: string): void {
  let total = manifest.resolution?.size ?? 0;
  for (const [index, layer] of manifest.layers.entries()) {
    total += layer.size;
    if (total > budget)
      throw refused(
        origin,
        "too-large",
        `the record and layers 0-${index} declare ${total} bytes together, over the pull's limit of ${budget} ` +
          "(twice --max-bytes, plus 64 MiB)",
        { layer: index, declared: total, limit: budget },
      );
  }
}
