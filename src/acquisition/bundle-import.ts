import {
  withPublishLease,
  parseBlobDigest,
  putBlob,
  adoptTree,
  adoptVerifiedTree,
  resolveScope,
  throwIfAborted,
  type ProgressListener,
} from "../retention/index.js";
import { join } from "node:path";
import { OatsError } from "../core/index.js";
import { writeResolution } from "../resolution/index.js";
import type { ArtifactKind } from "../retention/index.js";
import { openArchive } from "./archive-file.js";
import { extractLimits, extractTar, type ExtractLimits } from "./extract.js";
import { withExtractionDir } from "./staging.js";
import { checkContents, checkTarget, readManifest, verifyBundle } from "./bundle-checks.js";

/** Import: extract to staging, check everything (bundle-checks.ts), then publish each item through its normal path
 * (see bundle.ts). */

export interface ImportOptions {
  /** Limits on the archive (entries, expanded bytes, name bytes and depth, header bytes); the extractor's defaults
   * otherwise. */
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
  readonly artifacts: {
    readonly kind: ArtifactKind;
    readonly key: string;
    readonly integrity: string;
    readonly status: "retained" | "kept";
  }[];
  readonly resolutions: { readonly id: string; readonly status: "written" | "kept" }[];
  readonly blobs: { readonly digest: string; readonly status: "written" | "kept" }[];
}

/** Import a bundle: extract to staging, verify everything, then publish each item through its normal path. */
export async function importBundle(
  scope: string,
  bundlePath: string,
  options: ImportOptions = {},
): Promise<ImportReport> {
  if (typeof bundlePath !== "string" || bundlePath === "")
    throw new OatsError("invalid-input", "import needs a bundle path", {});
  // Opened once and read through its descriptor (archive-file.ts).
  const archive = openArchive(bundlePath, "bundle");
  const bundle = archive.path;
  try {
    const realScope = resolveScope(scope);
    const limits = extractLimits(options.limits);
    return await withPublishLease(realScope, () =>
      withExtractionDir(realScope, async (staging) => {
        const { onProgress, signal } = options;
        const watch = { ...(onProgress ? { onProgress } : {}), ...(signal ? { signal } : {}) };
        await extractTar(archive.stream(), staging, { origin: bundle, prefix: null, limits, ...watch });
        return { bundle, ...(await importStaged(realScope, bundle, staging, limits.maxDepth, watch)) };
      }),
    );
  } finally {
    await archive.close();
  }
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
  for (const [index, row] of manifest.artifacts.entries()) {
    // Verified above; adopted (moved, made durable) rather than copied. Staging is ours alone (0700), so
    // a tree read on this thread is not read again (adoptVerifiedTree); a worker lane's is read back once.
    const request = { kind: row.kind, key: row.key, source: join(staging, row.path), expect: row.integrity };
    const tree = verified.trees[index];
    const receipt = tree
      ? await adoptVerifiedTree(realScope, request, tree, { maxDepth: limits.maxDepth })
      : await adoptTree(realScope, request, { maxDepth: limits.maxDepth });
    artifacts.push({
      kind: row.kind,
      key: row.key,
      integrity: row.integrity,
      status: receipt.status === "kept" ? "kept" : "retained",
    });
  }
  const blobs: ImportReport["blobs"][number][] = [];
  for (const row of manifest.blobs) {
    const put = putBlob(realScope, verified.blobs.get(row.digest)!);
    if (put.digest !== parseBlobDigest(row.digest))
      throw new OatsError("internal-error", `blob ${row.digest} was published as ${put.digest}`, {
        digest: row.digest,
      });
    blobs.push({ digest: row.digest, status: put.status });
  }
  const resolutions: ImportReport["resolutions"][number][] = [];
  for (const row of manifest.resolutions) {
    const written = writeResolution(realScope, verified.records.get(row.id)!.record);
    if (written.id !== row.id)
      throw new OatsError("internal-error", `resolution ${row.id} was published as ${written.id}`, { id: row.id });
    resolutions.push({ id: row.id, status: written.status });
  }
  return { artifacts, resolutions, blobs };
}
