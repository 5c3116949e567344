import { lstatSync } from "node:fs";
import { join } from "node:path";
import { OatsError, canonicalJson, errnoCode } from "../core/index.js";
import type { AuditEntry } from "../ledger/index.js";
import { entryAt, type AnchoredAudit } from "./anchored-audit.js";
import { parseRunRecord, type RunRecord } from "./run-record.js";
import { isRunStartOf } from "./run-standing.js";
import { checkRunDir, readRecord, runsRoot } from "./run-store.js";
import { lookupStartRecord } from "./start-record.js";

/**
 * What may be delivered as a run of this scope (docs/design/evidence.md,
 * "What delivery trusts"). The outbox is in the scope, so an entry's own
 * digests (entry.json) prove nothing against whoever can write the scope:
 * such a writer can rebuild an entry, every digest recomputed. An entry
 * (and a run being queued) is held to what only oats wrote:
 *
 * - record.json hashes to the run id and names the entry's handle;
 * - the log hashes as the record says, with its byte count;
 * - every audit line is, byte for byte, an entry of the operator's audit
 *   chain verified and checked against this account's checkpoint
 *   (anchored-audit.ts), and among them are the run-start and dispatch
 *   entries the record names and a run-end entry naming this run id with the
 *   record's exit and result;
 * - this account's private start record of the run, when it has one, names
 *   the same run-start entry and, once it sealed the run, this run id;
 * - the scope's run directory of that handle, while there is one, is sealed
 *   with exactly these record bytes (the entry is a copy of it; a copy
 *   outlives the run directory, and then the anchored entries vouch for it).
 *
 * Anything else is `integrity-mismatch`, reason `evidence-foreign`, naming
 * the check that failed; nothing is delivered from it.
 */

export interface EvidenceToCheck {
  readonly handle: string;
  readonly runId: string;
  readonly recordBytes: Buffer | undefined;
  /** The log's digest and size as read (null: the log was not given). */
  readonly log: { readonly digest: string; readonly bytes: number } | null;
  readonly auditBytes: Buffer | undefined;
}

function foreignEvidence(
  where: string,
  evidence: EvidenceToCheck,
  check: string,
  why: string,
  details: Record<string, unknown> = {},
): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `${where} (run ${evidence.runId}, handle ${evidence.handle}) is not a sealed run of this scope: ${why}`,
    { runId: evidence.runId, handle: evidence.handle, reason: "evidence-foreign", check, ...details },
  );
}

/** The audit lines as entries of the anchored chain; each must be exactly the chain's line at its seq. */
function anchoredLines(
  audit: AnchoredAudit,
  bytes: Buffer,
  refuse: (check: string, why: string) => OatsError,
): AuditEntry[] {
  const text = bytes.toString("utf8");
  if (text.length === 0 || !text.endsWith("\n")) throw refuse("audit", "its audit lines are empty or unterminated");
  return text
    .slice(0, -1)
    .split("\n")
    .map((row, index) => {
      let seq: unknown;
      try {
        seq = (JSON.parse(row) as { seq?: unknown }).seq;
      } catch {
        throw refuse("audit", `audit line ${index + 1} is not JSON`);
      }
      const entry = typeof seq === "number" ? audit.bySeq(seq) : undefined;
      if (entry === undefined || canonicalJson(entry) !== `${row}\n`)
        throw refuse(
          "audit",
          `audit line ${index + 1} (seq ${String(seq)}) is not that entry of the verified audit log`,
        );
      return entry;
    });
}

