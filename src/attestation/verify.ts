import { bytesDigest } from "../core/index.js";
import { attestationRefusal, type Envelope, MAX_ENVELOPE_BYTES, parseEnvelope, signatureValid } from "./dsse.js";
import { APPROVAL_PREDICATE, parseStatement, type PredicateType, type Statement } from "./statement.js";
import { type TrustEntry, type TrustPurpose, type TrustStore, trustedKey } from "./trust.js";

/**
 * Whether an envelope is believed, in this order, each step a typed refusal
 * (`attestation-refused`, `details.reason`):
 *
 * 1. size (`too-large`) and form (`envelope-invalid`), before anything is parsed further;
 * 2. the key: the trust entry named by the caller (`trust-unknown`,
 *    `trust-removed` when it was withdrawn) whose key id must be the
 *    envelope's (`key-not-trusted`), or else any entry with that key id
 *    (`key-not-trusted`; `trust-removed` when only a withdrawn entry has it);
 * 3. the signature over the PAE with that key (`signature-invalid`): a
 *    changed byte of the payload or of the signature ends here, before the
 *    payload is parsed;
 * 4. the statement: canonical in-toto Statement v1 of one of oats' predicate
 *    types (`predicate-type`; `statement-invalid` for the schema), and the
 *    entry trusted for that kind of statement (`key-not-trusted`; `trust-removed`
 *    when the key's trust for that kind was withdrawn and it stays trusted
 *    only for the other).
 *
 * Subjects are the caller's to check against what it holds: what a digest
 * must be depends on what the statement is used for.
 */

export interface VerifiedAttestation {
  /** oats.bytes.v1 of the envelope's bytes. */
  readonly id: string;
  readonly envelope: Envelope;
  readonly statement: Statement;
  readonly keyid: string;
  readonly trust: TrustEntry;
}

export function purposeOf(predicateType: PredicateType): TrustPurpose {
  return predicateType === APPROVAL_PREDICATE ? "approvals" : "runs";
}

export interface VerifyOptions {
  /** The trust entry the caller names (`dispatch --approved-by`); otherwise any entry with the envelope's key id. */
  readonly trustName?: string;
  /** The predicate type the caller needs. */
  readonly predicateType?: PredicateType;
  readonly origin?: string;
}

/**
 * Verify a DSSE envelope's bytes against the scope's trust: its signature with the key a trust entry holds (the
 * one `options.trustName` names, or any with the envelope's key id), and its statement's predicate type. Every
 * refusal is `attestation-refused` with a reason (`too-large`, `envelope-invalid`, `signature-invalid`, a key not
 * trusted, ...).
 * @returns the attestation: its id (the bytes' digest), envelope, statement, key id and the trust entry that
 *   verified it
 */
export function verifyEnvelopeBytes(
  bytes: Buffer,
  trust: TrustStore,
  options: VerifyOptions = {},
): VerifiedAttestation {
  const id = bytesDigest(bytes);
  const origin = options.origin ?? `attestation ${id}`;
  if (bytes.length > MAX_ENVELOPE_BYTES)
    throw attestationRefusal("too-large", `${origin} is ${bytes.length} bytes; the limit is ${MAX_ENVELOPE_BYTES}`, {
      id,
      size: bytes.length,
      limit: MAX_ENVELOPE_BYTES,
    });
  const envelope = parseEnvelope(bytes, origin);
  const keyid = envelope.signatures[0]!.keyid;
  const candidates = keyCandidates(trust, keyid, options.trustName, origin, id);
  const key = trustedKey(candidates[0]!);
  if (!signatureValid(envelope, key.publicKey))
    throw attestationRefusal(
      "signature-invalid",
      `${origin}: the signature does not verify with the key ${keyid} (${candidates[0]!.name}): the envelope was ` +
        "changed after it was signed, or another key signed it",
      { id, keyid, trust: candidates[0]!.name },
    );
  const statement = parseStatement(envelope.payload, origin, options.predicateType);
  const purpose = purposeOf(statement.predicateType);
  const entry = candidates.find((candidate) => candidate.purpose === purpose);
  if (entry === undefined) {
    const withdrawn = [...trust.removed]
      .reverse()
      .find((removed) => removed.keyid === keyid && removed.purpose === purpose);
    if (withdrawn !== undefined && options.trustName === undefined)
      throw attestationRefusal(
        "trust-removed",
        `${origin} is a statement about ${purpose} signed by ${keyid}, whose trust for ${purpose} ` +
          `(${withdrawn.name}) was removed by ${withdrawn.removedBy} at ${withdrawn.removedAt}`,
        { id, keyid, trust: withdrawn.name, removedAt: withdrawn.removedAt },
      );
    throw attestationRefusal(
      "key-not-trusted",
      `${origin} is a statement about ${purpose}, but the key ${keyid} is trusted here only for ` +
        `${candidates.map((candidate) => `${candidate.purpose} (${candidate.name})`).join(", ")}`,
      {
        id,
        keyid,
        purpose,
        trusted: candidates.map((candidate) => ({ name: candidate.name, purpose: candidate.purpose })),
      },
    );
  }
  return { id, envelope, statement, keyid, trust: entry };
}

function keyCandidates(
  trust: TrustStore,
  keyid: string,
  trustName: string | undefined,
  origin: string,
  id: string,
): TrustEntry[] {
  if (trustName !== undefined) {
    const named = trust.entries.find((entry) => entry.name === trustName);
    if (named === undefined) {
      const removed = [...trust.removed].reverse().find((entry) => entry.name === trustName);
      if (removed !== undefined)
        throw attestationRefusal(
          "trust-removed",
          `the trust ${trustName} was removed by ${removed.removedBy} at ${removed.removedAt}: nothing its key ` +
            "signed is believed here any more",
          { id, trust: trustName, keyid: removed.keyid, removedAt: removed.removedAt },
        );
      throw attestationRefusal("trust-unknown", `no trust is named ${trustName} in this scope (\`oats trust ls\`)`, {
        id,
        trust: trustName,
      });
    }
    if (named.keyid !== keyid)
      throw attestationRefusal(
        "key-not-trusted",
        `${origin} is signed by ${keyid}, not by the key of ${trustName} (${named.keyid})`,
        { id, keyid, trust: trustName, expected: named.keyid },
      );
    return trust.entries.filter((entry) => entry.keyid === keyid && entry.name === trustName);
  }
  const matching = trust.entries.filter((entry) => entry.keyid === keyid);
  if (matching.length > 0) return matching;
  const removed = [...trust.removed].reverse().find((entry) => entry.keyid === keyid);
  if (removed !== undefined)
    throw attestationRefusal(
      "trust-removed",
      `${origin} is signed by ${keyid}, whose trust (${removed.name}) was removed by ${removed.removedBy} at ` +
        `${removed.removedAt}`,
      { id, keyid, trust: removed.name, removedAt: removed.removedAt },
    );
  throw attestationRefusal("key-not-trusted", `${origin} is signed by ${keyid}, a key this scope does not trust`, {
    id,
    keyid,
  });
}
