import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { OatsError, canonicalJsonBytes, isOatsError } from "../core/index.js";
import {
  BUNDLE_MANIFEST,
  BUNDLE_SCHEMA_VERSION,
  bundleArtifactPath,
  bundleBlobPath,
  bundleResolutionPath,
  importStaged,
  type BundleManifest,
  type ImportReport,
  extractLimits,
  extractTar,
  type ExtractLimits,
  type ExtractOptions,
  withExtractionDir,
} from "../acquisition/index.js";
import { compositionOf, compositionSubject, type CompositionSubject } from "../captures/index.js";
import { readRecordBytes, MAX_RECORD_BYTES } from "../resolution/index.js";
import {
  TREE_EXEC,
  MAX_BLOB_BYTES,
  resolveScope,
  withPublishLease,
  throwIfAborted,
  type ProgressListener,
} from "../retention/index.js";
import {
  MAX_MANIFEST_BYTES,
  OCI_MANIFEST_MEDIA_TYPE,
  checkDeclaredSizes,
  oatsToOci,
  parsePulledManifest,
  pullByteBudget,
} from "./mapping.js";
import { openRegistry } from "./target.js";
import { fetchAttestations, type PulledAttestation } from "./attestations.js";
import { getBlob, getBlobBytes, getManifest } from "../oci/index.js";

/**
 * `oats pull <oci reference>`: the manifest (size-limited, media types
 * checked, anything unknown refused), then every blob into the scope's
 * extraction staging, each checked against its OCI digest and size while it
 * streams (a tree layer goes through the safe extractor as it arrives: an
 * escaping name, a hard link, a device is refused there), then the very
 * import path `oats import` uses (importStaged): every tree, record and blob
 * against its oats digest, records complete, the target checked, and only
 * then publication. Any refusal publishes nothing; staging is always
 * removed.
 *
 * A layer the extractor refuses ends its HTTP request at once (extractLayer):
 * nothing more of it is read, and no half-read response is left to the idle
 * timeout. Ctrl-C (`signal`) abandons every request of the pull the same way.
 * One exception, so the refusal names the right culprit: when the tar parser
 * cannot read the bytes at all, the rest of the blob is read into its hash
 * (never into staging, and no further than the manifest's size for it).
 * Bytes that are not the manifest's digest are then `integrity-mismatch`:
 * the registry served other bytes than the ones pushed; the parser's refusal
 * is kept in `details.extractor`. Bytes that are the digest are the pushed
 * layer, and the parser's refusal stands.
 *
 * Pull never approves. For each capture record it brought it reports the
 * composition subject and the `oats approve` line; the record id is the one
 * the pushing host had (the config is the record's exact bytes).
 */

export interface PullOptions {
  readonly insecure?: boolean;
  readonly limits?: Partial<ExtractLimits>;
  readonly onProgress?: ProgressListener;
  readonly signal?: AbortSignal;
}

export interface PullReport extends Omit<ImportReport, "bundle"> {
  readonly reference: string;
  readonly digest: string;
  readonly artifactType: string;
  /** For each capture record pulled: what a local operator must approve before it dispatches here. */
  readonly approve: { readonly resolution: string; readonly subject: CompositionSubject; readonly command: string }[];
  /** The signed statements attached to the resolution's manifest (referrers), each checked and stored, or refused. */
  readonly attestations: PulledAttestation[];
}

function approveLine(subject: CompositionSubject): string {
  return `oats approve ${subject.kind} ${subject.key} ${subject.integrity} --reason "<why>"`;
}

/**
 * Pull what an OCI reference names into the scope (src/fleet/pull.ts): every blob checked against its OCI digest
 * and size, every tree, record and blob against its oats digest, and nothing published unless all of it verifies.
 * Refuses a reference without a tag or digest (`invalid-artifact-reference`), a registry that cannot be used
 * (`registry-refused`), bytes other than the manifest's (`integrity-mismatch`) and an unsafe layer (the
 * extractor's refusals). Pull never approves.
 * @param reference `oci://host/repository:tag` or `oci://host/repository@sha256:<hex>`
 * @returns what was imported, with the `oats approve` line of each capture it brought
 */
