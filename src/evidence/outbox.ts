import { chmodSync, lstatSync, mkdirSync, readdirSync, renameSync, rmSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { OatsError, asStepError, errnoCode, canonicalJson, canonicalJsonBytes, bytesDigest } from "../core/index.js";
import {
  ensureStoreAt,
  fsyncDirectory,
  inspectStoreAt,
  resolveScope,
  faultPoint,
  readRegularFile,
  writeNewFileDurably,
  writeNewFileDurablyInPieces,
  writeStagedFile,
  AGENTS_DIR,
  assertContained,
  stagingName,
  DEFAULT_LOCK_WAIT_MS,
  withFileLock,
} from "../retention/index.js";
import { checkSealedLog, readSealedRun, type SealedRun } from "./sealed-run.js";
import { readAnchoredAudit, type AnchoredAudit } from "./anchored-audit.js";
import { checkDeliverable } from "./deliverable.js";
import { privateDir, readPrivateFile, writePrivateFile } from "../ledger/index.js";
import { runHex } from "./run-id.js";
import { EVIDENCE_FILES, type EvidenceFileName } from "./transport.js";

/**
 * The durable local outbox, `<scope>/.agents/outbox/` (0700 below the
 * managed root):
 *
 *   entries/<seq, 12 digits>-<run hex>/record.json   exact bytes of the sealed record
 *   entries/<seq>-<hex>/log                          exact bytes of the log
 *   entries/<seq>-<hex>/audit.jsonl                  exact bytes of the audit lines naming the run
 *   entries/<seq>-<hex>/entry.json                   oats.outbox-entry.v1: seq, run id, each file's digest and size
 *   delivered/<destination key>/<seq>-<hex>.json     oats.outbox-delivery.v1: the read-back proof
 *
 * The files are copies, not references into the run directory: the outbox
 * must still hold what it promised to deliver when the run directory is
 * gone or changed. An entry appears whole or not at all (staging directory,
 * every file fsync'd, the directory fsync'd, renamed, `entries/` fsync'd),
 * and seq numbers are given under a lock, so they count up in enqueue order
 * with no gaps. A run is queued once: enqueuing it again returns its entry.
 * Entries are never removed by delivery; a mark records that one destination
 * read every file back with the queued digest.
 */

export const OUTBOX_STORE: readonly string[] = [AGENTS_DIR, "outbox"];
const ENTRY_FORMAT = "oats.outbox-entry.v1";
export const DELIVERY_FORMAT = "oats.outbox-delivery.v1";
const ENTRY_NAME = /^([0-9]{12})-([0-9a-f]{64})$/;

export interface OutboxFile {
  readonly name: EvidenceFileName;
  readonly digest: string;
  readonly bytes: number;
}

export interface OutboxEntry {
  readonly format: typeof ENTRY_FORMAT;
  readonly seq: number;
  readonly runId: string;
  readonly handle: string;
  readonly enqueuedAt: string;
  /** The audit entries copied into audit.jsonl, by seq. */
  readonly audit: readonly number[];
  readonly files: readonly OutboxFile[];
}

const ENTRY_SCHEMA = z
  .object({
    format: z.literal(ENTRY_FORMAT),
    seq: z.number().int().positive(),
    runId: z.string().refine((value) => {
      try {
        return runHex(value).length === 64;
      } catch {
        return false;
      }
    }),
    handle: z.string(),
    enqueuedAt: z.string(),
    audit: z.array(z.number().int().positive()),
    files: z.array(
      z.object({ name: z.enum(EVIDENCE_FILES), digest: z.string(), bytes: z.number().int().nonnegative() }).strict(),
    ),
  })
  .strict();

export function outboxRoot(scope: string): string {
  return join(scope, ...OUTBOX_STORE);
}

function unwritable(scope: string, step: string, error: unknown): OatsError {
  if (error instanceof OatsError && error.code === "audit-unavailable") return error;
  const errno = errnoCode(error);
  const cause = error instanceof OatsError ? { cause: { code: error.code, ...error.details } } : {};
  return new OatsError(
    "audit-unavailable",
    `the evidence outbox ${outboxRoot(scope)} cannot be written: ${step} ` +
      `failed: ${error instanceof Error ? error.message : String(error)}`,
    {
      path: outboxRoot(scope),
      step,
      reason: "outbox-unwritable",
      ...(errno ? { errno } : {}),
      ...cause,
    },
  );
}

/** A private directory below the outbox root: created 0700, refused when it is a symlink or not a directory. */
function ensurePrivateDir(path: string): void {
  try {
    mkdirSync(path, { mode: 0o700 });
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") throw error;
  }
  const stats = lstatSync(path);
  if (stats.isSymbolicLink() || !stats.isDirectory()) {
    throw new OatsError(
      "invalid-artifact-store",
      `outbox component is ${stats.isSymbolicLink() ? "a symlink" : "not a directory"}, refusing it: ${path}`,
      { path, reason: stats.isSymbolicLink() ? "symlink" : "not-a-directory" },
    );
  }
}

/** Create the outbox down to `entries/` (and `delivered/`); returns the entries directory. */
export function ensureOutbox(scope: string): string {
  const root = outboxRoot(scope);
  ensureStoreAt(scope, OUTBOX_STORE);
  ensurePrivateDir(join(root, "entries"));
  ensurePrivateDir(join(root, "delivered"));
  return join(root, "entries");
}

/**
 * Whether a sealed run could be queued now: the outbox exists (or can be
 * created) and a file can be written and fsync'd in it. A probe file is
 * written and removed; nothing else changes.
 */
export function outboxWritable(scope: string): { writable: true } | { writable: false; error: OatsError } {
  try {
    const entries = ensureOutbox(resolveScope(scope));
    unlinkSync(writeStagedFile(entries, ".probe", ""));
    fsyncDirectory(entries);
    return { writable: true };
  } catch (error) {
    return { writable: false, error: unwritable(scope, "probe", error) };
  }
}

export function entryName(seq: number, runId: string): string {
  return `${String(seq).padStart(12, "0")}-${runHex(runId)}`;
}

/** The entry directories in seq order (staging and other dot-names skipped). */
function entryNames(entriesDir: string): { name: string; seq: number; hex: string }[] {
  let names: string[];
  try {
    names = readdirSync(entriesDir);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return [];
    throw error;
  }
  const found: { name: string; seq: number; hex: string }[] = [];
  for (const name of names) {
    const match = ENTRY_NAME.exec(name);
    if (match) found.push({ name, seq: Number(match[1]), hex: match[2]! });
  }
  return found.sort((a, b) => a.seq - b.seq);
}

function writeEntryFile(dir: string, name: string, bytes: Buffer): void {
  writeNewFileDurably(join(dir, name), bytes, 0o600);
}

export interface EnqueueOptions {
  readonly lockWaitMs?: number;
  /** The anchored audit log, when the caller read it already (a push reads it once). */
  readonly audit?: AnchoredAudit;
  /** Entries not to count as this run's (a push refused them): the run is queued anew. */
  readonly skip?: ReadonlySet<number>;
}

export interface EnqueueResult {
  readonly entry: OutboxEntry;
  /** False when the run was already queued (the existing entry is returned). */
  readonly queued: boolean;
}

/**
 * Queue a sealed run: `run` is its handle (the run directory's name) or an
 * object carrying it (what the run path returns). The record and the audit
 * lines are read and checked first (sealed-run.ts), and held to the anchored
 * audit log and the private start record (deliverable.ts: a run whose
 * run-end entry the verified log does not hold is not queued); the log, which can be
 * megabytes, is checked as it is copied into the staged entry, once. Any
 * refusal leaves the outbox as it was (the staging goes with it), and a run
 * queued before is still refused when its log is no longer the sealed one.
 */
export async function enqueueSealedRun(
  scope: string,
  run: string | { readonly handle: string; readonly runId?: string },
  options: EnqueueOptions = {},
): Promise<EnqueueResult> {
  const realScope = resolveScope(scope);
  const handle = typeof run === "string" ? run : run.handle;
  const audit = options.audit ?? readAnchoredAudit(realScope);
  const sealed = readSealedRun(realScope, handle, audit);
  // Only a run this scope's dispatcher sealed, as the anchored audit log and the private start record say.
  checkDeliverable(
    realScope,
    audit,
    { handle, runId: sealed.runId, recordBytes: sealed.recordBytes, log: null, auditBytes: sealed.auditBytes },
    `run ${handle}`,
    { runDirectory: false },
  );
  if (typeof run !== "string" && run.runId !== undefined && run.runId !== sealed.runId) {
    throw new OatsError("integrity-mismatch", `run ${handle} is sealed as ${sealed.runId}, not ${run.runId}`, {
      handle,
      expected: run.runId,
      actual: sealed.runId,
    });
  }
  let entries: string;
  try {
    entries = ensureOutbox(realScope);
  } catch (error) {
    throw unwritable(realScope, "create", error);
  }
  return withFileLock(
    {
      // Its own key: proper-lockfile keeps one lock per target in a process, and a push (whose lock is keyed by
      // entries/) queues runs while it holds its own.
      target: join(outboxRoot(realScope), "enqueue"),
      lockfilePath: join(outboxRoot(realScope), "enqueue.lock"),
      waitMs: options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS,
      minTimeout: 10,
      maxTimeout: 100,
      factor: 1.3,
      failure: (error) => unwritable(realScope, "lock", error),
    },
    () => writeEntry(realScope, entries, sealed, options.skip ?? new Set()),
  );
}

function writeEntry(scope: string, entries: string, sealed: SealedRun, skip: ReadonlySet<number>): EnqueueResult {
  const existing = entryNames(entries);
  const hex = runHex(sealed.runId);
  const already = existing.find((found) => found.hex === hex && !skip.has(found.seq));
  if (already) {
    checkSealedLog(sealed);
    return { entry: readEntryManifest(entries, already.name), queued: false };
  }
  const seq = (existing.at(-1)?.seq ?? 0) + 1;
  const entry: OutboxEntry = {
    format: ENTRY_FORMAT,
    seq,
    runId: sealed.runId,
    handle: sealed.handle,
    enqueuedAt: new Date().toISOString(),
    audit: sealed.auditSeqs,
    files: [
      { name: "record.json", digest: bytesDigest(sealed.recordBytes), bytes: sealed.recordBytes.length },
      // The record's; the copy below is checked against it as it is made.
      { name: "log", digest: sealed.log.digest, bytes: sealed.log.bytes },
      { name: "audit.jsonl", digest: bytesDigest(sealed.auditBytes), bytes: sealed.auditBytes.length },
    ],
  };
  const name = entryName(seq, sealed.runId);
  const staging = join(entries, stagingName());
  let renamed = false;
  let logRefusal: unknown = null;
  try {
    mkdirSync(staging, { mode: 0o700 });
    writeEntryFile(staging, "record.json", sealed.recordBytes);
    faultPoint("copy", sealed.log.path);
    writeNewFileDurablyInPieces(join(staging, "log"), 0o600, (write) => {
      try {
        checkSealedLog(sealed, write);
      } catch (error) {
        // Not the sealed log, gone, not a file: the run's refusal, not the outbox's (a failed write is not
        // an OatsError).
        if (error instanceof OatsError) logRefusal = error;
        throw error;
      }
    });
    writeEntryFile(staging, "audit.jsonl", sealed.auditBytes);
    writeEntryFile(staging, "entry.json", canonicalJsonBytes(entry));
    fsyncDirectory(staging);
    renameSync(staging, assertContained(entries, join(entries, name), `outbox entry ${name}`));
    renamed = true;
    fsyncDirectory(entries);
  } catch (error) {
    if (error === logRefusal) throw error;
    throw unwritable(scope, renamed ? "fsync" : "write", error);
  } finally {
    if (!renamed) rmSync(staging, { recursive: true, force: true });
  }
  return { entry, queued: true };
}

function readEntryManifest(entries: string, name: string): OutboxEntry {
  const path = join(entries, name, "entry.json");
  const bytes = readRegularFile(path, {
    limit: 1024 * 1024,
    refuse: (failure, details) =>
      new OatsError("invalid-artifact-store", `outbox entry ${name} has no readable entry.json: ${failure}`, {
        entry: name,
        reason: failure,
        ...details,
      }),
  });
  let parsed: unknown;
  try {
    parsed = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw new OatsError("invalid-artifact-store", `outbox entry ${name}: entry.json is not JSON`, {
      entry: name,
      reason: "bad-json",
    });
  }
  const result = ENTRY_SCHEMA.safeParse(parsed);
  if (
    !result.success ||
    canonicalJson(result.data) !== bytes.toString("utf8") ||
    entryName(result.data.seq, result.data.runId) !== name
  ) {
    throw new OatsError(
      "invalid-artifact-store",
      `outbox entry ${name}: entry.json is not a canonical entry for this name`,
      { entry: name, reason: "invalid-entry" },
    );
  }
  return result.data as OutboxEntry;
}

/** Every queued entry in seq order (reading only; an absent outbox is empty). */
export function outboxEntries(scope: string): OutboxEntry[] {
  const realScope = resolveScope(scope);
  const inspected = inspectStoreAt(realScope, OUTBOX_STORE, ["entries"]);
  if (!inspected.complete) return [];
  const entries = join(outboxRoot(realScope), "entries");
  return entryNames(entries).map(({ name }) => readEntryManifest(entries, name));
}

/** The directory of a destination's delivered marks: keyed by a digest of its canonical text. */
function destinationKey(to: string): string {
  return bytesDigest(Buffer.from(to)).slice("sha256-".length, "sha256-".length + 32);
}

export function deliveredDir(scope: string, to: string): string {
  return join(outboxRoot(scope), "delivered", destinationKey(to));
}

export interface DeliveryMark {
  readonly format: typeof DELIVERY_FORMAT;
  readonly seq: number;
  readonly runId: string;
  readonly to: string;
  readonly at: string;
  readonly files: readonly { readonly name: string; readonly digest: string }[];
}

/** Where this account keeps its own copy of a destination's marks (private-state.ts); null when it cannot. */
function privateMarksDir(scope: string, to: string): string | null {
  return privateDir(scope, "delivered", destinationKey(to));
}

/**
 * The marks of a destination by entry seq. A mark counts only when this
 * account's private state holds the same mark (markDelivered writes both):
 * the scope's `delivered/` is in the scope, and a mark a writer of the scope
 * put there must not keep a run from the far side. An unreadable, foreign or
 * unconfirmed mark counts as not delivered: the entry is delivered again,
 * which the far side takes idempotently.
 */
export function deliveryMarks(scope: string, to: string): Map<number, DeliveryMark> {
  const dir = deliveredDir(scope, to);
  const confirmed = privateMarksDir(scope, to);
  const marks = new Map<number, DeliveryMark>();
  if (confirmed === null) return marks;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return marks;
    throw error;
  }
  for (const name of names) {
    const match = /^([0-9]{12})-([0-9a-f]{64})\.json$/.exec(name);
    if (!match) continue;
    try {
      const bytes = readRegularFile(join(dir, name), {
        limit: 1024 * 1024,
        refuse: (failure) => new OatsError("invalid-artifact-store", failure),
      });
      if (readPrivateFile(join(confirmed, name), 1024 * 1024)?.equals(bytes) !== true) continue;
      const mark = JSON.parse(bytes.toString("utf8")) as DeliveryMark;
      if (
        mark.format === DELIVERY_FORMAT &&
        mark.to === to &&
        mark.seq === Number(match[1]) &&
        runHex(mark.runId) === match[2]
      )
        marks.set(mark.seq, mark);
    } catch {
      // Not a mark we wrote: the entry is delivered again, which the far side takes idempotently.
    }
  }
  return marks;
}

