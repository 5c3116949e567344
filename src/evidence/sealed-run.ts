import { join } from "node:path";
import { OatsError, bytesDigester, canonicalJson } from "../core/index.js";
import type { AuditEntry } from "../ledger/index.js";
import type { AnchoredAudit } from "./anchored-audit.js";
import { inspectStoreAt, readRegularFile, readRegularFileInPieces, assertContained } from "../retention/index.js";
import { HANDLE_PATTERN, parseRunRecord } from "./run-record.js";
import { LOG_FILE, RECORD_FILE, RUNS_STORE } from "./run-store.js";
import { bytesDigestHex, runHex, runIdFromHex } from "./run-id.js";

/**
 * What the outbox reads of a sealed run (`.agents/runs/<handle>/`, written by
 * the run path): the record's exact bytes, where the log is and what the
 * record says it is (checkSealedLog reads and checks it, piece by piece) and
 * the audit lines that name the run. Only the fields the outbox relies on are
 * checked here; the record's full schema is the run store's.
 *
 * - record.json must be a sealed `oats.run.v1` record (run-record.ts:
 *   schema and canonical bytes); its digest is the run id `sha256-<hex>`;
 * - the log must hash to `record.log.digest` and have `record.log.bytes` bytes;
 * - the audit lines are the entries the record names (dispatchAudit,
 *   startAudit: seq and hash must match) and every entry whose subject or
 *   details name the handle or the run id (run-start, run-end), from the
 *   audit chain as checked against this account's checkpoint and verified
 *   (anchored-audit.ts); each line is canonical JSON, so re-encoding an entry
 *   gives its exact bytes in the log.
 */

const RECORD_LIMIT = 16 * 1024 * 1024;
/** None: the log is only ever read in pieces through one reused buffer (checkSealedLog), never held whole. */
const LOG_LIMIT = Number.MAX_SAFE_INTEGER;

interface AuditRef {
  readonly seq: number;
  readonly hash: string;
}

export interface SealedRun {
  readonly handle: string;
  readonly runId: string;
  readonly recordBytes: Buffer;
  /**
   * The log as the record seals it: its path, oats.bytes.v1 digest and size.
   * Not its bytes, and not yet checked: a log can be megabytes, and
   * checkSealedLog checks it as it is read (the outbox's copy).
   */
  readonly log: { readonly path: string; readonly digest: string; readonly bytes: number };
  readonly auditBytes: Buffer;
  readonly auditSeqs: number[];
}

function refuse(handle: string, what: string) {
  return (failure: string, details: Record<string, unknown>) =>
    new OatsError(
      failure === "missing" ? "run-not-found" : "invalid-artifact-store",
      `run ${handle}: ${what} is ${failure}`,
      { handle, file: what, reason: failure, ...details },
    );
}

function names(value: unknown, wanted: ReadonlySet<string>): boolean {
  if (value === null || typeof value !== "object") return false;
  return Object.values(value as Record<string, unknown>).some(
    (field) => typeof field === "string" && wanted.has(field),
  );
}

export function auditLinesFor(
  audit: AnchoredAudit,
  handle: string,
  runId: string,
  named: readonly AuditRef[],
): { bytes: Buffer; seqs: number[] } {
  const { entries } = audit;
  const bySeq = new Map<number, AuditEntry>(entries.map((entry) => [entry.seq, entry]));
  const chosen = new Map<number, AuditEntry>();
  for (const ref of named) {
    const entry = bySeq.get(ref.seq);
    if (!entry || entry.hash !== ref.hash) {
      throw new OatsError(
        "integrity-mismatch",
        `run ${handle} names audit entry ${ref.seq} (${ref.hash}), which the ` +
          `audit log ${entry ? `holds with hash ${entry.hash}` : "does not hold"}`,
        { handle, seq: ref.seq, expected: ref.hash, actual: entry?.hash ?? null },
      );
    }
    chosen.set(entry.seq, entry);
  }
  const wanted = new Set([handle, runId]);
  for (const entry of entries)
    if (names(entry.subject, wanted) || names(entry.details, wanted)) chosen.set(entry.seq, entry);
  const seqs = [...chosen.keys()].sort((a, b) => a - b);
  return { bytes: Buffer.from(seqs.map((seq) => canonicalJson(chosen.get(seq))).join(""), "utf8"), seqs };
}

export function readSealedRun(scope: string, handle: string, anchored: AnchoredAudit): SealedRun {
  if (typeof handle !== "string" || !HANDLE_PATTERN.test(handle))
    throw new OatsError("invalid-input", `not a run handle: ${JSON.stringify(handle)}`, {
      handle,
      reason: "invalid-run-ref",
    });
  if (!inspectStoreAt(scope, RUNS_STORE, [handle]).complete)
    throw new OatsError("run-not-found", `no run ${handle} in ${scope}`, { handle });
  const dir = assertContained(join(scope, ...RUNS_STORE), join(scope, ...RUNS_STORE, handle), `run ${handle}`);
  const recordBytes = readRegularFile(join(dir, RECORD_FILE), {
    limit: RECORD_LIMIT,
    refuse: (failure, details) =>
      failure === "missing"
        ? new OatsError("invalid-input", `run ${handle} is not sealed yet: nothing to deliver`, {
            handle,
            reason: "run-unsealed",
          })
        : refuse(handle, RECORD_FILE)(failure, details),
  });
  // The run store's own parser: schema, canonical bytes, id.
  const { record, id } = parseRunRecord(recordBytes, `run ${handle} ${RECORD_FILE}`);
  if (record.handle !== handle)
    throw new OatsError("integrity-mismatch", `run ${handle}: its record names handle ${record.handle}`, {
      handle,
      recorded: record.handle,
    });
  const runId = runIdFromHex(runHex(id));
  // Checked where it is read (checkSealedLog): reading megabytes twice, once to check and once to copy, is the cost
  // this saves.
  const log = {
    path: join(dir, LOG_FILE),
    digest: `sha256-${bytesDigestHex(record.log.digest)}`,
    bytes: record.log.bytes,
  };
  const audit = auditLinesFor(anchored, handle, runId, [record.startAudit, record.dispatchAudit]);
  return { handle, runId, recordBytes, log, auditBytes: audit.bytes, auditSeqs: audit.seqs };
}

/**
 * Read the sealed run's log through one reused buffer, handing each piece to
 * `consume` (the outbox's copy), and hold what was read to the record: a log
 * that is not the sealed one is refused once the last piece is in, so a copy
 * made on the way is exactly the bytes that were checked.
 */
export function checkSealedLog(sealed: SealedRun, consume: (piece: Buffer) => void = () => undefined): void {
  const digester = bytesDigester();
  const bytes = readRegularFileInPieces(
    sealed.log.path,
    { limit: LOG_LIMIT, refuse: refuse(sealed.handle, LOG_FILE) },
    (piece) => {
      digester.update(piece);
      consume(piece);
    },
  );
  const digest = digester.digest();
  if (digest !== sealed.log.digest || bytes !== sealed.log.bytes) {
    throw new OatsError("integrity-mismatch", `run ${sealed.handle}: the log does not match its sealed record`, {
      handle: sealed.handle,
      runId: sealed.runId,
      reason: "log-mismatch",
      expected: sealed.log.digest,
      actual: digest,
      expectedBytes: sealed.log.bytes,
      actualBytes: bytes,
    });
  }
}