export async function pullFromRegistry(
  scope: string,
  reference: string,
  options: PullOptions = {},
): Promise<PullReport> {
  const target = openRegistry(reference, options);
  const name = target.digest ?? target.tag;
  if (name === null)
    throw new OatsError(
      "invalid-artifact-reference",
      "pull needs a tag or a digest: oci://host/repository:tag or …@sha256:<hex>",
      { reference: `${target.registry}/${target.repository}` },
    );
  const limits = extractLimits(options.limits);
  const realScope = resolveScope(scope);
  const { session } = target;
  const served = await getManifest(session, name, { accept: [OCI_MANIFEST_MEDIA_TYPE], maxBytes: MAX_MANIFEST_BYTES });
  const origin = `oci://${target.registry}/${target.repository}@${served.digest}`;
  const manifest = parsePulledManifest(served.bytes, origin);
  const budget = pullByteBudget(limits.maxBytes);
  checkDeclaredSizes(manifest, budget, origin);
  const watch = {
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  };

  return withPublishLease(realScope, () =>
    withExtractionDir(realScope, async (staging) => {
      const rows: BundleManifest = { schemaVersion: BUNDLE_SCHEMA_VERSION, artifacts: [], resolutions: [], blobs: [] };
      const place = (path: string) => {
        const full = join(staging, ...path.split("/"));
        mkdirSync(join(full, ".."), { recursive: true, mode: 0o700 });
        return full;
      };
      if (manifest.resolution !== null) {
        const { id, size } = manifest.resolution;
        const bytes = await getBlobBytes(session, oatsToOci(id), { size, maxBytes: MAX_RECORD_BYTES });
        writeFileSync(place(bundleResolutionPath(id)), bytes, { flag: "wx", mode: 0o644 });
        rows.resolutions.push({ id, path: bundleResolutionPath(id) });
      }
      for (const layer of manifest.layers) {
        throwIfAborted(options.signal);
        if (layer.type === "blob") {
          const bytes = await getBlobBytes(session, layer.digest, { size: layer.size, maxBytes: MAX_BLOB_BYTES });
          writeFileSync(place(bundleBlobPath(layer.blob)), bytes, { flag: "wx", mode: 0o644 });
          rows.blobs.push({ digest: layer.blob, path: bundleBlobPath(layer.blob) });
          continue;
        }
        const integrity = { format: TREE_EXEC, value: layer.integrity.slice(TREE_EXEC.length + 1) } as const;
        const path = bundleArtifactPath(layer.kind, layer.key, integrity);
        const dest = place(path);
        mkdirSync(dest, { mode: 0o700 });
        // Digest and size are checked as the bytes stream; a mismatch fails the extraction before its end is seen.
        const stop = new AbortController();
        const stream = await getBlob(session, layer.digest, {
          size: layer.size,
          maxBytes: Math.min(layer.size, budget),
          signal: stop.signal,
        });
        await extractLayer(stream, stop, dest, {
          origin: `${origin} layer ${layer.digest}`,
          prefix: null,
          limits,
          ...watch,
        });
        rows.artifacts.push({ kind: layer.kind, key: layer.key, integrity: layer.integrity, path });
      }
      writeFileSync(join(staging, BUNDLE_MANIFEST), canonicalJsonBytes(rows), { flag: "wx", mode: 0o644 });
      const imported = await importStaged(realScope, origin, staging, limits.maxDepth, watch);
      const approve: PullReport["approve"] = [];
      for (const row of imported.resolutions) {
        const { record } = readRecordBytes(realScope, row.id);
        if (record.capture === null) continue;
        const subject = compositionSubject(compositionOf(record));
        approve.push({ resolution: row.id, subject, command: approveLine(subject) });
      }
      // Statements about the resolution travel as its manifest's referrers; a bad one is reported, not stored.
      const attestations =
        manifest.resolution === null
          ? []
          : await fetchAttestations(realScope, session, manifest.resolution.id, served.digest);
      return {
        reference: origin,
        digest: served.digest,
        artifactType: manifest.artifactType,
        ...imported,
        approve,
        attestations,
      };
    }),
  );
}

/**
 * Extract one tree layer from its verifying stream (getBlob). On the
 * extractor's refusal the request is aborted at once (`stop`), except when
 * the parser could not read the bytes as a tar: then the rest of the blob is
 * hashed to tell a registry that served other bytes (`integrity-mismatch`,
 * the parser's refusal in `details.extractor`) from a pushed layer that is
 * not a tar (the parser's refusal).
 */
async function extractLayer(
  stream: Readable,
  stop: AbortController,
  dest: string,
  options: ExtractOptions,
): Promise<void> {
  const feed = new PassThrough();
  let served: unknown = null;
  stream.on("error", (error) => {
    served ??= error;
    feed.destroy(error);
  });
  stream.pipe(feed);
  try {
    await extractTar(feed, dest, options);
  } catch (refusal) {
    let drained = false;
    if (served === null && isOatsError(refusal) && refusal.details["reason"] === "corrupt-archive") {
      stream.unpipe(feed);
      served = await restOf(stream);
      drained = true;
    }
    // What the blob turned out to be wins over the parser: other bytes, or whatever stopped the read (Ctrl-C, a lost
    // connection) before that could be told.
    if (isOatsError(served) && served !== refusal && (drained || served.code === "integrity-mismatch")) {
      served.details["extractor"] = isOatsError(refusal)
        ? { code: refusal.code, reason: refusal.details["reason"] ?? null, message: refusal.message }
        : { message: String(refusal) };
      stop.abort(served);
      throw served;
    }
    stop.abort(refusal);
    throw refusal;
  }
}

/** Read the rest of a verifying stream into its hash only; its error (a digest or size mismatch), or null. */
function restOf(stream: Readable): Promise<unknown> {
  if (stream.readableEnded) return Promise.resolve(null);
  return new Promise((resolve) => {
    stream.once("end", () => resolve(null));
    stream.once("error", (error) => resolve(error));
    stream.once("close", () => resolve(null));
    stream.resume();
  });
}
