/**
 * The package's `oats-retention/evidence` entry: the evidence layer's public names, for a caller that
 * needs nothing beside them. src/evidence/index.ts is the layer's interface to the layers above,
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
  exitText,
  type LogLine,
  type ParsedLog,
  parseLog,
  RESULTS,
  type RunExit,
  type RunResult,
  type Stream,
  STREAMS,
} from "./log-format.js";
export {
  type EnqueueResult,
  enqueueSealedRun,
  OUTBOX_STORE,
  outboxEntries,
  type OutboxEntry,
  type OutboxFile,
  outboxWritable,
} from "./outbox.js";
export {
  checkEvidencePosture,
  evidenceDestination,
  type EvidencePostureOptions,
  planQueuedRun,
} from "./posture-check.js";
export { checkReadBack } from "./read-back.js";
export {
  listOutbox,
  type OutboxListing,
  pushEvidence,
  type PushOptions,
  type PushResult,
  readDelivered,
} from "./push.js";
export {
  findReceived,
  listReceivedRuns,
  readReceivedRun,
  type ReceivedRun,
  type ReceivedSummary,
  type ReceivedVerdict,
  verifyReceivedRun,
} from "./received-api.js";
export { checkReceivedRun, type ReceivedRunCheck } from "./received-check.js";
export { RECEIVED_STORE } from "./received-store.js";
export { type ReceiveOptions, type ReceiveReport, receiveRun } from "./received-pull.js";
export {
  cancelRun,
  listRuns,
  readRun,
  type ReadRun,
  type RunSummary,
  type RunVerdict,
  sealInterruptedRun,
  verifyRun,
} from "./run-api.js";
export { runDispatchPlanWithEvidence, type RunOutcome, type RunWithEvidenceOptions } from "./run-exec.js";
export { identityRedactor, type Redactor } from "./run-log.js";
export {
  type DeliverySection,
  type EvidenceSection,
  parseRunRecord,
  RUN_FORMAT,
  type RunRecord,
  runRecordSchema,
} from "./run-record.js";
export { defaultEvidence, type EvidenceFacts, type EvidenceJudge } from "./run-seal.js";
export type { RunState } from "./run-standing.js";
export { CANCEL_FILE, findRun, RUNS_STORE } from "./run-store.js";
export { dirTransport, type DirTransportOptions } from "./transport-dir.js";
export { type EvidenceFile, type FarSideFile, type FarSideRun, READ_BACK_LIMIT } from "./evidence-file.js";
export {
  EVIDENCE_FILES,
  type EvidenceBundle,
  type EvidenceFileName,
  type EvidenceTransport,
  type ProbeResult,
  type TransportContext,
  transportFor,
} from "./transport.js";
