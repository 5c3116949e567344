import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { OatsError, canonicalJsonBytes } from "../core/index.js";
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
import { MAX_MANIFEST_BYTES, OCI_MANIFEST_MEDIA_TYPE, oatsToOci, parsePulledManifest } from "./mapping.js";
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
        const stream = await getBlob(session, layer.digest, {
          size: layer.size,
          maxBytes: Math.min(layer.size, limits.maxBytes * 2 + (64 << 20)),
        });
        await extractTar(stream, dest, { origin: `${origin} layer ${layer.digest}`, prefix: null, limits, ...watch });
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
