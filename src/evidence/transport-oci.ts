import { OatsError } from "../core/index.js";
import {
  OciClient,
  OCI_MANIFEST,
  sha256Digest,
  bufferSource,
  formatOciReference,
  type SessionOptions,
} from "../oci/index.js";
import {
  asEvidenceFile,
  readFarSideRun,
  type EvidenceFile,
  type FarSideFile,
  type FarSideRun,
} from "./evidence-file.js";
import { runHex } from "./run-id.js";
import type { EvidenceBundle, EvidenceTransport, ProbeResult } from "./transport.js";

/**
 * The `oci://` evidence transport: a sealed run as one OCI artifact in a
 * registry repository, tagged `run-<hex>` (the run id's hex):
 *
 *   manifest  artifactType application/vnd.oats.run.v1,
 *             config the empty descriptor ({}),
 *             annotation dev.oats.run.id = the run id
 *   layers    one per file (record.json, log, audit.jsonl), its name in
 *             org.opencontainers.image.title
 *
 * Each layer goes up from a stream of its file (evidence-file.ts), its
 * digest computed beforehand by the outbox's streaming read: monolithic up
 * to the client's chunk size, chunked PATCHes above it, so a log of any
 * size is never held in memory; the registry checks the digest it was
 * given. Reading back streams each blob, hashed by the client as it
 * passes; a push's read-back and a pull take it a piece at a time through
 * one reused buffer (oci/blob-pieces.ts), so a log of gigabytes leaves no
 * garbage buffer per piece behind either way.
 *
 * The manifest's bytes depend only on the run id and the files, so putting
 * the same run twice writes nothing new, and a tag that already names
 * another manifest is `integrity-mismatch` with nothing replaced. readBack
 * reads the manifest and every layer from the registry itself, each
 * verified against its OCI digest by the client, and the outbox then
 * compares every file with what it queued. A second writer racing the tag
 * between our check and our put can still replace it; readBack is what
 * proves delivery, and it would then fail.
 */

export const RUN_ARTIFACT_TYPE = "application/vnd.oats.run.v1";
export const EMPTY_CONFIG = { mediaType: "application/vnd.oci.empty.v1+json", bytes: Buffer.from("{}") } as const;
const TITLE = "org.opencontainers.image.title";
const RUN_ID_ANNOTATION = "dev.oats.run.id";
const FILE_MEDIA_TYPES: Record<string, string> = {
  "record.json": "application/vnd.oats.run.record.v1+json",
  log: "application/vnd.oats.run.log.v1",
  "audit.jsonl": "application/vnd.oats.run.audit.v1+jsonl",
};
const FILE_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;

export function runTag(runId: string): string {
  return `run-${runHex(runId)}`;
}

interface Layer {
  readonly name: string;
  readonly file: EvidenceFile;
  /** The OCI digest (`sha256:<hex>`) of the file: its oats.bytes.v1 digest, spelled as OCI spells it. */
  readonly digest: string;
}

/** The artifact's manifest bytes: fixed key order, layers by file name. */
export function runManifest(
  runId: string,
  files: ReadonlyMap<string, Buffer | EvidenceFile>,
): { bytes: Buffer; layers: Layer[] } {
  const layers = [...files.entries()]
    .map(([name, given]) => {
      if (!FILE_NAME.test(name))
        throw new OatsError(
          "invalid-input",
          `an evidence file name must be plain: ${JSON.stringify(name.slice(0, 100))}`,
          { name: name.slice(0, 100) },
        );
      const file = asEvidenceFile(given);
      return { name, file, digest: `sha256:${file.digest.slice("sha256-".length)}` };
    })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const manifest = {
    schemaVersion: 2,
    mediaType: OCI_MANIFEST,
    artifactType: RUN_ARTIFACT_TYPE,
    config: {
      mediaType: EMPTY_CONFIG.mediaType,
      digest: sha256Digest(EMPTY_CONFIG.bytes),
      size: EMPTY_CONFIG.bytes.length,
    },
    layers: layers.map((layer) => ({
      mediaType: FILE_MEDIA_TYPES[layer.name] ?? "application/octet-stream",
      digest: layer.digest,
      size: layer.file.size,
      annotations: { [TITLE]: layer.name },
    })),
    annotations: { [RUN_ID_ANNOTATION]: runId },
  };
  return { bytes: Buffer.from(JSON.stringify(manifest), "utf8"), layers };
}

function isCode(error: unknown, code: string): boolean {
  return error instanceof OatsError && error.code === code;
}

