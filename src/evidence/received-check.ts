import { OatsError, bytesDigester, canonicalJson } from "../core/index.js";
import { LogChecker, type CheckedLog } from "./log-format.js";
import { parseRunRecord, type RunRecord } from "./run-record.js";
import { runHex, runIdFromHex } from "./run-id.js";

/**
 * The pure check of a run brought from a far side (`oats pull --run`), and
 * of a received run at rest (`oats run verify`, fsck): exactly the three
 * evidence files; record.json canonical, a valid `oats.run.v1` record and
 * hashing to the run id; the log hashing to the record's log digest with
 * its byte count, line count, exit and result; the audit lines canonical
 * JSON entries that include the run-start and dispatch entries the record
 * names (seq and hash) and a run-end entry naming this run id with its
 * result and exit.
 *
 * What cannot be checked here: the sending host's audit chain. The lines
 * carry their own hashes, but the entries between them (and the chain's
 * anchor) stay on the sending host, so a receiving host can only say the
 * delivered lines are well-formed and name this run, not that the sending
 * host's log holds them.
 */

export const RECEIVED_FILES = ["audit.jsonl", "log", "record.json"] as const;
const AUDIT_LIMIT_LINES = 4096;

/** Everything of a received run but its log, checked: what the log is then held to. */
export interface ReceivedHead {
  readonly runId: string;
  readonly from: string;
  readonly record: RunRecord;
  readonly recordBytes: Buffer;
  readonly auditBytes: Buffer;
  readonly auditLines: number;
  readonly audit: { readonly start: number; readonly end: number };
}

export interface ReceivedRunCheck extends ReceivedHead {
  /** The log's oats.bytes.v1 digest and size, as read (and as the record seals them). */
  readonly log: { readonly digest: string; readonly bytes: number };
}

interface AuditLine {
  seq: number;
  hash: string;
  action: string;
  subject?: Record<string, unknown> | null;
  details?: Record<string, unknown>;
}

function refused(
  runId: string,
  from: string,
  check: string,
  message: string,
  code: "integrity-mismatch" | "invalid-artifact" = "integrity-mismatch",
  details: Record<string, unknown> = {},
): OatsError {
  return new OatsError(code, `run ${runId} from ${from}: ${message}`, {
    runId,
    from,
    check,
    reason: `run-${check}-mismatch`,
    ...details,
  });
}

function parseAuditLines(bytes: Buffer, runId: string, from: string): AuditLine[] {
  const text = bytes.toString("utf8");
  if (text.length === 0 || !text.endsWith("\n"))
    throw refused(runId, from, "audit", "audit.jsonl is empty or does not end in a newline");
  const rows = text.slice(0, -1).split("\n");
  if (rows.length > AUDIT_LIMIT_LINES)
    throw refused(runId, from, "audit", `audit.jsonl has more than ${AUDIT_LIMIT_LINES} lines`);
  let last = -1;
  return rows.map((row, index) => {
    let value: unknown;
    try {
      value = JSON.parse(row);
    } catch {
      throw refused(runId, from, "audit", `audit line ${index + 1} is not JSON`);
    }
    const entry = value as Partial<AuditLine>;
    if (
      value === null ||
      typeof value !== "object" ||
      Array.isArray(value) ||
      !Number.isSafeInteger(entry.seq) ||
      typeof entry.hash !== "string" ||
      typeof entry.action !== "string"
    ) {
      throw refused(runId, from, "audit", `audit line ${index + 1} is not an audit entry (seq, hash, action)`);
    }
    // Lines are canonical JSON in seq order, exactly as the sending host's outbox wrote them.
    if (`${row}\n` !== canonicalJson(value))
      throw refused(runId, from, "audit", `audit line ${index + 1} is not canonical oats.json.v1`);
    if (entry.seq! <= last) throw refused(runId, from, "audit", `audit line ${index + 1} is out of seq order`);
    last = entry.seq!;
    return entry as AuditLine;
  });
}

/** The file names a far side holds for a run must be exactly the evidence files. */
export function checkReceivedNames(runId: string, names: readonly string[], from: string): void {
  const id = runIdFromHex(runHex(runId));
  const sorted = [...names].sort();
  if (sorted.length !== RECEIVED_FILES.length || sorted.some((name, index) => name !== RECEIVED_FILES[index])) {
    throw refused(
      id,
      from,
      "files",
      `the far side holds ${JSON.stringify(sorted)}, not exactly ${JSON.stringify(RECEIVED_FILES)}`,
      "invalid-artifact",
      { files: sorted.slice(0, 16) },
    );
  }
}

