import { OatsError, canonicalJsonBytes, isOatsError } from "../core/index.js";
import {
  BUNDLE_MEDIA_TYPE,
  bundleOf,
  envelopeFromBundle,
  MAX_BUNDLE_BYTES,
  parseEnvelope,
  parseStatement,
  readTrust,
  type Statement,
  storeAttestation,
  subjectDigests,
  TREE_DIGEST_ALGORITHM,
  verifyEnvelopeBytes,
} from "../attestation/index.js";
import { encodeEnvelope } from "../attestation/index.js";
import { compositionOf, compositionSubject } from "../captures/index.js";
import { readRecordBytes } from "../resolution/index.js";
import {
  attachReferrer,
  bufferSource,
  getBlobBytes,
  getManifest,
  headBlob,
  listReferrers,
  putBlob,
  type RegistrySession,
} from "../oci/index.js";
import { attestationsAbout } from "./attestation-check.js";
import { EMPTY_CONFIG, EMPTY_MEDIA_TYPE, OCI_MANIFEST_MEDIA_TYPE, ociDigest } from "./mapping.js";

/**
 * Signed statements travel with the resolution they are about: each one is
 * an OCI image manifest whose `subject` is the resolution's manifest
 * (docs/design/attestations.md, "In the registry: referrers"), the Sigstore bundle as its one
 * layer, the OCI empty config, `artifactType` the bundle's media type (as
 * cosign stores bundles), annotated with the predicate type and the oats
 * attestation id. Canonical JSON, so the same statement is the same
 * manifest digest everywhere. It is listed through the referrers API where
 * the registry has one and through the referrers tag where it has not.
 *
 * The registry is not trusted for them either: pull checks each referrer's
 * manifest and bundle digests (the client), reads the bundle strictly,
 * requires the statement to name the resolution pulled (a run of it, or an
 * approval of its composition and tree), and checks the signature when the
 * key is trusted here; only then is it stored. Nothing pulled is believed
 * until it is used: `dispatch --approved-by` and `oats attestation verify`
 * check it against this host's trust.
 */

export const ANNOTATION_ATTESTATION = "vnd.oats.attestation";
export const ANNOTATION_PREDICATE_TYPE = "dev.sigstore.bundle.predicateType";
export const ANNOTATION_BUNDLE_CONTENT = "dev.sigstore.bundle.content";
/** A resolution with more attestations than this attached has the rest left in the registry. */
export const MAX_PULLED_ATTESTATIONS = 256;

export interface AttachedAttestation {
  readonly id: string;
  readonly predicateType: string;
  readonly digest: string;
  readonly via: "api" | "tag";
  readonly status: "attached" | "kept";
}

export interface PulledAttestation {
  /** The referrer manifest's digest. */
  readonly digest: string;
  readonly id: string | null;
  readonly predicateType: string | null;
  readonly keyid: string | null;
  readonly status: "written" | "kept" | "refused";
  /** The trust whose key verified the signature here, or null when the key is not trusted here (checked at use). */
  readonly verifiedBy: string | null;
  readonly refusal?: { readonly code: string; readonly reason: string | null; readonly message: string };
}

function referrerManifest(
  bundle: Buffer,
  id: string,
  predicateType: string,
  subject: { digest: string; size: number },
): Buffer {
  return canonicalJsonBytes({
    schemaVersion: 2,
    mediaType: OCI_MANIFEST_MEDIA_TYPE,
    artifactType: BUNDLE_MEDIA_TYPE,
    config: { mediaType: EMPTY_MEDIA_TYPE, digest: ociDigest(EMPTY_CONFIG), size: EMPTY_CONFIG.length },
    layers: [{ mediaType: BUNDLE_MEDIA_TYPE, digest: ociDigest(bundle), size: bundle.length }],
    subject: { mediaType: OCI_MANIFEST_MEDIA_TYPE, digest: subject.digest, size: subject.size },
    annotations: annotations(id, predicateType),
  });
}

function annotations(id: string, predicateType: string): Record<string, string> {
  return {
    [ANNOTATION_BUNDLE_CONTENT]: "dsse-envelope",
    [ANNOTATION_PREDICATE_TYPE]: predicateType,
    [ANNOTATION_ATTESTATION]: id,
  };
}

async function ensureBlob(session: RegistrySession, bytes: Buffer): Promise<void> {
  const digest = ociDigest(bytes);
  const present = await headBlob(session, digest);
  if (present !== null && present.size === bytes.length) return;
  await putBlob(session, bufferSource(bytes, digest));
}

/** Attach every statement of the scope about `resolution` to its manifest `subject`. */
export async function attachAttestations(
  realScope: string,
  session: RegistrySession,
  resolution: string,
  subject: { digest: string; size: number },
): Promise<AttachedAttestation[]> {
  const attached: AttachedAttestation[] = [];
  for (const { id, bytes, predicateType } of attestationsAbout(realScope, resolution)) {
    const bundle = bundleOf(parseEnvelope(bytes, `attestation ${id}`));
    await ensureBlob(session, EMPTY_CONFIG);
    await ensureBlob(session, bundle);
    const manifest = referrerManifest(bundle, id, predicateType, subject);
    const result = await attachReferrer(
      session,
      manifest,
      {
        mediaType: OCI_MANIFEST_MEDIA_TYPE,
        digest: ociDigest(manifest),
        size: manifest.length,
        artifactType: BUNDLE_MEDIA_TYPE,
        annotations: annotations(id, predicateType),
      },
      subject.digest,
    );
    attached.push({ id, predicateType, digest: result.digest, via: result.via, status: result.status });
  }
  return attached;
}

