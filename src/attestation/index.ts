export { BUNDLE_MEDIA_TYPE, bundleOf, envelopeFromBundle, MAX_BUNDLE_BYTES } from "./bundle.js";
export {
  attestationRefusal,
  encodeEnvelope,
  type Envelope,
  INTOTO_PAYLOAD_TYPE,
  MAX_ENVELOPE_BYTES,
  pae,
  parseEnvelope,
  signatureValid,
  signEnvelope,
} from "./dsse.js";
export {
  describePublicKey,
  generateSigningKey,
  keyPath,
  loadSigningKey,
  parsePublicKey,
  type PublicKeyInfo,
  type SigningKey,
} from "./keys.js";
export { type Attested, attestStatement } from "./sign.js";
export {
  APPROVAL_PREDICATE,
  type ApprovalPredicate,
  type ApprovalStatement,
  approvalStatement,
  approvalStatementSchema,
  parseStatement,
  PREDICATE_TYPES,
  type PredicateType,
  RUN_PREDICATE,
  type RunPredicate,
  type RunStatement,
  runStatement,
  runStatementSchema,
  STATEMENT_TYPE,
  type Statement,
  statementBytes,
  subjectDigests,
  TREE_DIGEST_ALGORITHM,
} from "./statement.js";
export {
  ATTESTATION_ID,
  ATTESTATIONS_STORE,
  attestationsRoot,
  bundlePath,
  envelopePath,
  findAttestationId,
  listAttestationIds,
  readAttestation,
  readBundleFile,
  storeAttestation,
} from "./store.js";
export {
  addTrust,
  readTrust,
  type RemovedTrust,
  removeTrust,
  type TrustChange,
  type TrustEntry,
  TRUST_PURPOSES,
  type TrustPurpose,
  type TrustStore,
  trustedKey,
} from "./trust.js";
export { purposeOf, type VerifiedAttestation, verifyEnvelopeBytes, type VerifyOptions } from "./verify.js";