/** Check a received run's files against its id; a typed refusal names the first check that failed. */
export function checkReceivedRun(runId: string, files: ReadonlyMap<string, Buffer>, from: string): ReceivedRunCheck {
  checkReceivedNames(runId, [...files.keys()], from);
  const head = checkReceivedHead(runId, files.get("record.json")!, files.get("audit.jsonl")!, from);
  const log = receivedLogChecker(head);
  log.update(files.get("log")!);
  return log.finish();
}

/**
 * The log of a received run checked as it streams: `update` with every
 * piece, then `finish`, which holds the digest and size to the record
 * (integrity-mismatch) and then the lines and footer (parseLog's checks).
 */
export function receivedLogChecker(head: ReceivedHead): {
  update(piece: Buffer): void;
  /** `streamed`: how many bytes the source gave, when it gave more than were handed to `update`. */
  finish(streamed?: number): ReceivedRunCheck;
} {
  const digester = bytesDigester();
  const lines = new LogChecker();
  let bytes = 0;
  return {
    update(piece) {
      digester.update(piece);
      bytes += piece.length;
      lines.update(piece);
    },
    finish(streamed = bytes) {
      const digest = digester.digest();
      checkReceivedLog(head, { digest, bytes: Math.max(bytes, streamed) }, () => lines.result());
      return { ...head, log: { digest, bytes } };
    },
  };
}

function checkReceivedLog(
  head: ReceivedHead,
  log: { readonly digest: string; readonly bytes: number },
  parsed: () => CheckedLog,
): void {
  const { runId: id, from, record } = head;
  if (log.digest !== record.log.digest || log.bytes !== record.log.bytes) {
    throw refused(
      id,
      from,
      "log",
      `the log hashes to ${log.digest} (${log.bytes} bytes), the record ` +
        `says ${record.log.digest} (${record.log.bytes} bytes)`,
      "integrity-mismatch",
      { expected: record.log.digest, actual: log.digest },
    );
  }
  const checked = parsed();
  if (
    checked.lines !== record.log.lines ||
    checked.result !== record.result ||
    checked.exit?.code !== record.exit.code ||
    checked.exit?.signal !== record.exit.signal
  ) {
    throw refused(id, from, "log", "the log's lines or footer disagree with the record");
  }
}

/** Everything but the log: record.json canonical and hashing to the run id, the audit lines naming the run. */
export function checkReceivedHead(runId: string, recordBytes: Buffer, auditBytes: Buffer, from: string): ReceivedHead {
  const id = runIdFromHex(runHex(runId));
  const { record, id: recordId } = parseRunRecord(recordBytes, `run ${id} record.json from ${from}`);
  if (recordId !== id)
    throw refused(id, from, "record", `record.json hashes to ${recordId}`, "integrity-mismatch", {
      expected: id,
      actual: recordId,
    });
  const entries = parseAuditLines(auditBytes, id, from);
  const at = (ref: { seq: number; hash: string }) =>
    entries.find((entry) => entry.seq === ref.seq && entry.hash === ref.hash);
  const start = at(record.startAudit);
  if (start?.action !== "run-start" || start.subject?.["handle"] !== record.handle)
    throw refused(
      id,
      from,
      "audit",
      `the audit lines hold no run-start entry seq ${record.startAudit.seq} for handle ${record.handle}`,
    );
  const dispatch = at(record.dispatchAudit);
  if (dispatch?.action !== "dispatch" || dispatch.subject?.["job"] !== record.job)
    throw refused(
      id,
      from,
      "audit",
      `the audit lines hold no dispatch entry seq ${record.dispatchAudit.seq} for job ${record.job}`,
    );
  const end = entries.find(
    (entry) =>
      entry.action === "run-end" && entry.subject?.["handle"] === record.handle && entry.details?.["runId"] === id,
  );
  const endExit = end?.details?.["exit"] as { code?: unknown; signal?: unknown } | undefined;
  if (
    end === undefined ||
    end.details?.["result"] !== record.result ||
    endExit?.code !== record.exit.code ||
    endExit?.signal !== record.exit.signal
  ) {
    throw refused(id, from, "audit", `the audit lines hold no run-end entry for run ${id} with its exit and result`);
  }
  return {
    runId: id,
    from,
    record,
    recordBytes,
    auditBytes,
    auditLines: entries.length,
    audit: { start: start.seq, end: end.seq },
  };
}