/** Record, durably, that `to` read the entry back intact. */
export function markDelivered(scope: string, entry: OutboxEntry, to: string): DeliveryMark {
  const mark: DeliveryMark = {
    format: DELIVERY_FORMAT,
    seq: entry.seq,
    runId: entry.runId,
    to,
    at: new Date().toISOString(),
    files: entry.files.map((file) => ({ name: file.name, digest: file.digest })),
  };
  const dir = deliveredDir(scope, to);
  try {
    ensurePrivateDir(join(outboxRoot(scope), "delivered"));
    ensurePrivateDir(dir);
    const staged = writeStagedFile(dir, ".mark", canonicalJsonBytes(mark));
    chmodSync(staged, 0o600);
    renameSync(staged, join(dir, `${entryName(entry.seq, entry.runId)}.json`));
    fsyncDirectory(dir);
  } catch (error) {
    throw asStepError("mark delivered", unwritable(scope, "mark", error));
  }
  // This account's own copy, which is what makes the mark count. Without it (the private state unusable) the entry
  // is delivered again at the next push: the far side takes it idempotently.
  const confirmed = privateMarksDir(scope, to);
  if (confirmed !== null) {
    try {
      writePrivateFile(confirmed, `${entryName(entry.seq, entry.runId)}.json`, canonicalJsonBytes(mark));
    } catch {
      // delivered again next time
    }
  }
  return mark;
}