/** The layers a pulled run manifest names, each checked to be a plain file name and a sha256 descriptor. */
function readLayers(bytes: Buffer, runId: string, to: string): Array<{ name: string; digest: string; size: number }> {
  const bad = (problem: string): OatsError =>
    new OatsError("invalid-artifact", `the run artifact for ${runId} at ${to} ${problem}`, {
      to,
      runId,
      reason: "run-manifest",
    });
  const manifest = JSON.parse(bytes.toString("utf8")) as {
    artifactType?: unknown;
    layers?: unknown;
    annotations?: Record<string, unknown>;
  };
  if (manifest.artifactType !== RUN_ARTIFACT_TYPE) throw bad(`is not an ${RUN_ARTIFACT_TYPE} artifact`);
  if (manifest.annotations?.[RUN_ID_ANNOTATION] !== runId) {
    throw new OatsError("integrity-mismatch", `the tag for run ${runId} at ${to} names another run`, {
      to,
      runId,
      actual: String(manifest.annotations?.[RUN_ID_ANNOTATION] ?? "").slice(0, 100),
      reason: "run-manifest",
    });
  }
  if (!Array.isArray(manifest.layers) || manifest.layers.length > 16) throw bad("has no usable layer list");
  const seen = new Set<string>();
  return manifest.layers.map((layer: { digest?: unknown; size?: unknown; annotations?: Record<string, unknown> }) => {
    const name = layer?.annotations?.[TITLE];
    if (typeof name !== "string" || !FILE_NAME.test(name) || seen.has(name))
      throw bad("has a layer without a plain, unique file name");
    seen.add(name);
    if (typeof layer.digest !== "string" || !/^sha256:[a-f0-9]{64}$/.test(layer.digest))
      throw bad(`has a layer ${name} without a sha256 digest`);
    // No bound of its own: a reader streams the blob and stops at the size it expects (the queued one, the record's).
    if (!Number.isSafeInteger(layer.size) || (layer.size as number) < 0)
      throw bad(`has a layer ${name} with an unusable size`);
    return { name, digest: layer.digest, size: layer.size as number };
  });
}

export class OciEvidenceTransport implements EvidenceTransport {
  readonly client: OciClient;
  readonly #to: string;

  constructor(destination: string, options: SessionOptions = {}) {
    this.client = new OciClient(destination, options);
    const reference = this.client.reference;
    if (reference.tag !== null || reference.digest !== null) {
      throw new OatsError(
        "invalid-input",
        "an OCI evidence destination names a repository, not a tag or digest (runs are tagged run-<hex>)",
        { to: destination.slice(0, 300) },
      );
    }
    this.#to = formatOciReference(reference);
  }

  describe(): string {
    return this.#to;
  }

  async probe(): Promise<ProbeResult> {
    try {
      await this.client.ping();
      return { state: "reachable", reason: null };
    } catch (error) {
      if (isCode(error, "registry-refused")) {
        const refusal = error as OatsError;
        return { state: "unreachable", reason: String(refusal.details["reason"]), refusal };
      }
      throw error;
    }
  }

  async put(bundle: EvidenceBundle): Promise<void> {
    const tag = runTag(bundle.runId);
    const { bytes, layers } = runManifest(bundle.runId, bundle.files);
    const digest = sha256Digest(bytes);
    let existing: string | null = null;
    try {
      existing = (await this.client.getManifest(tag, { accept: [OCI_MANIFEST] })).digest;
    } catch (error) {
      if (!isCode(error, "artifact-not-found")) throw error;
    }
    if (existing !== null && existing !== digest) {
      throw new OatsError(
        "integrity-mismatch",
        `${this.#to} already holds run ${bundle.runId} with other content; nothing was replaced`,
        { to: this.#to, runId: bundle.runId, expected: digest, actual: existing, reason: "other-content" },
      );
    }
    const blobs = [
      bufferSource(EMPTY_CONFIG.bytes, sha256Digest(EMPTY_CONFIG.bytes)),
      ...layers.map((layer) => ({
        digest: layer.digest,
        size: layer.file.size,
        open: (start: number, end: number) => layer.file.open(start, end),
        ...(layer.file.readAt ? { readAt: layer.file.readAt.bind(layer.file) } : {}),
      })),
    ];
    const ensureBlobs = async () => {
      for (const blob of blobs) {
        if ((await this.client.headBlob(blob.digest)) === null) await this.client.putBlob(blob);
      }
    };
    await ensureBlobs();
    if (existing === null) await this.client.putManifestEnsuring(tag, bytes, OCI_MANIFEST, ensureBlobs);
  }

  /** The run's layers as the registry's manifest names them, each streamed from the registry on demand. */
  async openBack(runId: string): Promise<FarSideRun | null> {
    let manifest;
    try {
      manifest = await this.client.getManifest(runTag(runId), { accept: [OCI_MANIFEST] });
    } catch (error) {
      if (isCode(error, "artifact-not-found")) return null;
      throw error;
    }
    const files = new Map<string, FarSideFile>();
    for (const layer of readLayers(manifest.bytes, runId, this.#to)) {
      files.set(layer.name, {
        size: layer.size,
        // The client hashes the blob as it streams and fails the stream unless it is exactly the layer's digest.
        stream: () => this.client.getBlob(layer.digest, { size: layer.size, maxBytes: layer.size }),
        // The same, through one reused buffer (oci/blob-pieces.ts): what a push's read-back and a pull use.
        pieces: (limit, consume) =>
          this.client.readBlobPieces(layer.digest, { size: layer.size, maxBytes: layer.size, limit }, consume),
      });
    }
    return { files, close: async () => undefined };
  }

  /** Every layer whole (at most READ_BACK_LIMIT bytes each). */
  async readBack(runId: string): Promise<Map<string, Buffer> | null> {
    const there = await this.openBack(runId);
    if (there === null) return null;
    return readFarSideRun(there, { to: this.#to, runId }, () => ({
      code: "invalid-artifact",
      message: `the run artifact for ${runId} at ${this.#to} has a layer too large`,
    }));
  }
}

/** `oci://host[:port]/repository` (or a loopback `http://…`) as an evidence transport. */
export function ociTransport(destination: string, options: SessionOptions = {}): OciEvidenceTransport {
  return new OciEvidenceTransport(destination, options);
}
