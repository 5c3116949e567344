/**
 * The package's `oats-retention/fleet` entry: the fleet layer's public names, for a caller that
 * needs nothing beside them. src/fleet/index.ts is the layer's interface to the layers above,
 * which may hold more than the package publishes.
 */
export {
  ERROR_CODES,
  ERROR_KINDS,
  type ErrorCode,
  type ErrorDetails,
  type ErrorKind,
  isOatsError,
  OatsError,
} from "../core/index.js";
export {
  type AttestationListing,
  type AttestationVerdict,
  attestationBytes,
  listAttestations,
  verifyAttestation,
} from "./attestation-check.js";
export {
  ANNOTATION_ATTESTATION,
  type AttachedAttestation,
  attachAttestations,
  fetchAttestations,
  type PulledAttestation,
} from "./attestations.js";
export { captureTag, resolutionTag } from "./mapping.js";
export { pullFromRegistry, type PullOptions, type PullReport } from "./pull.js";
export { pushToRegistry, type PushOptions, type PushReport } from "./push.js";
