export { pushToRegistry, type PushOptions, type PushReport } from "./push.js";
export { pullFromRegistry, type PullOptions, type PullReport } from "./pull.js";
export * from "./mapping.js";
export {
  ANNOTATION_ATTESTATION,
  type AttachedAttestation,
  attachAttestations,
  fetchAttestations,
  type PulledAttestation,
} from "./attestations.js";
export {
  type AttestationListing,
  type AttestationVerdict,
  attestationBytes,
  listAttestations,
  verifyAttestation,
} from "./attestation-check.js";
