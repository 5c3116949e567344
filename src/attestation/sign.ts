import { signEnvelope } from "./dsse.js";
import { loadSigningKey } from "./keys.js";
import { type Statement, statementBytes } from "./statement.js";
import { storeAttestation } from "./store.js";

export interface Attested {
  /** The attestation's id: oats.bytes.v1 of the envelope. */
  readonly id: string;
  readonly keyid: string;
  readonly status: "written" | "kept";
  readonly envelope: string;
  readonly bundle: string;
}

/**
 * Sign a statement with the operator's key and store it in the scope (the
 * envelope and its Sigstore bundle); null when this account has no key. A
 * key that exists but is not private is refused (keys.ts).
 */
export function attestStatement(realScope: string, statement: Statement): Attested | null {
  const key = loadSigningKey();
  if (key === null) return null;
  const envelope = signEnvelope(statementBytes(statement), key);
  const stored = storeAttestation(realScope, envelope);
  return { ...stored, keyid: key.keyid };
}
