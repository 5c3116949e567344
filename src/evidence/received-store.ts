import { chmodSync, lstatSync, mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { OatsError, bytesDigest, canonicalJson, errnoCode, canonicalJsonBytes } from "../core/index.js";
import { audit, type AuditEntry } from "../ledger/index.js";
import { readAnchoredAudit, type AnchoredAudit } from "./anchored-audit.js";
import {
  ensureStoreAt,
  fsyncDirectory,
  inspectStoreAt,
  resolveScope,
  readRegularFile,
  writeNewFileDurably,
  AGENTS_DIR,
  assertContained,
  stagingName,
} from "../retention/index.js";
import { checkReceivedRun, RECEIVED_FILES, type ReceivedRunCheck } from "./received-check.js";
import { runHex, runIdFromHex } from "./run-id.js";
import { transportFor } from "./transport.js";

/**
 * Runs brought into this scope from a far side (`oats pull … --run`):
 *
 *   .agents/received-runs/<run id>/record.json   the sealed record's exact bytes
 *   .agents/received-runs/<run id>/log           the log's exact bytes
 *   .agents/received-runs/<run id>/audit.jsonl   the sending host's audit lines for the run
 *   .agents/received-runs/<run id>/origin.json   where it was pulled from (not evidence; not checked)
 *
 * Everything is read from the far side through the transport's readBack
 * (OCI and file digests checked there) and checked by checkReceivedRun
 * before anything in the scope is touched; then the run directory is built
 * as a dot-named staging directory (0700, every file O_EXCL|O_NOFOLLOW and
 * fsync'd), fsync'd and renamed into place, and the store root fsync'd. A
 * rename never replaces a non-empty directory, so a run already present is
 * compared instead: the same evidence bytes are `kept`, other bytes are
 * `integrity-mismatch` and nothing is replaced.
 *
 * Every received run in place is then named by a `run-receive` audit entry of
 * this scope (its run id, where from, and the digest of each file), and
 * only a received run such an entry names is taken as received
 * (received-api.ts): the store is in the scope, and a writer of the scope
 * could put any self-consistent run there.
 */

export const RECEIVED_STORE: readonly string[] = [AGENTS_DIR, "received-runs"];
const ORIGIN_FILE = "origin.json";
const FILE_LIMIT = 2 * 1024 * 1024 * 1024 - 1;
const RUN_DIR = /^sha256-[0-9a-f]{64}$/;

export interface ReceiveOptions {
  readonly insecure?: boolean;
}

export interface ReceiveReport {
  readonly runId: string;
  readonly from: string;
  readonly status: "written" | "kept";
  readonly handle: string;
  readonly job: string;
  readonly result: string;
  readonly logLines: number;
  readonly auditLines: number;
  /** Always false: the sending host's audit chain is not available here (see received-check.ts). */
  readonly auditChainVerified: false;
}

export function receivedRoot(realScope: string): string {
  return join(realScope, ...RECEIVED_STORE);
}

function storeError(path: string, failure: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-artifact-store", `received run store: ${path} is ${failure}`, {
    path,
    reason: failure,
    ...details,
  });
}

