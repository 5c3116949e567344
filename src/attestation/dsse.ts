import { type KeyObject, sign, verify } from "node:crypto";
import { OatsError, canonicalJsonBytes, parseJsonText } from "../core/index.js";

/**
 * DSSE (Dead Simple Signing Envelope, v1): the signature covers the
 * pre-authentication encoding of the payload type and the payload, never
 * the JSON around them, so nothing outside the signed bytes can change what
 * they mean.
 *
 *   PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body
 *
 * with LEN the byte length in ASCII decimal. oats writes an envelope as
 * canonical JSON `{payload, payloadType, signatures: [{keyid, sig}]}`
 * (payload and sig standard base64 with padding), one Ed25519 signature,
 * and reads back only exactly that shape.
 */

export const INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json";
/** An attestation is a few KiB; an envelope larger than this is refused before it is parsed. */
export const MAX_ENVELOPE_BYTES = 64 * 1024;

export interface Envelope {
  readonly payload: Buffer;
  readonly payloadType: string;
  readonly signatures: readonly { readonly keyid: string; readonly sig: Buffer }[];
}

export function pae(payloadType: string, payload: Buffer): Buffer {
  const type = Buffer.from(payloadType, "utf8");
  return Buffer.concat([
    Buffer.from(`DSSEv1 ${type.length} `, "ascii"),
    type,
    Buffer.from(` ${payload.length} `, "ascii"),
    payload,
  ]);
}

/** The envelope's bytes as oats stores them (canonical JSON); its oats.bytes.v1 digest is the attestation's id. */
export function encodeEnvelope(envelope: Envelope): Buffer {
  return canonicalJsonBytes({
    payload: envelope.payload.toString("base64"),
    payloadType: envelope.payloadType,
    signatures: envelope.signatures.map((signature) => ({
      keyid: signature.keyid,
      sig: signature.sig.toString("base64"),
    })),
  });
}

/** Sign `payload` (an in-toto statement's canonical bytes) with an Ed25519 key. */
export function signEnvelope(payload: Buffer, key: { privateKey: KeyObject; keyid: string }): Envelope {
  const sig = sign(null, pae(INTOTO_PAYLOAD_TYPE, payload), key.privateKey);
  return { payload, payloadType: INTOTO_PAYLOAD_TYPE, signatures: [{ keyid: key.keyid, sig }] };
}

/** Whether the envelope's one signature verifies over the PAE with `publicKey`. */
export function signatureValid(envelope: Envelope, publicKey: KeyObject): boolean {
  const signature = envelope.signatures[0];
  if (signature === undefined) return false;
  try {
    return verify(null, pae(envelope.payloadType, envelope.payload), publicKey, signature.sig);
  } catch {
    return false;
  }
}

export function attestationRefusal(reason: string, message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("attestation-refused", message, { reason, ...details });
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function base64Field(value: unknown, what: string, origin: string): Buffer {
  if (typeof value !== "string" || !BASE64.test(value))
    throw attestationRefusal("envelope-invalid", `${origin}: ${what} is not standard base64`, { origin });
  return Buffer.from(value, "base64");
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function exactKeys(value: Record<string, unknown>, keys: readonly string[]): boolean {
  const own = Object.keys(value).sort();
  return own.length === keys.length && own.every((key, index) => key === [...keys].sort()[index]);
}

/**
 * An envelope's bytes, read strictly: at most MAX_ENVELOPE_BYTES
 * (`too-large`), canonical JSON of exactly `{payload, payloadType,
 * signatures: [{keyid, sig}]}` with one signature and the in-toto payload
 * type (`envelope-invalid` otherwise). Nothing is verified here.
 */
export function parseEnvelope(bytes: Buffer, origin: string): Envelope {
  if (bytes.length > MAX_ENVELOPE_BYTES)
    throw attestationRefusal(
      "too-large",
      `${origin} is ${bytes.length} bytes; an envelope is limited to ${MAX_ENVELOPE_BYTES}`,
      { origin, size: bytes.length, limit: MAX_ENVELOPE_BYTES },
    );
  const invalid = (why: string) =>
    attestationRefusal("envelope-invalid", `${origin} is not a DSSE envelope oats reads: ${why}`, { origin });
  const value = parseJsonText(bytes.toString("utf8"), 8, () => invalid("not JSON"));
  if (!isRecord(value) || !exactKeys(value, ["payload", "payloadType", "signatures"]))
    throw invalid("expected exactly payload, payloadType and signatures");
  if (value.payloadType !== INTOTO_PAYLOAD_TYPE) throw invalid(`the payload type is not ${INTOTO_PAYLOAD_TYPE}`);
  const signatures = value.signatures;
  if (!Array.isArray(signatures) || signatures.length !== 1) throw invalid("expected exactly one signature");
  const [signature] = signatures as unknown[];
  if (!isRecord(signature) || !exactKeys(signature, ["keyid", "sig"]) || typeof signature.keyid !== "string")
    throw invalid("a signature is {keyid, sig}");
  const envelope: Envelope = {
    payload: base64Field(value.payload, "the payload", origin),
    payloadType: INTOTO_PAYLOAD_TYPE,
    signatures: [{ keyid: signature.keyid, sig: base64Field(signature.sig, "the signature", origin) }],
  };
  if (!encodeEnvelope(envelope).equals(bytes)) throw invalid("not in canonical oats.json.v1 form");
  return envelope;
}
