import { join } from "node:path";
import { OatsError } from "../core/index.js";
import { readAudit, type AuditEntry } from "../ledger/index.js";
import {
  foreignRun,
  lazyAnchoredAudit,
  stateOf,
  verifySealedRun,
  RUNS_STORE,
  listHandles,
  runsRoot,
  strayNames,
  listReceivedIds,
  receivedRoot,
  verifyReceivedRun,
} from "../evidence/index.js";
import { findingOf, guarded, notice, type Finding } from "./findings.js";
import type { RecordsPresent } from "./fsck-stores.js";

/**
 * Run evidence (`.agents/runs/`): every sealed run is verified as `oats run
 * verify` does (record digest, log digest, audit cross-reference, the audit
 * log read once for all runs); an unsealed run whose dispatcher is gone is
 * reported (a notice naming `oats run seal`); a foreign open run (one this
 * account's oats did not record starting: run-standing.ts) is a finding when
 * its directory contradicts the audit log or the start record, a notice
 * otherwise; a running run is left alone;
 * anything else in the store is a notice. Received runs
 * (`.agents/received-runs/`) are re-checked against their delivered audit
 * lines and this scope's run-receive entry (received-api.ts); a damaged or
 * unrecorded one is a finding. Every run, sealed or not, must name a resolution
 * the scope holds: a run is a gc root for the record it ran, so a run whose
 * record is gone lost it some other way (`resolution-not-found`, a missing
 * finding). Nothing is written to the scope.
 */
export function checkRuns(realScope: string, records: RecordsPresent, findings: Finding[]): number {
  let checked = 0;
  guarded(findings, "runs", RUNS_STORE.join("/"), () => {
    const handles = listHandles(realScope);
    for (const name of strayNames(realScope))
      findings.push(notice("runs", join(runsRoot(realScope), name), "not a run directory; left alone"));
    if (handles.length === 0) return;
    let entries: AuditEntry[] | null;
    try {
      entries = readAudit(realScope).entries;
    } catch {
      entries = null; // a broken audit chain is the audit class's finding; runs are still checked without it
    }
    const audit = lazyAnchoredAudit(realScope);
    for (const handle of handles) {
      checked += 1;
      const dir = join(runsRoot(realScope), handle);
      guarded(findings, "runs", handle, () => {
        const { state, start, foreign, control, sealed } = stateOf(realScope, handle, dir, audit);
        const resolution = sealed?.record.resolution ?? control!.base.resolution;
        if (!records.has(resolution)) {
          const missing = new OatsError(
            "resolution-not-found",
            `${state === "sealed" ? "sealed" : "open"} run ${handle} ran resolution ${resolution}, ` +
              "which this scope does not hold",
            { handle, resolution, path: dir },
          );
          findings.push(findingOf(missing, "runs", handle, dir));
        }
        if (state === "sealed") verifySealedRun(realScope, handle, dir, entries);
        else if (state === "unsealed") {
          findings.push({
            ...notice(
              "runs",
              dir,
              `an unsealed run whose dispatcher (pid ${start!.dispatcher.pid}) is ` +
                `gone; \`oats run seal ${handle}\` closes it as INTERRUPTED, keeping its lines`,
            ),
            subject: handle,
            details: { handle, reason: "run-unsealed" },
          });
        } else if (state === "foreign") {
          // A directory that claims what the anchored log or the dispatcher's record contradicts is a finding;
          // a run of another account, or one this account has lost its record of, is a notice.
          if (foreign!.reason === "run-start-mismatch" || foreign!.reason === "run-dir-differs")
            throw foreignRun(handle, "seal or cancel", foreign!);
          findings.push({
            ...notice("runs", dir, `a foreign open run: ${foreign!.message}; oats will not seal or cancel it`),
            subject: handle,
            details: { handle, reason: "run-foreign", foreign: foreign!.reason },
          });
        }
      });
    }
  });
  guarded(findings, "runs", "received-runs", () => {
    const { ids, strays } = listReceivedIds(realScope);
    const anchored = lazyAnchoredAudit(realScope);
    // A chain that cannot be read is the audit class's finding; received runs are still checked without it.
    const receivedAudit = () => {
      try {
        return anchored();
      } catch {
        return null;
      }
    };
    for (const name of strays)
      findings.push(notice("runs", join(receivedRoot(realScope), name), "not a received run directory; left alone"));
    for (const runId of ids) {
      checked += 1;
      guarded(
        findings,
        "runs",
        runId,
        () => void verifyReceivedRun({ runId, dir: join(receivedRoot(realScope), runId) }, receivedAudit()),
      );
    }
  });
  return checked;
}