/** The evidence files of a received run directory, read without following a symlink. */
export function readReceivedFiles(dir: string): Map<string, Buffer> {
  const stats = lstatSync(dir);
  if (!stats.isDirectory()) throw storeError(dir, stats.isSymbolicLink() ? "symlink" : "not-a-directory");
  const files = new Map<string, Buffer>();
  for (const name of readdirSync(dir)) {
    if (name === ORIGIN_FILE) continue;
    files.set(
      name,
      readRegularFile(join(dir, name), {
        limit: FILE_LIMIT,
        refuse: (failure, details) => storeError(join(dir, name), failure, details),
      }),
    );
  }
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

function sameEvidence(existing: ReadonlyMap<string, Buffer>, check: ReceivedRunCheck): boolean {
  return (
    existing.size === RECEIVED_FILES.length &&
    existing.get("record.json")?.equals(check.recordBytes) === true &&
    existing.get("log")?.equals(check.logBytes) === true &&
    existing.get("audit.jsonl")?.equals(check.auditBytes) === true
  );
}

function writeNew(path: string, bytes: Buffer): void {
  writeNewFileDurably(path, bytes, 0o600);
}

/** The digest of each evidence file, as a run-receive audit entry names them. */
export function receivedDigests(check: {
  readonly recordBytes: Buffer;
  readonly logBytes: Buffer;
  readonly auditBytes: Buffer;
}): Record<string, string> {
  return {
    "audit.jsonl": bytesDigest(check.auditBytes),
    log: bytesDigest(check.logBytes),
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

/** Whether the anchored audit log already names these bytes as received (a chain that cannot be read: no). */
function hasReceipt(realScope: string, check: ReceivedRunCheck): boolean {
  try {
    return receiptOf(readAnchoredAudit(realScope), check.runId, receivedDigests(check)) !== null;
  } catch {
    return false;
  }
}

/** Compare a run directory already in place with what was checked: kept, or integrity-mismatch. */
function compareExisting(dir: string, check: ReceivedRunCheck, from: string): "kept" {
  if (sameEvidence(readReceivedFiles(dir), check)) return "kept";
  throw new OatsError(
    "integrity-mismatch",
    `this scope already holds received run ${check.runId} with other content; nothing was replaced`,
    { runId: check.runId, from, reason: "other-content" },
  );
}

/** Publish checked evidence into the scope (the only writing step). */
export function publishReceived(realScope: string, check: ReceivedRunCheck, from: string): "written" | "kept" {
  ensureStoreAt(realScope, RECEIVED_STORE);
  const root = receivedRoot(realScope);
  const dir = assertContained(root, join(root, check.runId), `received run ${check.runId}`);
  try {
    lstatSync(dir);
    return compareExisting(dir, check, from);
  } catch (error) {
    if (errnoCode(error) !== "ENOENT") throw error;
  }
  const staging = join(root, stagingName());
  mkdirSync(staging, { mode: 0o700 });
  try {
    chmodSync(staging, 0o700);
    writeNew(join(staging, "record.json"), check.recordBytes);
    writeNew(join(staging, "log"), check.logBytes);
    writeNew(join(staging, "audit.jsonl"), check.auditBytes);
    writeNew(
      join(staging, ORIGIN_FILE),
      canonicalJsonBytes({ format: "oats.received-run.v1", from, runId: check.runId }),
    );
    fsyncDirectory(staging);
    try {
      renameSync(staging, dir);
    } catch (error) {
      // Another puller won the race: its directory decides (same bytes kept, other bytes refused).
      if (errnoCode(error) === "ENOTEMPTY" || errnoCode(error) === "EEXIST") return compareExisting(dir, check, from);
      throw error;
    }
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
  fsyncDirectory(root);
  return "written";
}

/**
 * `oats pull <far side> --run <id>`: read the run from the far side
 * (transport readBack), check it, and only then publish it into the scope.
 * Any refusal leaves the scope byte-for-byte as it was.
 */
export async function receiveRun(
  scope: string,
  from: string,
  runRef: string,
  options: ReceiveOptions = {},
): Promise<ReceiveReport> {
  const realScope = resolveScope(scope);
  const runId = runIdFromHex(runHex(runRef));
  const transport = transportFor(from, {
    allowSameFilesystem: true,
    ...(options.insecure === true ? { insecure: true } : {}),
  });
  const where = transport.describe();
  const files = await transport.readBack(runId);
  if (files === null)
    throw new OatsError("run-not-found", `${where} holds no run ${runId}`, {
      runId,
      from: where,
      reason: "run-not-found",
    });
  const check = checkReceivedRun(runId, files, where);
  const { record } = check;
  const status = publishReceived(realScope, check, where);
  // Written once the run is in place: a received run no entry names is never taken as received, so an entry that
  // cannot be written leaves nothing trusted behind (pull again once the audit log can take it). A run kept as it
  // was, with its entry already there, changes nothing.
  if (status === "written" || !hasReceipt(realScope, check))
    await audit(realScope, {
      action: "run-receive",
      subject: { runId, handle: record.handle },
      outcome: status === "written" ? "ok" : "kept",
      details: { from: where, files: receivedDigests(check) },
    });
  return {
    runId,
    from: where,
    status,
    handle: record.handle,
    job: record.job,
    result: record.result,
    logLines: record.log.lines,
    auditLines: check.auditLines,
    auditChainVerified: false,
  };
}
