import { OatsError } from "../errors.js";
import { allDecisions, mismatchError } from "../captures/approval-check.js";
import { verifyAudit } from "../captures/audit.js";
import { CHAIN_LOGS, verifyChain, type ChainLog, type ChainVerdict } from "../captures/chain-log.js";
import { findingOf, guarded, type Finding } from "./findings.js";

/**
 * The approvals ledger and the audit log, through their public checks only:
 * each chain whole (verifyChain / verifyAudit: the first broken line), then,
 * when both are intact, the cross-check of the two (allDecisions: every
 * subject's latest decision must be the same in both logs, and each log must
 * still extend the operator's private checkpoint). A disagreement is
 * reported under `approvals`, where decisions live.
 */

function checkChain(scope: string, cls: "approvals" | "audit", log: ChainLog, verify: () => ChainVerdict, findings: Finding[]): { entries: number; intact: boolean } {
  const logName = [...log.dir, log.file].join("/");
  const verdict = guarded(findings, cls, logName, verify);
  if (verdict === null) return { entries: 0, intact: false };
  if (verdict.ok) return { entries: verdict.entries, intact: true };
  const { line, seq, reason } = verdict.brokenAt;
  const error = new OatsError("integrity-mismatch", `${logName} is broken at line ${line}${seq === null ? "" : ` (seq ${seq})`}: ${reason}`, { log: logName, brokenAt: verdict.brokenAt });
  findings.push(findingOf(error, cls, logName, `${scope}/${logName}`));
  return { entries: line - 1, intact: false };
}

export function checkChains(realScope: string, findings: Finding[]): { approvals: number; audit: number } {
  const approvals = checkChain(realScope, "approvals", CHAIN_LOGS.approvals, () => verifyChain(realScope, CHAIN_LOGS.approvals), findings);
  const audit = checkChain(realScope, "audit", CHAIN_LOGS.audit, () => verifyAudit(realScope), findings);
  if (approvals.intact && audit.intact) {
    guarded(findings, "approvals", "approvals ledger vs audit log", () => {
      for (const { subject, check } of allDecisions(realScope)) {
        if (check.state !== "mismatch") continue;
        findings.push(findingOf(mismatchError(subject, check), "approvals", `${subject.kind} ${subject.key} ${subject.integrity}`, null));
      }
    });
  }
  return { approvals: approvals.entries, audit: audit.entries };
}
