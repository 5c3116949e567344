import { join } from "node:path";
import { z } from "zod";
import { OatsError } from "../errors.js";
import { readAudit, type AuditEntry } from "../captures/audit.js";
import { bytesDigest, canonicalJson } from "../retention/digest/json.js";
import { inspectStoreAt } from "../retention/store/components.js";
import { readRegularFile } from "../retention/store/files.js";
import { AGENTS_DIR, assertContained } from "../retention/store/layout.js";
import { bytesDigestHex, runIdFromHex } from "./run-id.js";

/**
 * What the outbox reads of a sealed run (`.agents/runs/<handle>/`, written by
 * the run path): the record's exact bytes, the log's exact bytes and the
 * audit lines that name the run. Only the fields the outbox relies on are
 * checked here; the record's full schema is the run store's.
 *
 * - record.json must be canonical JSON of format `oats.run.v1`; its digest
 *   is the run id `oats.json.v1:<hex>`;
 * - the log must hash to `record.log.digest` and have `record.log.bytes` bytes;
 * - the audit lines are the entries the record names (dispatchAudit,
 *   startAudit: seq and hash must match) and every entry whose subject or
 *   details name the handle or the run id (run-start, run-end). The chain is
 *   verified first; each line is canonical JSON, so re-encoding an entry gives
 *   its exact bytes in the log.
 */

const RUNS_STORE = [AGENTS_DIR, "runs"];
const HANDLE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const RECORD_LIMIT = 16 * 1024 * 1024;
const LOG_LIMIT = 2 * 1024 * 1024 * 1024 - 1;

const AUDIT_REF = z.object({ seq: z.number().int().positive(), hash: z.string() });
const RECORD_FIELDS = z.object({
  format: z.literal("oats.run.v1"),
  handle: z.string(),
  dispatchAudit: AUDIT_REF.optional(),
  startAudit: AUDIT_REF.optional(),
  log: z.object({ digest: z.string(), bytes: z.number().int().nonnegative() }),
});

export interface SealedRun {
  readonly handle: string;
  readonly runId: string;
  readonly recordBytes: Buffer;
  readonly logBytes: Buffer;
  readonly auditBytes: Buffer;
  readonly auditSeqs: number[];
}

function refuse(handle: string, what: string) {
  return (failure: string, details: Record<string, unknown>) =>
    new OatsError(failure === "missing" ? "artifact-not-found" : "invalid-artifact-store", `run ${handle}: ${what} is ${failure}`, { handle, file: what, reason: failure, ...details });
}

function names(value: unknown, wanted: ReadonlySet<string>): boolean {
  if (value === null || typeof value !== "object") return false;
  return Object.values(value as Record<string, unknown>).some((field) => typeof field === "string" && wanted.has(field));
}

export function auditLinesFor(scope: string, handle: string, runId: string, named: readonly z.infer<typeof AUDIT_REF>[]): { bytes: Buffer; seqs: number[] } {
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
  if (typeof handle !== "string" || !HANDLE.test(handle)) throw new OatsError("invalid-input", `not a run handle: ${JSON.stringify(handle)}`, { handle });
  if (!inspectStoreAt(scope, RUNS_STORE, [handle]).complete) throw new OatsError("artifact-not-found", `no run ${handle} in ${scope}`, { handle });
  const dir = assertContained(join(scope, ...RUNS_STORE), join(scope, ...RUNS_STORE, handle), `run ${handle}`);
  const recordBytes = readRegularFile(join(dir, "record.json"), { limit: RECORD_LIMIT, refuse: refuse(handle, "record.json") });
  let parsed: unknown;
  try {
    parsed = JSON.parse(recordBytes.toString("utf8"));
  } catch {
    throw new OatsError("invalid-artifact-store", `run ${handle}: record.json is not JSON`, { handle, reason: "bad-json" });
  }
  const fields = RECORD_FIELDS.safeParse(parsed);
  if (!fields.success) throw new OatsError("invalid-artifact-store", `run ${handle}: record.json is not a sealed oats.run.v1 record: ${fields.error.issues[0]?.message}`, { handle, reason: "invalid-record" });
  if (canonicalJson(parsed) !== recordBytes.toString("utf8")) throw new OatsError("invalid-artifact-store", `run ${handle}: record.json is not canonical JSON`, { handle, reason: "non-canonical" });
  if (fields.data.handle !== handle) throw new OatsError("integrity-mismatch", `run ${handle}: its record names handle ${fields.data.handle}`, { handle, recorded: fields.data.handle });
  const runId = runIdFromHex(bytesDigest(recordBytes).slice("sha256-".length));
  const logBytes = readRegularFile(join(dir, "log"), { limit: LOG_LIMIT, refuse: refuse(handle, "log") });
  if (bytesDigest(logBytes).slice("sha256-".length) !== bytesDigestHex(fields.data.log.digest) || logBytes.length !== fields.data.log.bytes) {
    throw new OatsError("integrity-mismatch", `run ${handle}: the log does not match its sealed record`, { handle, runId, expected: fields.data.log.digest, actual: bytesDigest(logBytes), expectedBytes: fields.data.log.bytes, actualBytes: logBytes.length });
  }
  const named = [fields.data.startAudit, fields.data.dispatchAudit].filter((ref): ref is z.infer<typeof AUDIT_REF> => ref !== undefined);
  const audit = auditLinesFor(scope, handle, runId, named);
  return { handle, runId, recordBytes, logBytes, auditBytes: audit.bytes, auditSeqs: audit.seqs };
}
