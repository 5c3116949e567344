/**
 * The package's `oats-retention/captures` entry: the captures layer's public names, for a caller that
 * needs nothing beside them. src/captures/index.ts is the layer's interface to the layers above,
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
export type { ApprovalAttestation } from "./approval-attest.js";
export {
  approvalsReport,
  type ApprovalAction,
  type ApprovalEntry,
  type ApprovalListing,
  type ApprovalState,
  approvalState,
  type ApprovalSubject,
  type ApprovalSubjectInput,
  approve,
  type DecisionOptions,
  latestApprovedFor,
  listApprovals,
  parseApprovalSubject,
  requireApproval,
  revoke,
} from "./approvals.js";
export {
  type ClassificationConfig,
  classificationConfigOrigin,
  type ClassificationDefault,
  classificationGate,
  type ClassificationMatch,
  type ClassificationTarget,
  configSchema,
  DEFAULT_FALLBACK,
  type DerivedLevel,
  deriveLevel,
  effectiveClassification,
  type EffectiveClassification,
  isLevel,
  type Level,
  LEVELS,
  MAX_CLASSIFICATION_CONFIG_BYTES,
  parseClassificationConfig,
  PRINCIPAL_KINDS,
  type PrincipalKind,
  readClassificationConfigBytes,
  readClassificationConfigFile,
  stricter,
  strictest,
} from "./classification.js";
export {
  type CaptureComposition,
  COMPOSITION_FORMAT,
  COMPOSITION_KIND,
  compositionChanges,
  compositionOf,
  compositionSubject,
  type CompositionSubject,
  compositionSummary,
  parseComposition,
} from "./composition.js";
export { approvalTarget, type ApprovalTarget, checkApprovalTarget, checkRevokeTarget } from "./decision-target.js";
export { discardDispatchPlan, runDispatchPlan } from "./dispatch-run.js";
export { type DispatchOptions, type DispatchPlan, resolveQueuedCapture } from "./dispatch.js";
export {
  isLoaderEnvName,
  LOADER_VARIABLES,
  type LoaderValueKind,
  type LoaderVariable,
  loaderVariable,
} from "./loader-env.js";
export {
  type DeliveryPosture,
  evidencePosture,
  type EvidencePostureResult,
  type FarSide,
  type Posture,
  type PostureInput,
} from "./posture.js";
export {
  captureSubject,
  prepareCapture,
  type PrepareCaptureOptions,
  type PrepareCaptureResult,
} from "./prepare-capture.js";
export {
  addJob,
  type AddJobOptions,
  type AddJobRequest,
  listJobs,
  type QueuedJob,
  readJob,
  RECURRENCE_POLICIES,
  type RecurrencePolicy,
} from "./queue.js";
export { requireSignedApproval, type SignedApproval } from "./signed-approval.js";
export {
  type CaptureProfile,
  type CaptureSpec,
  type CaptureSpecInput,
  evidencePolicy,
  type LoadedCaptureSpec,
  MAX_PROFILE_BYTES,
  MAX_SPEC_BYTES,
  parseCaptureProfileBytes,
  parseCaptureSpec,
  type ProfileEvidencePolicy,
  profileSchema,
  readCaptureProfileFile,
  readCaptureSpecFile,
  specSchema,
} from "./spec.js";
