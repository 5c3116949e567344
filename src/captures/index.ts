export * from "./classification.js";
export * from "./approvals.js";
export * from "./spec.js";
export * from "./composition.js";
export * from "./loader-env.js";
export { checkLoaderEnvironment, type LoaderRefusalReason } from "./loader-paths.js";
export * from "./queue.js";
export * from "./prepare-capture.js";
export * from "./dispatch.js";
export * from "./decision-target.js";
export { EVIDENCE_CLASSES, type EvidenceClass, evidenceFromFacts, isEvidenceClass } from "./evidence-classes.js";
export {
  type DeliveryPosture,
  evidencePosture,
  type EvidencePostureResult,
  type FarSide,
  type Posture,
  type PostureInput,
} from "./posture.js";
export { privilegeGate } from "./privilege.js";
export { createRedactor, redactionRules, type Redactor } from "./redact.js";
export type { MaskingStream } from "./redact-stream.js";
export { checkRunRootAncestors } from "./run-copy.js";
export { requireSignedApproval, type SignedApproval } from "./signed-approval.js";
export { type ApprovalAttestation, attestApproval } from "./approval-attest.js";
