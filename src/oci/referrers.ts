import { OatsError, canonicalJsonBytes } from "../core/index.js";
import { drain, readBody, registryErrorCodes } from "./http.js";
import { getManifest, MAX_MANIFEST_BYTES, OCI_INDEX, putManifest } from "./manifests.js";
import { DIGEST_PATTERN } from "./reference.js";
import type { RegistrySession } from "./session.js";

/**
 * Referrers (distribution spec 1.1): manifests whose `subject` names another
 * manifest, such as a signature or an attestation attached to it.
 *
 * - Listing: `GET /v2/<name>/referrers/<digest>` where the registry has the
 *   API (200, an image index); where it does not (404, as CNCF distribution
 *   2.8 answers), the referrers tag schema: the tag `sha256-<hex>` of the
 *   subject's digest holds an image index of the referrers.
 * - Attaching: the referrer is put by its own digest; a registry that
 *   indexed its subject says so in `OCI-Subject`. Otherwise the client
 *   updates the referrers tag: reads the index under it (none yet: an empty
 *   one), adds the referrer's descriptor when it is not there, and puts the
 *   index back. Two writers updating one tag at the same moment can lose one
 *   descriptor (the spec's tag schema has no compare-and-swap); attaching
 *   again adds it back.
 *
 * Every descriptor read is checked for its form; what it names is checked by
 * the caller when it fetches the referrer by digest.
 */

export interface ReferrerDescriptor {
  readonly mediaType: string;
  readonly digest: string;
  readonly size: number;
  readonly artifactType?: string;
  readonly annotations?: Readonly<Record<string, string>>;
}

/** More referrers than this for one manifest is refused rather than read. */
export const MAX_REFERRERS = 1000;

/** The referrers tag of a subject digest: `sha256:<hex>` becomes `sha256-<hex>`. */
export function referrersTag(digest: string): string {
  return digest.replace(":", "-");
}

function malformed(session: RegistrySession, what: string, why: string): OatsError {
  return new OatsError("invalid-artifact", `${session.host} served ${what} that is not a referrers index: ${why}`, {
    host: session.host,
    repository: session.reference.repository,
    reason: "referrers-index",
  });
}

function parseIndex(session: RegistrySession, bytes: Buffer, what: string): ReferrerDescriptor[] {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw malformed(session, what, "not JSON");
  }
  const index = value as { schemaVersion?: unknown; manifests?: unknown };
  if (typeof value !== "object" || value === null || index.schemaVersion !== 2 || !Array.isArray(index.manifests))
    throw malformed(session, what, "expected schemaVersion 2 and a list of manifests");
  if (index.manifests.length > MAX_REFERRERS)
    throw new OatsError("invalid-artifact", `${session.host} lists more than ${MAX_REFERRERS} referrers`, {
      host: session.host,
      reason: "too-large",
      limit: MAX_REFERRERS,
    });
  return index.manifests.map((entry: unknown) => {
    const descriptor = entry as Record<string, unknown>;
    if (
      typeof entry !== "object" ||
      entry === null ||
      typeof descriptor.mediaType !== "string" ||
      typeof descriptor.digest !== "string" ||
      !DIGEST_PATTERN.test(descriptor.digest) ||
      !Number.isSafeInteger(descriptor.size) ||
      (descriptor.size as number) < 0 ||
      (descriptor.artifactType !== undefined && typeof descriptor.artifactType !== "string")
    )
      throw malformed(session, what, "a descriptor without a media type, sha256 digest and size");
    return descriptor as unknown as ReferrerDescriptor;
  });
}

async function viaTag(session: RegistrySession, subject: string): Promise<ReferrerDescriptor[] | null> {
  try {
    const served = await getManifest(session, referrersTag(subject), { accept: [OCI_INDEX] });
    return parseIndex(session, served.bytes, `the referrers tag ${referrersTag(subject)}`);
  } catch (error) {
    if (error instanceof OatsError && error.code === "artifact-not-found") return null;
    throw error;
  }
}

/**
 * The referrers of `subject` (optionally only those of one artifact type),
 * through the referrers API, or the referrers tag where there is none.
 */
export async function listReferrers(
  session: RegistrySession,
  subject: string,
  options: { readonly artifactType?: string } = {},
): Promise<{ descriptors: ReferrerDescriptor[]; via: "api" | "tag" }> {
  if (!DIGEST_PATTERN.test(subject))
    throw new OatsError("invalid-input", "a referrers subject is a sha256 manifest digest", { subject });
  const url = session.url(`referrers/${subject}`);
  if (options.artifactType !== undefined) url.searchParams.set("artifactType", options.artifactType);
  const response = await session.request({ method: "GET", url, headers: { accept: OCI_INDEX } });
  const filter = (descriptors: ReferrerDescriptor[]) =>
    options.artifactType === undefined
      ? descriptors
      : descriptors.filter((descriptor) => descriptor.artifactType === options.artifactType);
  if (response.statusCode === 404) {
    await drain(response);
    return { descriptors: filter((await viaTag(session, subject)) ?? []), via: "tag" };
  }
  const body = await readBody(response, MAX_MANIFEST_BYTES, () =>
    malformed(session, `the referrers of ${subject}`, `larger than ${MAX_MANIFEST_BYTES} bytes`),
  );
  if (response.statusCode !== 200)
    throw session.unexpected(response, `GET of the referrers of ${subject}`, registryErrorCodes(body));
  return { descriptors: filter(parseIndex(session, body, `the referrers of ${subject}`)), via: "api" };
}

/**
 * Put `bytes` (an image manifest whose `subject` is `subject`) by its own
 * digest, and make it listed: by the registry's referrers API when it
 * indexed the subject (`OCI-Subject`), else through the referrers tag.
 * `kept` when the tag's index already named it.
 */
export async function attachReferrer(
  session: RegistrySession,
  bytes: Buffer,
  descriptor: ReferrerDescriptor,
  subject: string,
): Promise<{ digest: string; via: "api" | "tag"; status: "attached" | "kept" }> {
  // Already listed (and so already put): nothing is written.
  const before = await listReferrers(session, subject);
  if (before.descriptors.some((entry) => entry.digest === descriptor.digest))
    return { digest: descriptor.digest, via: before.via, status: "kept" };
  const put = await putManifest(session, descriptor.digest, bytes, descriptor.mediaType);
  if (put.subject === subject) return { digest: put.digest, via: "api", status: "attached" };
  const tag = referrersTag(subject);
  const listed = (await viaTag(session, subject)) ?? [];
  if (listed.some((entry) => entry.digest === descriptor.digest))
    return { digest: put.digest, via: "tag", status: "kept" };
  const index = canonicalJsonBytes({
    schemaVersion: 2,
    mediaType: OCI_INDEX,
    manifests: [...listed, descriptor],
  });
  await putManifest(session, tag, index, OCI_INDEX);
  return { digest: put.digest, via: "tag", status: "attached" };
}
