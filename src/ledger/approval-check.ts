import { OatsError, isOatsError } from "../core/index.js";
import { CHAIN_LOGS, GENESIS_PREV, logName, type ChainEntry, type ChainLog } from "./chain-line.js";
import { readEntries } from "./chain-log.js";
import { type CheckpointUse, syncLog } from "./chain-sync.js";
import { scopeState } from "./chain-state.js";
import { resolveScope } from "../retention/index.js";
import { decisionKeyOf, ledgerReference, subjectKey, subjectTriple, type SubjectTriple } from "./decision-key.js";

/**
 * The cross-check between the approvals ledger and the audit log. Every
 * decision is written twice: the ledger entry, then an audit entry
 * `{action, subject, outcome: "ok", details: {ledger: {seq, hash}}}` naming
 * it. For one subject, the ledger's latest decision and the audit log's
 * latest decision must be the same decision: same action, same subject, and
 * the audit entry names the ledger entry's seq and hash. Anything else (a
 * ledger line deleted or forged, an audit line dropped or edited, a decision
 * interrupted between its two writes) is a disagreement, and a disagreement
 * is never read as "approved".
 */

export type CrossCheckReason =
  | "no-audit-entry"
  | "no-ledger-entry"
  | "ledger-reference-differs"
  | "action-differs"
  | "subject-differs";

export type CrossCheck =
  | { state: "none" }
  | { state: "agreed"; ledger: ChainEntry; audit: ChainEntry }
  | { state: "mismatch"; reason: CrossCheckReason; ledger: ChainEntry | null; audit: ChainEntry | null };

function sameTriple(a: SubjectTriple | null, b: SubjectTriple | null): boolean {
  return a !== null && b !== null && a.kind === b.kind && a.key === b.key && a.integrity === b.integrity;
}

/** Pure: do the two latest decisions about one subject agree? */
export function crossCheck(ledger: ChainEntry | null, audit: ChainEntry | null): CrossCheck {
  if (ledger === null && audit === null) return { state: "none" };
  if (audit === null) return { state: "mismatch", reason: "no-audit-entry", ledger, audit };
  if (ledger === null) return { state: "mismatch", reason: "no-ledger-entry", ledger, audit };
  if (!sameTriple(subjectTriple(ledger["subject"]), subjectTriple(audit["subject"])))
    return { state: "mismatch", reason: "subject-differs", ledger, audit };
  const reference = ledgerReference(audit);
  if (reference === null || reference.seq !== ledger.seq || reference.hash !== ledger.hash)
    return { state: "mismatch", reason: "ledger-reference-differs", ledger, audit };
  if (ledger["action"] !== audit["action"]) return { state: "mismatch", reason: "action-differs", ledger, audit };
  return { state: "agreed", ledger, audit };
}

const WHY: Record<CrossCheckReason, string> = {
  "no-audit-entry":
    "the ledger's latest decision has no audit entry (a ledger line added " +
    "outside oats, or the audit write failed after the decision)",
  "no-ledger-entry": "the audit log records a decision the ledger no longer holds (a ledger line removed)",
  "ledger-reference-differs":
    "the audit log's latest decision names a different ledger entry (a line " +
    "added, removed or edited in one of the logs)",
  "action-differs": "the two logs disagree on approve or revoke",
  "subject-differs": "the two logs disagree on the subject",
};

function side(entry: ChainEntry | null): Record<string, unknown> | null {
  if (entry === null) return null;
  const reference = ledgerReference(entry);
  return {
    seq: entry.seq,
    hash: entry.hash,
    action: entry["action"] ?? null,
    ...(reference === null ? {} : { ledger: reference }),
  };
}

/** One sentence saying why the approvals ledger and the audit log disagree, for a cross-check reason. */
export function crossCheckReasonText(reason: CrossCheckReason): string {
  return WHY[reason];
}

