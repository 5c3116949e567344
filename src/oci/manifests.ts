import { OatsError } from "../core/index.js";
import { sha256Digest } from "./blobs.js";
import { drain, readBody, registryErrorCodes } from "./http.js";
import { DIGEST_PATTERN, TAG_PATTERN } from "./reference.js";
import { DEFAULT_RETRY, pause, retryDelay, type RetryPolicy } from "./retry.js";
import type { RegistrySession } from "./session.js";

/**
 * Manifests are small JSON documents addressed by the digest of their exact
 * bytes. Reading one checks, before anyone parses it further: the size
 * bound, the media type (the registry's Content-Type, and the document's own
 * `mediaType` when it has one), and the digest of the bytes against the
 * reference's digest or, for a tag, the registry's Docker-Content-Digest.
 */

export const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
export const OCI_INDEX = "application/vnd.oci.image.index.v1+json";
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

export interface Manifest {
  readonly bytes: Buffer;
  readonly mediaType: string;
  readonly digest: string;
}

export interface ManifestReadOptions {
  /** Media types the caller understands (default: OCI image manifest and index). */
  readonly accept?: readonly string[];
  readonly maxBytes?: number;
}

function checkReference(reference: string): void {
  if (!TAG_PATTERN.test(reference) && !DIGEST_PATTERN.test(reference)) {
    throw new OatsError("invalid-artifact-reference", "a manifest reference is a tag or a sha256 digest", {
      reference: String(reference).slice(0, 200),
    });
  }
}

function mediaTypeOf(header: string | undefined): string {
  return (header ?? "").split(";")[0]!.trim().toLowerCase();
}

function invalidManifest(
  session: RegistrySession,
  reference: string,
  problem: string,
  details: Record<string, unknown> = {},
): OatsError {
  return new OatsError("invalid-artifact", `the manifest ${reference} from ${session.host} ${problem}`, {
    host: session.host,
    repository: session.reference.repository,
    reference,
    ...details,
  });
}

/** Parse enough to check the document is a manifest of the type it claims; the mapping validates the rest. */
function checkDocument(session: RegistrySession, reference: string, bytes: Buffer, mediaType: string): void {
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw invalidManifest(session, reference, "is not JSON", { reason: "not-json" });
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed))
    throw invalidManifest(session, reference, "is not a JSON object", { reason: "not-json" });
  const document = parsed as { schemaVersion?: unknown; mediaType?: unknown };
  if (document.schemaVersion !== 2)
    throw invalidManifest(session, reference, "is not schemaVersion 2", { reason: "schema-version" });
  if (document.mediaType !== undefined && document.mediaType !== mediaType) {
    throw invalidManifest(
      session,
      reference,
      `says it is ${String(document.mediaType).slice(0, 100)} but was served as ${mediaType}`,
      { reason: "media-type", mediaType },
    );
  }
}

export async function getManifest(
  session: RegistrySession,
  reference: string,
  options: ManifestReadOptions = {},
): Promise<Manifest> {
  checkReference(reference);
  const accept = options.accept ?? [OCI_MANIFEST, OCI_INDEX];
  const limit = options.maxBytes ?? MAX_MANIFEST_BYTES;
  const response = await session.request({
    method: "GET",
    url: session.url(`manifests/${reference}`),
    headers: { accept: accept.join(", ") },
  });
  if (response.statusCode === 404) {
    await drain(response);
    throw new OatsError(
      "artifact-not-found",
      `${session.host} has no manifest ${reference} in ${session.reference.repository}`,
      { host: session.host, repository: session.reference.repository, reference },
    );
  }
  if (response.statusCode !== 200) {
    await drain(response);
    throw session.unexpected(response, `GET of manifest ${reference}`);
  }
  const mediaType = mediaTypeOf(response.headers["content-type"]);
  if (!accept.includes(mediaType)) {
    await drain(response);
    throw invalidManifest(
      session,
      reference,
      `has the media type ${JSON.stringify(mediaType.slice(0, 100))}, not one of ${accept.join(", ")}`,
      { reason: "media-type", mediaType: mediaType.slice(0, 100) },
    );
  }
  const bytes = await readBody(response, limit, () =>
    invalidManifest(session, reference, `is larger than ${limit} bytes`, { reason: "too-large", limit }),
  );
  const digest = sha256Digest(bytes);
  const expected = DIGEST_PATTERN.test(reference) ? reference : response.headers["docker-content-digest"];
  if (typeof expected === "string" && expected !== digest) {
    throw new OatsError(
      "integrity-mismatch",
      `the manifest ${reference} from ${session.host} hashes to ${digest}, not ${expected}`,
      { host: session.host, reference, expected, actual: digest },
    );
  }
  checkDocument(session, reference, bytes, mediaType);
  return { bytes, mediaType, digest };
}

