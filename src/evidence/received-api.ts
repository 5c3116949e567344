import { join } from "node:path";
import { OatsError } from "../core/index.js";
import type { AuditEntry } from "../ledger/index.js";
import { resolveScope } from "../retention/index.js";
import { lazyAnchoredAudit, type AnchoredAudit } from "./anchored-audit.js";
import { parseLog, type LogLine } from "./log-format.js";
import type { ReceivedRunCheck } from "./received-check.js";
import {
  checkReceivedAtRest,
  listReceivedIds,
  readReceivedFile,
  readReceivedFiles,
  receivedFileNames,
  receiptOf,
  receivedDigests,
  receivedOrigin,
  receivedRoot,
} from "./received-store.js";
import { bareRunRef, parseRunRecord, type RunRecord } from "./run-record.js";

/**
 * Reading received runs (`.agents/received-runs/`) for `oats run ls/show/
 * verify` and fsck. A received run is found by its id (or a unique prefix)
 * or by the sending host's handle. Verification re-checks the record digest,
 * the log digest and the delivered audit lines (received-check.ts), and
 * that this scope's audit log (checked against this account's checkpoint)
 * holds the `run-receive` entry `oats pull` wrote for exactly these bytes:
 * the store is in the scope, and a run a writer of the scope put there is
 * not a received run. The sending host's audit chain is not verifiable here.
 */

export interface ReceivedSummary {
  readonly runId: string;
  readonly from: string | null;
  readonly handle: string | null;
  readonly job: string | null;
  readonly result: string | null;
  readonly status: string | null;
  readonly exit: RunRecord["exit"] | null;
  readonly error: string | null;
}

export interface ReceivedRun {
  readonly runId: string;
  readonly from: string | null;
  readonly dir: string;
  readonly record: RunRecord;
  readonly lines: LogLine[];
  readonly footer: string[];
}

export interface ReceivedVerdict {
  readonly runId: string;
  readonly from: string | null;
  readonly handle: string;
  readonly result: string;
  readonly status: "complete" | "failed-evidence";
  readonly checks: {
    readonly record: true;
    readonly log: true;
    readonly audit: {
      readonly start: number;
      readonly end: number;
      readonly lines: number;
      readonly chain: "not-verifiable-here";
      /** The seq of this scope's run-receive entry naming these bytes. */
      readonly received: number;
    };
  };
  readonly record: RunRecord;
}

function recordOf(dir: string, runId: string): RunRecord {
  if (!receivedFileNames(dir).includes("record.json"))
    throw new OatsError("invalid-artifact-store", `received run ${runId} has no record.json`, {
      runId,
      reason: "missing",
    });
  return parseRunRecord(readReceivedFile(dir, "record.json"), `received run ${runId} record.json`).record;
}

function unrecorded(runId: string, why: string): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `received run ${runId} was not brought into this scope by \`oats pull\`: ${why}; a run a writer of the scope ` +
      "put in .agents/received-runs/ is not a received run",
    { runId, reason: "received-unrecorded" },
  );
}

/** This scope's run-receive entry for exactly these bytes; `received-unrecorded` when there is none. */
export function receiptFor(audit: AnchoredAudit, check: ReceivedRunCheck): AuditEntry {
  const entry = receiptOf(audit, check.runId, receivedDigests(check));
  if (entry === null) throw unrecorded(check.runId, "no run-receive entry of the verified audit log names these bytes");
  return entry;
}

/**
 * Every run received into this scope by `oats pull`, each with its record's summary, or with the error that keeps
 * it from being read (a run with no run-receive entry in the audit log is not a received run). Never throws for one
 * bad run.
 */
export function listReceivedRuns(scope: string): ReceivedSummary[] {
  const realScope = resolveScope(scope);
  const audit = lazyAnchoredAudit(realScope);
  return listReceivedIds(realScope).ids.map((runId) => {
    const dir = join(receivedRoot(realScope), runId);
    const from = receivedOrigin(dir);
    try {
      const record = recordOf(dir, runId);
      // The bytes are checked by `oats run verify`; a listing asks only whether `oats pull` brought the run here.
      if (receiptOf(audit(), runId, null) === null)
        throw unrecorded(runId, "no run-receive entry of the verified audit log names it");
      return {
        runId,
        from,
        handle: record.handle,
        job: record.job,
        result: record.result,
        status: record.evidence.status,
        exit: record.exit,
        error: null,
      };
    } catch (error) {
      return {
        runId,
        from,
        handle: null,
        job: null,
        result: null,
        status: null,
        exit: null,
        error: error instanceof Error ? error.message : String(error),
      };
    }
  });
}

/** The received run a ref names, or null when none does (the caller then says run-not-found). */
export function findReceived(realScope: string, ref: string): { runId: string; dir: string } | null {
  const wanted = bareRunRef(String(ref));
  if (wanted.length === 0 || /[/\0]/.test(wanted)) return null;
  const matches = new Set<string>();
  for (const runId of listReceivedIds(realScope).ids) {
    const dir = join(receivedRoot(realScope), runId);
    if (runId === wanted) return { runId, dir };
    if (wanted.startsWith("sha256-") && runId.startsWith(wanted)) matches.add(runId);
    else if (!wanted.startsWith("sha256-")) {
      try {
        if (recordOf(dir, runId).handle.startsWith(wanted)) matches.add(runId);
      } catch {
        // a damaged received run is found by id only; fsck reports it
      }
    }
  }
  if (matches.size > 1)
    throw new OatsError("invalid-input", `${ref} names ${matches.size} received runs; give more of the id`, {
      ref,
      matches: [...matches],
      reason: "ambiguous-run",
    });
  const [runId] = matches;
  return runId === undefined ? null : { runId, dir: join(receivedRoot(realScope), runId) };
}

/**
 * A received run's record and log lines, as {@link findReceived} found it; a run without its record is refused
 * (`invalid-artifact-store`). Reading checks no digest: `verifyReceivedRun` does.
 */
export function readReceivedRun(_realScope: string, found: { runId: string; dir: string }): ReceivedRun {
  const record = recordOf(found.dir, found.runId);
  const log = readReceivedFiles(found.dir).get("log") ?? Buffer.alloc(0);
  const parsed = parseLog(log.toString("utf8"));
  return {
    runId: found.runId,
    from: receivedOrigin(found.dir),
    dir: found.dir,
    record,
    lines: parsed.lines,
    footer: parsed.footer,
  };
}

/**
 * Re-check a received run at rest: record digest = its id, log digest, the
 * delivered audit lines, and this scope's run-receive entry for these bytes
 * (`audit`: the anchored audit log; null skips that check, for fsck when the
 * chain itself cannot be read, which the audit class reports).
 */
export function verifyReceivedRun(found: { runId: string; dir: string }, audit: AnchoredAudit | null): ReceivedVerdict {
  const from = receivedOrigin(found.dir);
  // The log streamed through a bounded buffer: a received run is verified whatever its size.
  const check = checkReceivedAtRest(
    found.dir,
    found.runId,
    `this scope (received from ${from ?? "an unknown far side"})`,
  );
  const receipt = audit === null ? null : receiptFor(audit, check);
  const { record } = check;
  return {
    runId: check.runId,
    from,
    handle: record.handle,
    result: record.result,
    status: record.evidence.status,
    checks: {
      record: true,
      log: true,
      audit: { ...check.audit, lines: check.auditLines, chain: "not-verifiable-here", received: receipt?.seq ?? -1 },
    },
    record,
  };
}