/** The refusal for a disagreement: `integrity-mismatch` naming both sides. */
export function mismatchError(subject: SubjectTriple, check: Extract<CrossCheck, { state: "mismatch" }>): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `${subject.kind} ${subject.key} at ${subject.integrity}: the approvals ` +
      `ledger and the audit log disagree: ${WHY[check.reason]}`,
    { subject: { ...subject }, crossCheck: check.reason, ledger: side(check.ledger), audit: side(check.audit) },
  );
}

/**
 * The audit log for the cross-check. One that cannot be read at all (not a
 * regular file, unreadable, a symlinked store) is `audit-unavailable`, as it
 * is for the append that would follow: without it no approval can be
 * confirmed. Damage stays `integrity-mismatch`.
 */
function auditSync(scope: string): ReturnType<typeof syncLog> {
  try {
    return syncLog(scope, CHAIN_LOGS.audit);
  } catch (error) {
    if (isOatsError(error) && error.code === "invalid-artifact-store") {
      throw new OatsError(
        "audit-unavailable",
        `cannot confirm an approval against the audit log: ${error.message}`,
        { ...error.details, step: "read" },
        { cause: error },
      );
    }
    throw error;
  }
}

/**
 * The latest decision about exactly `subject`, cross-checked, at a cost that
 * does not grow with history once the operator's checkpoint exists: both logs
 * are synced (chain-sync.ts), the index names one line in each, and both
 * lines are read back and checked before they are compared.
 */
export function latestDecision(scope: string, subject: SubjectTriple): CrossCheck {
  const id = subjectKey(subject);
  const ledgerLog = syncLog(scope, CHAIN_LOGS.approvals);
  const auditLog = auditSync(scope);
  const ledgerAt = ledgerLog.lookup(id);
  const auditAt = auditLog.lookup(id);
  const ledger = ledgerAt === null ? null : ledgerLog.confirm(ledgerAt);
  const audit = auditAt === null ? null : auditLog.confirm(auditAt);
  for (const entry of [ledger, audit]) {
    if (entry !== null && !sameTriple(subjectTriple(entry["subject"]), subject)) {
      throw new OatsError(
        "integrity-mismatch",
        `the operator's index of ${subject.kind} ${subject.key} names seq ${entry.seq}, which is about another subject`,
        { subject: { ...subject }, seq: entry.seq },
      );
    }
  }
  return crossCheck(ledger, audit);
}

/**
 * Refuse to grant anything unless the operator's private state can be trusted (chain-state.ts). Without it a
 * checkpoint cannot anchor the logs: another local user who can rename the state away, or who made the state root
 * first, turns every check into a full verification, and a scope writer who cuts both logs back before a revoke would
 * go unseen. So approve and dispatch (requireApproval) fail closed: `audit-unavailable`, reason `state-unsafe`,
 * naming the directory at fault and the fix. Reading, revoking and auditing go on, unanchored.
 */
export function requireUsableState(scope: string, what: string): void {
  const state = scopeState(resolveScope(scope));
  if (state.usable) return;
  const { problem } = state;
  throw new OatsError(
    "audit-unavailable",
    `${what} is refused: the operator's private state ${state.stateDir} cannot anchor the approvals ledger and the ` +
      `audit log: ${problem.why}. Fix: ${problem.fix}`,
    {
      reason: "state-unsafe",
      stateDir: state.stateDir,
      path: problem.path,
      problem: problem.reason,
      ...(problem.uid === undefined ? {} : { uid: problem.uid }),
      ...(problem.mode === undefined ? {} : { mode: problem.mode }),
      ...(problem.errno === undefined ? {} : { errno: problem.errno }),
      fix: problem.fix,
    },
  );
}

export interface SubjectDecisions {
  subject: SubjectTriple;
  check: CrossCheck;
  /** Ledger seq of the subject's first decision (or its audit seq when the ledger has none), for ordering. */
  first: number;
}

/**
 * Every subject either log has decided on, cross-checked, from a full scan of
 * both (linear; for listings and the refusal path). Both logs are synced
 * first, so a log that no longer extends the operator's checkpoint is refused.
 */
export function allDecisions(scope: string): SubjectDecisions[] {
  return anchoredDecisions(scope).decisions;
}