/**
 * Store `bytes` as a manifest under a tag or its own digest; the registry's digest must be the digest of exactly
 * these bytes. `subject` is the registry's `OCI-Subject` answer: a registry with the referrers API names the
 * manifest's subject there once it has indexed it (distribution spec 1.1); null from one without.
 */
export async function putManifest(
  session: RegistrySession,
  reference: string,
  bytes: Buffer,
  mediaType: string,
): Promise<{ digest: string; subject?: string | null }> {
  checkReference(reference);
  if (bytes.length > MAX_MANIFEST_BYTES)
    throw new OatsError("invalid-input", `a manifest is limited to ${MAX_MANIFEST_BYTES} bytes`, {
      size: bytes.length,
      limit: MAX_MANIFEST_BYTES,
    });
  const digest = sha256Digest(bytes);
  if (DIGEST_PATTERN.test(reference) && reference !== digest) {
    throw new OatsError("invalid-input", "a manifest put by digest must be put under the digest of its bytes", {
      reference,
      actual: digest,
    });
  }
  checkDocument(session, reference, bytes, mediaType);
  const response = await session.request({
    method: "PUT",
    url: session.url(`manifests/${reference}`),
    headers: { "content-type": mediaType },
    body: () => bytes,
    repeatable: true,
  });
  const body = await readBody(response, 65536, () => session.unexpected(response, `PUT of manifest ${reference}`));
  if (response.statusCode !== 201)
    throw session.unexpected(response, `PUT of manifest ${reference}`, registryErrorCodes(body));
  const answered = response.headers["docker-content-digest"];
  if (typeof answered === "string" && answered !== digest) {
    throw new OatsError(
      "integrity-mismatch",
      `${session.host} stored manifest ${reference} under ${answered}, not the digest of the bytes sent`,
      { host: session.host, expected: digest, actual: answered },
    );
  }
  const subject = response.headers["oci-subject"];
  return { digest, subject: typeof subject === "string" && DIGEST_PATTERN.test(subject) ? subject : null };
}

/** The registry's refusal of a manifest that names a blob it says it lacks. */
export function isBlobUnknown(error: unknown): boolean {
  if (!(error instanceof OatsError) || error.code !== "registry-refused") return false;
  const codes = error.details["registryErrors"];
  return Array.isArray(codes) && (codes.includes("MANIFEST_BLOB_UNKNOWN") || codes.includes("BLOB_UNKNOWN"));
}

/**
 * `putManifest` for a manifest whose blobs the caller has just checked or
 * sent. A refusal naming an unknown blob is asked again, a bounded number of
 * times, after `ensureBlobs` has checked them again (and sent any that are
 * really gone): with two writers of the same blob, CNCF distribution's
 * filesystem driver briefly reads the blob's link as invalid.
 */
export async function putManifestEnsuring(
  session: RegistrySession,
  reference: string,
  bytes: Buffer,
  mediaType: string,
  ensureBlobs: () => Promise<void>,
  policy: RetryPolicy = DEFAULT_RETRY,
): Promise<{ digest: string }> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await putManifest(session, reference, bytes, mediaType);
    } catch (error) {
      if (!isBlobUnknown(error) || attempt >= policy.retries) throw error;
    }
    await pause(retryDelay(policy, attempt), session.signal);
    await ensureBlobs();
  }
}

/** The repository's tags (following `Link` pages within the registry's origin). */
export async function listTags(session: RegistrySession, limit = 10_000): Promise<string[]> {
  const tags: string[] = [];
  let url: URL | null = session.url("tags/list");
  while (url) {
    const response = await session.request({ method: "GET", url });
    if (response.statusCode === 404) {
      await drain(response);
      return [];
    }
    const body = await readBody(response, 4 * 1024 * 1024, () => session.unexpected(response, "tags/list"));
    if (response.statusCode !== 200) throw session.unexpected(response, "tags/list", registryErrorCodes(body));
    let page: unknown;
    try {
      page = (JSON.parse(body.toString("utf8")) as { tags?: unknown }).tags ?? [];
    } catch {
      page = null;
    }
    if (!Array.isArray(page) || !page.every((tag) => typeof tag === "string" && TAG_PATTERN.test(tag))) {
      throw new OatsError(
        "invalid-artifact",
        `${session.host} answered tags/list with something other than a list of tags`,
        { host: session.host, reason: "tags" },
      );
    }
    tags.push(...(page as string[]));
    if (tags.length > limit)
      throw new OatsError("invalid-artifact", `${session.host} lists more than ${limit} tags`, {
        host: session.host,
        reason: "too-large",
        limit,
      });
    const link = /<([^>]+)>\s*;\s*rel="?next"?/.exec(String(response.headers.link ?? ""));
    url = link ? session.sameOrigin(link[1], url, "the next page of tags") : null;
  }
  return tags;
}
