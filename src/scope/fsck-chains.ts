import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import {
  anchoredDecisions,
  checkpointState,
  type LogAnchors,
  mismatchError,
  type SubjectDecisions,
  verifyAudit,
  CHAIN_LOGS,
  verifyChain,
  type ChainLog,
  type ChainVerdict,
} from "../ledger/index.js";
import { findingOf, guarded, type Finding } from "./findings.js";

/**
 * The approvals ledger and the audit log, through their public checks only.
 * First the cross-check (allDecisions): it verifies both chains whole, checks
 * that each log still extends the operator's private checkpoint, and compares
 * every subject's latest decision in both logs. A disagreement is reported
 * under `approvals`, where decisions live. Only when it refuses are the
 * chains verified one by one (verifyChain / verifyAudit), to name the log and
 * the first broken line; the clean path reads each log once. The report
 * also says whether a checkpoint of this account anchored each log's check.
 */

const logName = (log: ChainLog) => [...log.dir, log.file].join("/");

function checkChain(
  scope: string,
  cls: "approvals" | "audit",
  log: ChainLog,
  verify: () => ChainVerdict,
  findings: Finding[],
): { entries: number; intact: boolean } {
  const verdict = guarded(findings, cls, logName(log), verify);
  if (verdict === null) return { entries: 0, intact: false };
  if (verdict.ok) return { entries: verdict.entries, intact: true };
  const { line, seq, reason } = verdict.brokenAt;
  const error = new OatsError(
    "integrity-mismatch",
    `${logName(log)} is broken at line ${line}${seq === null ? "" : ` (seq ${seq})`}: ${reason}`,
    { log: logName(log), brokenAt: verdict.brokenAt },
  );
  findings.push(findingOf(error, cls, logName(log), join(scope, logName(log))));
  return { entries: line - 1, intact: false };
}

/** Lines in a log whose chain was just verified whole: one entry per LF. */
function countEntries(scope: string, log: ChainLog): number {
  let fd: number;
  try {
    fd = openSync(join(scope, ...log.dir, log.file), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return 0;
    throw error;
  }
  try {
    // The chain was just verified through this name; whatever is there now is counted only if it is a file.
    if (!fstatSync(fd).isFile()) return 0;
    const chunk = Buffer.alloc(1 << 20);
    let lines = 0;
    for (let got = readSync(fd, chunk); got > 0; got = readSync(fd, chunk)) {
      for (let at = chunk.indexOf(0x0a); at >= 0 && at < got; at = chunk.indexOf(0x0a, at + 1)) lines += 1;
    }
    return lines;
  } finally {
    closeSync(fd);
  }
}

export function checkChains(
  realScope: string,
  findings: Finding[],
): { approvals: number; audit: number; checkpoint: LogAnchors } {
  let decisions: SubjectDecisions[] | null = null;
  let checkpoint: LogAnchors | null = null;
  let refusal: OatsError | null = null;
  try {
    ({ decisions, checkpoint } = anchoredDecisions(realScope));
  } catch (error) {
    if (!(error instanceof OatsError) || error.kind === "internal") throw error;
    refusal = error;
  }
  if (decisions !== null) {
    for (const { subject, check } of decisions) {
      if (check.state === "mismatch")
        findings.push(
          findingOf(
            mismatchError(subject, check),
            "approvals",
            `${subject.kind} ${subject.key} ${subject.integrity}`,
            null,
          ),
        );
    }
    return {
      approvals: countEntries(realScope, CHAIN_LOGS.approvals),
      audit: countEntries(realScope, CHAIN_LOGS.audit),
      checkpoint: checkpoint!,
    };
  }
  // The cross-check refused: what would have anchored it, read without changing anything.
  checkpoint = {
    approvals: checkpointState(realScope, CHAIN_LOGS.approvals),
    audit: checkpointState(realScope, CHAIN_LOGS.audit),
  };
  const approvals = checkChain(
    realScope,
    "approvals",
    CHAIN_LOGS.approvals,
    () => verifyChain(realScope, CHAIN_LOGS.approvals),
    findings,
  );
  const audit = checkChain(realScope, "audit", CHAIN_LOGS.audit, () => verifyAudit(realScope), findings);
  // Both chains are whole, so the refusal is about their history (a log that no longer extends the checkpoint).
  if (approvals.intact && audit.intact && refusal !== null) {
    const cls = refusal.details["log"] === logName(CHAIN_LOGS.audit) ? "audit" : "approvals";
    findings.push(
      findingOf(
        refusal,
        cls,
        typeof refusal.details["log"] === "string"
          ? (refusal.details["log"] as string)
          : "approvals ledger vs audit log",
        null,
      ),
    );
  }
  return { approvals: approvals.entries, audit: audit.entries, checkpoint };
}
