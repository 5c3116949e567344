export {
  STREAMS,
  RESULTS,
  formatStamp,
  parseStamp,
  formatLogLine,
  formatFooter,
  parseLog,
  footerOffset,
  exitText,
  type Stream,
  type RunResult,
  type LogLine,
  type RunExit,
  type ParsedLog,
} from "./log-format.js";
export { LineCapture, createStampClock, cleanLine, MAX_LINE_CHARS, type StampClock } from "./line-capture.js";
export {
  RUN_FORMAT,
  runRecordSchema,
  sealRecord,
  parseRunRecord,
  type RunRecord,
  type EvidenceSection,
  type DeliverySection,
} from "./run-record.js";
export {
  RUNS_STORE,
  CANCEL_FILE,
  findRun,
  listHandles,
  processStart,
  groupMembers,
  isSameProcess,
} from "./run-store.js";
export { defaultEvidence, type EvidenceFacts, type EvidenceJudge } from "./run-seal.js";
export { runDispatchPlanWithEvidence, type RunWithEvidenceOptions, type RunOutcome } from "./run-exec.js";
export { identityRedactor, type Redactor } from "./run-log.js";
export {
  listRuns,
  readRun,
  verifyRun,
  cancelRun,
  sealInterruptedRun,
  type RunState,
  type RunSummary,
  type ReadRun,
  type RunVerdict,
} from "./run-api.js";
export { RECEIVED_STORE } from "./received-store.js";
export { receiveRun, type ReceiveOptions, type ReceiveReport } from "./received-pull.js";
export { checkReceivedRun, type ReceivedRunCheck } from "./received-check.js";
export {
  listReceivedRuns,
  findReceived,
  readReceivedRun,
  verifyReceivedRun,
  type ReceivedSummary,
  type ReceivedRun,
  type ReceivedVerdict,
} from "./received-api.js";
export { planQueuedRun } from "./posture-check.js";
export {
  type EnqueueResult,
  enqueueSealedRun,
  OUTBOX_STORE,
  outboxEntries,
  type OutboxEntry,
  type OutboxFile,
  outboxWritable,
} from "./outbox.js";
export { checkEvidencePosture, evidenceDestination, type EvidencePostureOptions } from "./posture-check.js";
export { checkReadBack } from "./read-back.js";
export {
  listOutbox,
  type OutboxListing,
  pushEvidence,
  type PushOptions,
  type PushResult,
  readDelivered,
} from "./push.js";
export { listReceivedIds, receivedRoot } from "./received-store.js";
export { stateOf, verifySealedRun } from "./run-api.js";
export { foreignRun, type Foreign, type ForeignReason, type Standing } from "./run-standing.js";
export { lazyAnchoredAudit, readAnchoredAudit, type AnchoredAudit } from "./anchored-audit.js";
export {
  lookupStartRecord,
  START_RECORD_FORMAT,
  startRecordPath,
  type StartLookup,
  type StartRecord,
} from "./start-record.js";
export { checkRunDir, readControl, readRecord, runsRoot, strayNames } from "./run-store.js";
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
export { dirTransport, type DirTransportOptions } from "./transport-dir.js";
