export {
  allDecisions,
  anchoredDecisions,
  checkAgainstCheckpoint,
  crossCheck,
  type CrossCheck,
  type CrossCheckReason,
  crossCheckReasonText,
  expectHead,
  latestDecision,
  type LogAnchors,
  type LogHead,
  logHeads,
  mismatchError,
  requireUsableState,
  type SubjectDecisions,
} from "./approval-check.js";
export {
  audit,
  AUDIT_ACTIONS,
  type AuditAction,
  audited,
  type AuditEntry,
  type AuditOutcome,
  type AuditRecord,
  auditRefusal,
  type AuditSubject,
  readAudit,
  verifyAudit,
} from "./audit.js";
export {
  appendEntry,
  type AppendOptions,
  type BrokenLink,
  type BrokenReason,
  entryHash,
  GENESIS_PREV,
  CHAIN_LOGS,
  type ChainEntry,
  type ChainLog,
  type ChainVerdict,
  DEFAULT_CHAIN_LOCK_WAIT_MS,
  readEntries,
  verifyChain,
} from "./chain-log.js";
export { type CheckpointUse, checkpointState } from "./chain-sync.js";
export {
  isPrivateDirectory,
  operatorStateDir,
  scopeStateDir,
  type StateProblem,
  type StateProblemReason,
  stateRoot,
} from "./chain-state.js";
export { privateDir, readPrivateFile, writePrivateFile } from "../retention/index.js";
export {
  assertInitialUserNamespace,
  currentPrincipal,
  type IdMapLine,
  isInitialIdMap,
  parseIdMap,
  PROC_SUPER_MAGIC,
  PROC_USER_INIT_INO,
} from "./principal.js";