/** Hold evidence to the scope's anchored audit log, the private start record and the run directory; its record. */
export function checkDeliverable(
  realScope: string,
  audit: AnchoredAudit,
  evidence: EvidenceToCheck,
  where: string,
  options: { readonly runDirectory: boolean },
): RunRecord {
  const refuse = (check: string, why: string, details: Record<string, unknown> = {}) =>
    foreignEvidence(where, evidence, check, why, details);
  if (evidence.recordBytes === undefined || evidence.auditBytes === undefined)
    throw refuse("files", "it lacks record.json or audit.jsonl");
  let parsed: { record: RunRecord; id: string };
  try {
    parsed = parseRunRecord(evidence.recordBytes, `${where} record.json`);
  } catch (error) {
    throw refuse("record", `its record.json is not a sealed run record (${(error as Error).message})`);
  }
  const { record, id } = parsed;
  if (id !== evidence.runId) throw refuse("record", `its record.json hashes to ${id}`);
  if (record.handle !== evidence.handle) throw refuse("record", `its record names handle ${record.handle}`);
  if (evidence.log !== null && (evidence.log.digest !== record.log.digest || evidence.log.bytes !== record.log.bytes))
    throw refuse(
      "log",
      `its log hashes to ${evidence.log.digest} (${evidence.log.bytes} bytes), the record says ` +
        `${record.log.digest} (${record.log.bytes} bytes)`,
    );
  const lines = anchoredLines(audit, evidence.auditBytes, refuse);
  const has = (entry: AuditEntry | null): entry is AuditEntry =>
    entry !== null && lines.some((line) => line.seq === entry.seq);
  const start = entryAt(audit, record.startAudit);
  if (!has(start) || !isRunStartOf(start, record.handle, record))
    throw refuse("audit", `the verified audit log holds no run-start entry seq ${record.startAudit.seq} of this run`);
  const dispatch = entryAt(audit, record.dispatchAudit);
  if (!has(dispatch) || dispatch.action !== "dispatch" || dispatch.subject?.["job"] !== record.job)
    throw refuse("audit", `the verified audit log holds no dispatch entry seq ${record.dispatchAudit.seq} of this run`);
  const end = lines.find((line) => {
    const exit = line.details["exit"] as { code?: unknown; signal?: unknown } | undefined;
    return (
      line.action === "run-end" &&
      line.outcome === "ok" &&
      line.subject?.["handle"] === record.handle &&
      line.details["runId"] === id &&
      line.details["result"] === record.result &&
      exit?.code === record.exit.code &&
      exit?.signal === record.exit.signal
    );
  });
  if (end === undefined)
    throw refuse("audit", "the verified audit log holds no run-end entry naming this run id with its exit and result");
  const ours = lookupStartRecord(realScope, record.handle);
  if (ours.kind === "found") {
    const { startAudit, sealed } = ours.record;
    if (startAudit !== null && (startAudit.seq !== record.startAudit.seq || startAudit.hash !== record.startAudit.hash))
      throw refuse(
        "start-record",
        `this account started handle ${record.handle} under run-start seq ${startAudit.seq}`,
      );
    if (sealed !== null && sealed.runId !== id)
      throw refuse("start-record", `this account sealed handle ${record.handle} as run ${sealed.runId}`, {
        sealedAs: sealed.runId,
      });
  }
  if (options.runDirectory) checkRunDirectory(realScope, record.handle, evidence.recordBytes, refuse);
  return record;
}

/** While the scope has a run directory of this handle, it is sealed with exactly these record bytes. */
function checkRunDirectory(
  realScope: string,
  handle: string,
  recordBytes: Buffer,
  refuse: (check: string, why: string, details?: Record<string, unknown>) => OatsError,
): void {
  const dir = join(runsRoot(realScope), handle);
  try {
    lstatSync(dir);
  } catch (error) {
    if (errnoCode(error) === "ENOENT" || errnoCode(error) === "ENOTDIR") return;
    throw error;
  }
  let sealed: ReturnType<typeof readRecord>;
  try {
    checkRunDir(dir);
    sealed = readRecord(dir);
  } catch (error) {
    throw refuse("run-dir", `the scope's run ${handle} cannot be read (${(error as Error).message})`);
  }
  if (sealed === null) throw refuse("run-dir", `the scope's run ${handle} is not sealed`);
  if (!sealed.bytes.equals(recordBytes))
    throw refuse("run-dir", `the scope's run ${handle} is sealed as ${sealed.id}`, { sealedAs: sealed.id });
}
