import { canonicalJsonBytes, parseJsonText } from "../core/index.js";
import { attestationRefusal, encodeEnvelope, type Envelope, MAX_ENVELOPE_BYTES, parseEnvelope } from "./dsse.js";

/**
 * The same envelope as a Sigstore bundle (v0.3), the container `cosign
 * verify-blob-attestation --bundle --key` and the Sigstore libraries read:
 * key-based verification material (`publicKey.hint`, the key id), no
 * transparency log entry and no timestamp.
 *
 *   {mediaType: "application/vnd.dev.sigstore.bundle.v0.3+json",
 *    verificationMaterial: {publicKey: {hint}, tlogEntries: []},
 *    dsseEnvelope: {payload, payloadType, signatures: [{keyid, sig}]}}
 *
 * It is written as canonical JSON and is a pure function of the envelope,
 * so a bundle read back is believed only when it re-encodes to itself, and
 * the envelope inside it is the attestation (the same id).
 */

export const BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json";
/** The bundle is the envelope and a few hundred bytes more. */
export const MAX_BUNDLE_BYTES = MAX_ENVELOPE_BYTES + 4096;

/**
 * The Sigstore bundle (v0.3, public-key verification material, no transparency log entry) that carries a signed
 * envelope, as canonical JSON bytes: a pure function of the envelope.
 */
export function bundleOf(envelope: Envelope): Buffer {
  const signature = envelope.signatures[0]!;
  return canonicalJsonBytes({
    mediaType: BUNDLE_MEDIA_TYPE,
    verificationMaterial: { publicKey: { hint: signature.keyid }, tlogEntries: [] },
    dsseEnvelope: JSON.parse(encodeEnvelope(envelope).toString("utf8")),
  });
}

/** The envelope inside a bundle oats wrote (or one byte-identical to it); anything else is refused. */
export function envelopeFromBundle(bytes: Buffer, origin: string): { envelope: Envelope; envelopeBytes: Buffer } {
  if (bytes.length > MAX_BUNDLE_BYTES)
    throw attestationRefusal(
      "too-large",
      `${origin} is ${bytes.length} bytes; a bundle is limited to ${MAX_BUNDLE_BYTES}`,
      { origin, size: bytes.length, limit: MAX_BUNDLE_BYTES },
    );
  const invalid = (why: string) =>
    attestationRefusal("envelope-invalid", `${origin} is not a Sigstore bundle oats reads: ${why}`, { origin });
  const value = parseJsonText(bytes.toString("utf8"), 10, () => invalid("not JSON"));
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw invalid("not a JSON object");
  const record = value as Record<string, unknown>;
  if (record.mediaType !== BUNDLE_MEDIA_TYPE) throw invalid(`the media type is not ${BUNDLE_MEDIA_TYPE}`);
  const inner = record.dsseEnvelope;
  if (typeof inner !== "object" || inner === null) throw invalid("it holds no DSSE envelope");
  const envelopeBytes = canonicalJsonBytes(inner);
  const envelope = parseEnvelope(envelopeBytes, origin);
  if (!bundleOf(envelope).equals(bytes)) throw invalid("it is not exactly the bundle of its envelope");
  return { envelope, envelopeBytes };
}