/** What anchored the check of each log (CheckpointUse). */
export interface LogAnchors {
  readonly approvals: CheckpointUse;
  readonly audit: CheckpointUse;
}

/** allDecisions, and whether a checkpoint of this account anchored each log's check. */
export function anchoredDecisions(scope: string): { decisions: SubjectDecisions[]; checkpoint: LogAnchors } {
  const checkpoint = {
    approvals: syncLog(scope, CHAIN_LOGS.approvals).checkpointUse,
    audit: syncLog(scope, CHAIN_LOGS.audit).checkpointUse,
  };
  const found = new Map<
    string,
    { subject: SubjectTriple; ledger: ChainEntry | null; audit: ChainEntry | null; first: number }
  >();
  const collect = (log: ChainLog, which: "ledger" | "audit") => {
    const keyOf = decisionKeyOf(log)!;
    for (const entry of readEntries(scope, log).entries) {
      const id = keyOf(entry);
      if (id === null) continue;
      const subject = subjectTriple(entry["subject"])!;
      const slot = found.get(id) ?? {
        subject,
        ledger: null,
        audit: null,
        first: which === "ledger" ? entry.seq : Number.MAX_SAFE_INTEGER,
      };
      slot[which] = entry;
      found.set(id, slot);
    }
  };
  collect(CHAIN_LOGS.approvals, "ledger");
  collect(CHAIN_LOGS.audit, "audit");
  const decisions = [...found.values()]
    .map(({ subject, ledger, audit, first }) => ({ subject, check: crossCheck(ledger, audit), first }))
    .sort((a, b) => a.first - b.first);
  return { decisions, checkpoint };
}

export interface LogHead {
  entries: number;
  head: string;
}

/**
 * The log still extends what this operator's oats verified before (its
 * private checkpoint); `integrity-mismatch` with `details.reason` otherwise.
 * Brings the checkpoint up to date as a side effect. `checkpoint` says whether one anchored the check.
 */
export function checkAgainstCheckpoint(
  scope: string,
  log: ChainLog,
): { entries: number; head: string; checkpoint: CheckpointUse } {
  const sync = syncLog(scope, log);
  return { entries: sync.seq, head: sync.head, checkpoint: sync.checkpointUse };
}

/** Both logs' heads, from a full verification of each (and a check against the operator's checkpoint). */
export function logHeads(scope: string): { approvals: LogHead; audit: LogHead } {
  const heads = {} as { approvals: LogHead; audit: LogHead };
  for (const name of ["approvals", "audit"] as const) {
    checkAgainstCheckpoint(scope, CHAIN_LOGS[name]);
    const { entries, head } = readEntries(scope, CHAIN_LOGS[name]);
    heads[name] = { entries: entries.length, head };
  }
  return heads;
}

/**
 * `--expect-head H`: the verified chain must still contain H, so it extends
 * what the operator saw. A truncation below H or a rewrite through H is
 * `integrity-mismatch` naming H.
 */
export function expectHead(scope: string, log: ChainLog, head: string): { entries: number; head: string; at: number } {
  if (!/^sha256-[0-9a-f]{64}$/.test(head))
    throw new OatsError(
      "invalid-input",
      `--expect-head must be a chain hash sha256-<64 hex>, got ${JSON.stringify(head)}`,
      { expectHead: head },
    );
  const { entries, head: current } = readEntries(scope, log);
  // The empty chain's head: every chain extends it.
  if (head === GENESIS_PREV) return { entries: entries.length, head: current, at: 0 };
  const at = entries.findIndex((entry) => entry.hash === head);
  if (at < 0) {
    throw new OatsError(
      "integrity-mismatch",
      `chain log ${logName(log)} no longer extends the expected head ${head}: ` +
        `it was truncated or rewritten (now ${entries.length} entries, head ${current})`,
      {
        log: logName(log),
        expectHead: head,
        entries: entries.length,
        head: current,
      },
    );
  }
  return { entries: entries.length, head: current, at: entries[at]!.seq };
}
