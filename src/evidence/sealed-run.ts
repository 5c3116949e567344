import { join } from "node:path";
import { OatsError } from "../errors.js";
import { readAudit, type AuditEntry } from "../captures/audit.js";
import { bytesDigester, canonicalJson } from "../retention/digest/json.js";
import { inspectStoreAt } from "../retention/store/components.js";
import { readRegularFile, readRegularFileInPieces } from "../retention/store/files.js";
import { assertContained } from "../retention/store/layout.js";
import { HANDLE_PATTERN, parseRunRecord } from "./run-record.js";
import { LOG_FILE, RECORD_FILE, RUNS_STORE } from "./run-store.js";
import { bytesDigestHex, runHex, runIdFromHex } from "./run-id.js";

/**
 * What the outbox reads of a sealed run (`.agents/runs/<handle>/`, written by
 * the run path): the record's exact bytes, the log's digest and size (read
 * through, not held: the copy is checked against them) and the audit lines
 * that name the run. Only the fields the outbox relies on are
 * checked here; the record's full schema is the run store's.
 *
 * - record.json must be a sealed `oats.run.v1` record (run-record.ts:
 *   schema and canonical bytes); its digest is the run id `sha256-<hex>`;
 * - the log must hash to `record.log.digest` and have `record.log.bytes` bytes;
 * - the audit lines are the entries the record names (dispatchAudit,
 *   startAudit: seq and hash must match) and every entry whose subject or
 *   details name the handle or the run id (run-start, run-end). The chain is
 *   verified first; each line is canonical JSON, so re-encoding an entry gives
 *   its exact bytes in the log.
 */

const RECORD_LIMIT = 16 * 1024 * 1024;
const LOG_LIMIT = 2 * 1024 * 1024 * 1024 - 1;

interface AuditRef {
  readonly seq: number;
  readonly hash: string;
}

export interface SealedRun {
  readonly handle: string;
  readonly runId: string;
  readonly recordBytes: Buffer;
  /**
   * The log as checked against the record: its path, oats.bytes.v1 digest and
   * size. Not its bytes: a log can be megabytes, and whoever copies it checks
   * the copy against this digest (outbox.ts).
   */
  readonly log: { readonly path: string; readonly digest: string; readonly bytes: number };
  readonly auditBytes: Buffer;
  readonly auditSeqs: number[];
}

function refuse(handle: string, what: string) {
  return (failure: string, details: Record<string, unknown>) =>
    new OatsError(failure === "missing" ? "run-not-found" : "invalid-artifact-store", `run ${handle}: ${what} is ${failure}`, { handle, file: what, reason: failure, ...details });
}

function names(value: unknown, wanted: ReadonlySet<string>): boolean {
  if (value === null || typeof value !== "object") return false;
  return Object.values(value as Record<string, unknown>).some((field) => typeof field === "string" && wanted.has(field));
}

export function auditLinesFor(scope: string, handle: string, runId: string, named: readonly AuditRef[]): { bytes: Buffer; seqs: number[] } {
  const { entries } = readAudit(scope);
  const bySeq = new Map<number, AuditEntry>(entries.map((entry) => [entry.seq, entry]));
  const chosen = new Map<number, AuditEntry>();
  for (const ref of named) {
    const entry = bySeq.get(ref.seq);
    if (!entry || entry.hash !== ref.hash) {
      throw new OatsError("integrity-mismatch", `run ${handle} names audit entry ${ref.seq} (${ref.hash}), which the audit log ${entry ? `holds with hash ${entry.hash}` : "does not hold"}`, { handle, seq: ref.seq, expected: ref.hash, actual: entry?.hash ?? null });
    }
    chosen.set(entry.seq, entry);
  }
  const wanted = new Set([handle, runId]);
  for (const entry of entries) if (names(entry.subject, wanted) || names(entry.details, wanted)) chosen.set(entry.seq, entry);
  const seqs = [...chosen.keys()].sort((a, b) => a - b);
  return { bytes: Buffer.from(seqs.map((seq) => canonicalJson(chosen.get(seq))).join(""), "utf8"), seqs };
}

export function readSealedRun(scope: string, handle: string): SealedRun {
  if (typeof handle !== "string" || !HANDLE_PATTERN.test(handle)) throw new OatsError("invalid-input", `not a run handle: ${JSON.stringify(handle)}`, { handle, reason: "invalid-run-ref" });
  if (!inspectStoreAt(scope, RUNS_STORE, [handle]).complete) throw new OatsError("run-not-found", `no run ${handle} in ${scope}`, { handle });
  const dir = assertContained(join(scope, ...RUNS_STORE), join(scope, ...RUNS_STORE, handle), `run ${handle}`);
  const recordBytes = readRegularFile(join(dir, RECORD_FILE), {
    limit: RECORD_LIMIT,
    refuse: (failure, details) =>
      failure === "missing" ? new OatsError("invalid-input", `run ${handle} is not sealed yet: nothing to deliver`, { handle, reason: "run-unsealed" }) : refuse(handle, RECORD_FILE)(failure, details),
  });
  // The run store's own parser: schema, canonical bytes, id.
  const { record, id } = parseRunRecord(recordBytes, `run ${handle} ${RECORD_FILE}`);
  if (record.handle !== handle) throw new OatsError("integrity-mismatch", `run ${handle}: its record names handle ${record.handle}`, { handle, recorded: record.handle });
  const runId = runIdFromHex(runHex(id));
  const logPath = join(dir, LOG_FILE);
  const digester = bytesDigester();
  const logBytes = readRegularFileInPieces(logPath, { limit: LOG_LIMIT, refuse: refuse(handle, LOG_FILE) }, (piece) => digester.update(piece));
  const logDigest = digester.digest();
  if (logDigest.slice("sha256-".length) !== bytesDigestHex(record.log.digest) || logBytes !== record.log.bytes) {
    throw new OatsError("integrity-mismatch", `run ${handle}: the log does not match its sealed record`, { handle, runId, expected: record.log.digest, actual: logDigest, expectedBytes: record.log.bytes, actualBytes: logBytes });
  }
  const audit = auditLinesFor(scope, handle, runId, [record.startAudit, record.dispatchAudit]);
  return { handle, runId, recordBytes, log: { path: logPath, digest: logDigest, bytes: logBytes }, auditBytes: audit.bytes, auditSeqs: audit.seqs };
}