function refusedRow(digest: string, error: unknown, partial: Partial<PulledAttestation> = {}): PulledAttestation {
  return {
    digest,
    id: null,
    predicateType: null,
    keyid: null,
    verifiedBy: null,
    ...partial,
    status: "refused",
    refusal: {
      code: isOatsError(error) ? error.code : "internal-error",
      reason: isOatsError(error) && typeof error.details["reason"] === "string" ? error.details["reason"] : null,
      message: error instanceof Error ? error.message : String(error),
    },
  };
}

/** The statement must be about the resolution pulled: a run of it, or an approval of its composition and tree. */
function checkAbout(id: string, statement: Statement, resolution: string, realScope: string): void {
  const digests = subjectDigests(statement);
  const { record } = readRecordBytes(realScope, resolution);
  if (statement.predicateType === "https://oats.dev/attestation/run/v1") {
    if (digests.resolution !== resolution)
      throw new OatsError(
        "attestation-refused",
        `attestation ${id} is attached to resolution ${resolution} but names ${digests.resolution}`,
        { reason: "subject-mismatch", id, expected: resolution, actual: digests.resolution },
      );
    return;
  }
  const composition = record.capture === null ? null : compositionOf(record);
  const expected =
    composition === null ? null : compositionSubject(composition).integrity.slice("oats.json.v1:".length);
  const tree = statement.subject[1] as { digest: Record<string, string> };
  const treeHex = tree.digest[TREE_DIGEST_ALGORITHM];
  if (
    composition === null ||
    digests.composition !== expected ||
    composition.executable.integrity !== `oats.tree-exec.v1:sha256-${treeHex}`
  )
    throw new OatsError(
      "attestation-refused",
      `attestation ${id} is attached to resolution ${resolution} but approves another composition or tree`,
      { reason: "subject-mismatch", id, expected, actual: digests.composition },
    );
}

/**
 * The statements attached to a pulled resolution's manifest, each checked
 * (see above) and stored in the scope; a referrer that fails a check is
 * reported, not stored, and does not fail the pull: the resolution itself
 * was verified on its own.
 */
export async function fetchAttestations(
  realScope: string,
  session: RegistrySession,
  resolution: string,
  manifestDigest: string,
): Promise<PulledAttestation[]> {
  const { descriptors } = await listReferrers(session, manifestDigest, { artifactType: BUNDLE_MEDIA_TYPE });
  const trust = readTrust(realScope);
  const rows: PulledAttestation[] = [];
  for (const descriptor of descriptors.slice(0, MAX_PULLED_ATTESTATIONS)) {
    try {
      const served = await getManifest(session, descriptor.digest, {
        accept: [OCI_MANIFEST_MEDIA_TYPE],
        maxBytes: 16 * 1024,
      });
      const manifest = JSON.parse(served.bytes.toString("utf8")) as {
        artifactType?: unknown;
        subject?: { digest?: unknown };
        layers?: { mediaType?: unknown; digest?: unknown; size?: unknown }[];
      };
      const layer = manifest.layers?.[0];
      if (
        manifest.artifactType !== BUNDLE_MEDIA_TYPE ||
        manifest.subject?.digest !== manifestDigest ||
        manifest.layers?.length !== 1 ||
        layer?.mediaType !== BUNDLE_MEDIA_TYPE ||
        typeof layer.digest !== "string" ||
        !Number.isSafeInteger(layer.size) ||
        (layer.size as number) > MAX_BUNDLE_BYTES
      )
        throw new OatsError(
          "invalid-artifact",
          `referrer ${descriptor.digest} is not an attestation of ${manifestDigest}: a Sigstore bundle artifact ` +
            `with one bundle layer of at most ${MAX_BUNDLE_BYTES} bytes whose subject is that manifest`,
          { reason: "not-an-attestation", digest: descriptor.digest },
        );
      const bundle = await getBlobBytes(session, layer.digest, {
        size: layer.size as number,
        maxBytes: MAX_BUNDLE_BYTES,
      });
      const { envelope } = envelopeFromBundle(bundle, `referrer ${descriptor.digest}`);
      const statement = parseStatement(envelope.payload, `referrer ${descriptor.digest}`);
      const bytes = encodeEnvelope(envelope);
      const keyid = envelope.signatures[0]!.keyid;
      let verifiedBy: string | null = null;
      if (trust.entries.some((entry) => entry.keyid === keyid)) {
        try {
          verifiedBy = verifyEnvelopeBytes(bytes, trust).trust.name;
        } catch (error) {
          // A trusted key's signature that does not verify is refused; a trust for the other purpose, or one
          // withdrawn for this purpose, is not ours to judge here: the statement is checked when it is used.
          const reason = isOatsError(error) ? error.details["reason"] : null;
          if (reason !== "key-not-trusted" && reason !== "trust-removed") throw error;
        }
      }
      const partial = { id: null, predicateType: statement.predicateType, keyid };
      try {
        checkAbout(descriptor.digest, statement, resolution, realScope);
      } catch (error) {
        rows.push(refusedRow(descriptor.digest, error, partial));
        continue;
      }
      const stored = storeAttestation(realScope, envelope);
      rows.push({ ...partial, digest: descriptor.digest, id: stored.id, status: stored.status, verifiedBy });
    } catch (error) {
      rows.push(refusedRow(descriptor.digest, error));
    }
  }
  return rows;
}
