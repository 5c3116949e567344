export { STREAMS, RESULTS, formatStamp, parseStamp, formatLogLine, formatFooter, parseLog, exitText, type Stream, type RunResult, type LogLine, type RunExit, type ParsedLog } from "./log-format.js";
export { LineCapture, createStampClock, cleanLine, MAX_LINE_CHARS, type StampClock } from "./line-capture.js";
export { RUN_FORMAT, runRecordSchema, sealRecord, parseRunRecord, type RunRecord, type EvidenceSection, type DeliverySection } from "./run-record.js";
export { RUNS_STORE, findRun, listHandles, processStart, groupMembers, isSameProcess } from "./run-store.js";
export { defaultEvidence, type EvidenceFacts, type EvidenceJudge } from "./run-seal.js";
export { runDispatchPlanWithEvidence, identityRedactor, CANCEL_FILE, type Redactor, type RunWithEvidenceOptions, type RunOutcome } from "./run-exec.js";
export { listRuns, readRun, verifyRun, cancelRun, sealInterruptedRun, type RunState, type RunSummary, type ReadRun, type RunVerdict } from "./run-api.js";
