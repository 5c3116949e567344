import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { OatsError, bytesDigest, canonicalJson } from "../core/index.js";
import type { AuditEntry } from "../ledger/index.js";
import type { AnchoredAudit } from "./anchored-audit.js";
import { inspectStoreAt, readRegularFile, readRegularFileInPieces, AGENTS_DIR } from "../retention/index.js";
import { checkReceivedHead, checkReceivedNames, receivedLogChecker, type ReceivedRunCheck } from "./received-check.js";

/**
 * Runs brought into this scope from a far side (`oats pull … --run`):
 *
 *   .agents/received-runs/<run id>/record.json   the sealed record's exact bytes
 *   .agents/received-runs/<run id>/log           the log's exact bytes
 *   .agents/received-runs/<run id>/audit.jsonl   the sending host's audit lines for the run
 *   .agents/received-runs/<run id>/origin.json   where it was pulled from (not evidence; not checked)
 *
 * How a run gets here is received-pull.ts. Every received run in place is then named by a `run-receive` audit entry of
 * this scope (its run id, where from, and the digest of each file), and
 * only a received run such an entry names is taken as received
 * (received-api.ts): the store is in the scope, and a writer of the scope
 * could put any self-consistent run there.
 */

export const RECEIVED_STORE: readonly string[] = [AGENTS_DIR, "received-runs"];
export const ORIGIN_FILE = "origin.json";
/** record.json and audit.jsonl, far side or at rest, are read whole up to this (a sealed record is at most 16 MiB). */
export const SMALL_FILE_LIMIT = 64 * 1024 * 1024;
/**
 * readReceivedFiles hands every file over whole (`oats run show` of a received run lists its lines): a log past this
 * is refused there. Pulling and verifying stream the log and have no such bound.
 */
const WHOLE_FILE_LIMIT = 1024 * 1024 * 1024;
const RUN_DIR = /^sha256-[0-9a-f]{64}$/;

export function receivedRoot(realScope: string): string {
  return join(realScope, ...RECEIVED_STORE);
}

export function storeError(path: string, failure: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-artifact-store", `received run store: ${path} is ${failure}`, {
    path,
    reason: failure,
    ...details,
  });
}

/** The names of the evidence files of a received run directory (not origin.json), which must be a directory. */
export function receivedFileNames(dir: string): string[] {
  const stats = lstatSync(dir);
  if (!stats.isDirectory()) throw storeError(dir, stats.isSymbolicLink() ? "symlink" : "not-a-directory");
  return readdirSync(dir).filter((name) => name !== ORIGIN_FILE);
}

/** One small file of a received run (record.json, audit.jsonl), read whole without following a symlink. */
export function readReceivedFile(dir: string, name: string, limit = SMALL_FILE_LIMIT): Buffer {
  return readRegularFile(join(dir, name), {
    limit,
    refuse: (failure, details) => storeError(join(dir, name), failure, details),
  });
}

/**
 * A received run at rest checked as a pull checks it, its log streamed
 * through a bounded buffer from a descriptor opened without following a
 * symlink.
 */
export function checkReceivedAtRest(dir: string, runId: string, from: string): ReceivedRunCheck {
  checkReceivedNames(runId, receivedFileNames(dir), from);
  const head = checkReceivedHead(
    runId,
    readReceivedFile(dir, "record.json"),
    readReceivedFile(dir, "audit.jsonl"),
    from,
  );
  const checker = receivedLogChecker(head);
  readRegularFileInPieces(
    join(dir, "log"),
    { limit: Number.MAX_SAFE_INTEGER, refuse: (failure, details) => storeError(join(dir, "log"), failure, details) },
    (piece) => checker.update(piece),
  );
  return checker.finish();
}

/** The evidence files of a received run directory, each whole (at most WHOLE_FILE_LIMIT bytes). */
export function readReceivedFiles(dir: string): Map<string, Buffer> {
  const files = new Map<string, Buffer>();
  for (const name of receivedFileNames(dir)) files.set(name, readReceivedFile(dir, name, WHOLE_FILE_LIMIT));
  return files;
}

export function receivedOrigin(dir: string): string | null {
  try {
    const value = JSON.parse(
      readRegularFile(join(dir, ORIGIN_FILE), {
        limit: 64 * 1024,
        refuse: (failure) => storeError(join(dir, ORIGIN_FILE), failure),
      }).toString("utf8"),
    ) as { from?: unknown };
    return typeof value.from === "string" ? value.from : null;
  } catch {
    return null;
  }
}

/** Received run ids present in the scope (names that are not run ids are left for fsck to report). */
export function listReceivedIds(realScope: string): { ids: string[]; strays: string[] } {
  if (!inspectStoreAt(realScope, RECEIVED_STORE).complete) return { ids: [], strays: [] };
  const ids: string[] = [];
  const strays: string[] = [];
  for (const name of readdirSync(receivedRoot(realScope)).sort()) {
    if (name === ".gitignore") continue;
    (RUN_DIR.test(name) ? ids : strays).push(name);
  }
  return { ids, strays };
}

/** The digest of each evidence file, as a run-receive audit entry names them. */
export function receivedDigests(check: {
  readonly recordBytes: Buffer;
  readonly log: { readonly digest: string };
  readonly auditBytes: Buffer;
}): Record<string, string> {
  return {
    "audit.jsonl": bytesDigest(check.auditBytes),
    log: check.log.digest,
    "record.json": bytesDigest(check.recordBytes),
  };
}

/** The entry `oats pull` wrote when it brought this run here (for exactly `digests`, when given), or null. */
export function receiptOf(
  audit: AnchoredAudit,
  runId: string,
  digests: Record<string, string> | null,
): AuditEntry | null {
  const wanted = digests === null ? null : canonicalJson(digests);
  for (let at = audit.entries.length - 1; at >= 0; at -= 1) {
    const entry = audit.entries[at]!;
    if (entry.action !== "run-receive" || (entry.outcome !== "ok" && entry.outcome !== "kept")) continue;
    if (entry.subject?.["runId"] !== runId) continue;
    if (wanted === null || canonicalJson(entry.details["files"] ?? null) === wanted) return entry;
  }
  return null;
}
