import { closeSync, constants, fstatSync, fsyncSync, ftruncateSync, openSync, writeSync } from "node:fs";
import { withFileLock, ensureStoreAt, fsyncDirectory, inspectStoreAt, resolveScope } from "../retention/index.js";
import { join } from "node:path";
import { type JsonObject, OatsError, errnoCode, isOatsError, canonicalJson, jsonDigest } from "../core/index.js";
import {
  GENESIS_PREV,
  isPlainRecord,
  openForRead,
  parseLine,
  readAt,
  verifySegment,
  type BrokenReason,
  type ChainEntry,
  type ChainLog,
} from "./chain-line.js";
import { brokenChain, syncLog, type LogSync } from "./chain-sync.js";

/**
 * An append-only, hash-chained JSONL log: one module for the approvals ledger
 * (`.agents/approvals/ledger.jsonl`) and the audit log (`.agents/audit/audit.jsonl`).
 *
 * Every line is the canonical JSON (oats.json.v1) of one entry
 * `{seq, at, ...body, prev, hash}`:
 *   - `seq` counts from 1 with no gaps;
 *   - `prev` is the previous entry's `hash`; the first entry's `prev` is
 *     GENESIS_PREV ("sha256-" + 64 zeros), never null, so every entry has the
 *     same shape;
 *   - `hash` is jsonDigest (oats.json.v1) of the entry without its `hash` field.
 *
 * appendEntry holds a cross-process proper-lockfile lock (`<file>.lock` next to
 * the log, inside the store root, so the managed .gitignore covers it),
 * verifies everything written since the operator's private checkpoint
 * (chain-sync.ts; the whole log when there is none, nothing when the file is
 * exactly as checkpointed), refuses to append after any damage or after a
 * rewrite of verified bytes, writes one line with O_APPEND|O_NOFOLLOW and
 * fsyncs it (and the directory when the file was created), then extends the
 * checkpoint. Any failure is `audit-unavailable` naming the step: the caller
 * must refuse its action.
 *
 * verifyChain / readEntries read the whole log and name the first broken link.
 * Entries removed from the end before any checkpoint saw them cannot be
 * detected from the log alone: compare `head` with a remembered one.
 */

export {
  CHAIN_LOGS,
  GENESIS_PREV,
  entryHash,
  type BrokenReason,
  type ChainEntry,
  type ChainLog,
} from "./chain-line.js";

export const DEFAULT_CHAIN_LOCK_WAIT_MS = 15_000;

const NAME = /^[A-Za-z0-9._-]{1,255}$/;
const RESERVED = new Set(["seq", "at", "prev", "hash"]);

export interface BrokenLink {
  /** 1-based line number in the file. */
  line: number;
  /** The seq the line claims, when it could be read; null otherwise. */
  seq: number | null;
  reason: BrokenReason;
}

export type ChainVerdict = { ok: true; entries: number; head: string } | { ok: false; brokenAt: BrokenLink };

export interface AppendOptions {
  lockWaitMs?: number;
}

function checkLog(log: ChainLog): void {
  const parts = [...log.dir, log.file];
  if (
    log.dir.length === 0 ||
    parts.some((part) => typeof part !== "string" || !NAME.test(part) || part === "." || part === "..")
  ) {
    throw new OatsError("invalid-input", `invalid chain log location: ${JSON.stringify(parts)}`, { log: parts });
  }
}

function unavailable(step: string, path: string, error: unknown, details: Record<string, unknown> = {}): OatsError {
  const errno = errnoCode(error);
  const reason = error instanceof Error ? error.message : String(error);
  return new OatsError(
    "audit-unavailable",
    `cannot write ${path}: ${step} failed: ${reason}`,
    { path, step, ...(errno ? { errno } : {}), ...details },
    { cause: error },
  );
}

function withLogLock<T>(root: string, file: string, waitMs: number, body: (stillHeld: () => void) => T): Promise<T> {
  const lockfilePath = join(root, `${file}.lock`);
  // Appends are short: retry often, so eight writers interleave without long idle gaps.
  return withFileLock(
    {
      target: join(root, file),
      lockfilePath,
      waitMs,
      minTimeout: 10,
      maxTimeout: 100,
      factor: 1.3,
      failure: (error) => unavailable("lock", join(root, file), error, { lock: lockfilePath }),
    },
    body,
  );
}

function checkBody(body: JsonObject): void {
  if (!isPlainRecord(body)) throw new OatsError("invalid-input", "a chain log entry body must be a plain object", {});
  for (const key of Object.keys(body)) {
    if (RESERVED.has(key)) throw new OatsError("invalid-input", `a chain log entry body may not set "${key}"`, { key });
  }
  // Refuses __proto__ at any depth, and anything canonical JSON cannot spell.
  const text = canonicalJson(body);
  try {
    parseLine(text);
  } catch {
    throw new OatsError("invalid-input", "a chain log entry body may not hold a __proto__ key", {});
  }
}

/**
 * Append one entry and return it as written. Refusals: `invalid-input` (bad
 * body or log location), `invalid-artifact-store` (a store component is a
 * symlink or not a directory), `busy` (lock not acquired in time),
 * `audit-unavailable` (anything that stops the line being written durably,
 * including a damaged tail: nothing is appended after damage).
 */
export async function appendEntry(
  scope: string,
  log: ChainLog,
  body: JsonObject,
  options: AppendOptions = {},
): Promise<ChainEntry> {
  checkLog(log);
  checkBody(body);
  const root = resolveScope(scope);
  const display = join(root, ...log.dir, log.file);
  let storeRoot: string;
  try {
    ensureStoreAt(root, log.dir);
    storeRoot = join(root, ...log.dir);
  } catch (error) {
    if (isOatsError(error)) throw error;
    throw unavailable("create-store", display, error);
  }
  const path = join(storeRoot, log.file);
  return withLogLock(storeRoot, log.file, options.lockWaitMs ?? DEFAULT_CHAIN_LOCK_WAIT_MS, (stillHeld) => {
    // 1. Everything since the operator's verified checkpoint (the whole log when there is none).
    let sync: LogSync;
    try {
      sync = syncLog(root, log);
    } catch (error) {
      if (isOatsError(error) && error.code === "integrity-mismatch") {
        throw new OatsError("audit-unavailable", `refusing to append to ${path}: ${error.message}`, {
          path,
          step: "verify",
          ...error.details,
        });
      }
      if (isOatsError(error)) throw unavailable("verify", path, error);
      throw unavailable("read", path, error);
    }
    const created = sync.how === "empty";
    const previous = sync.seq === 0 ? null : { seq: sync.seq, hash: sync.head };

    // 2. The entry.
    const withoutHash: Record<string, unknown> = {
      seq: previous ? previous.seq + 1 : 1,
      at: new Date().toISOString(),
      ...body,
      prev: previous ? previous.hash : GENESIS_PREV,
    };
    const entry = { ...withoutHash, hash: jsonDigest(withoutHash) } as ChainEntry;
    const line = Buffer.from(canonicalJson(entry), "utf8");

    // 3. The write: O_APPEND, never through a symlink, never waiting on a FIFO for a reader (O_NONBLOCK, then the
    // fstat below); a failed write is taken back.
    stillHeld();
    let out: number;
    try {
      out = openSync(
        path,
        constants.O_WRONLY |
          constants.O_APPEND |
          constants.O_CREAT |
          constants.O_NOFOLLOW |
          constants.O_NONBLOCK |
          (created ? constants.O_EXCL : 0),
        0o644,
      );
    } catch (error) {
      throw unavailable("open", path, error);
    }
    try {
      let before: number;
      try {
        const stats = fstatSync(out);
        if (!stats.isFile()) throw new Error(`not a regular file: ${path}`);
        before = stats.size;
      } catch (error) {
        throw unavailable("open", path, error);
      }
      // Written behind the lock by something else since it was verified: the chain link would be a guess.
      if (before !== sync.size)
        throw new OatsError(
          "audit-unavailable",
          `refusing to append to ${path}: it changed while it was being verified`,
          { path, step: "verify", size: { verified: sync.size, now: before } },
        );
      try {
        let written = 0;
        while (written < line.length) written += writeSync(out, line, written, line.length - written);
      } catch (error) {
        try {
          ftruncateSync(out, before);
        } catch {
          // The damaged tail will make the next append refuse.
        }
        throw unavailable("write", path, error);
      }
      try {
        fsyncSync(out);
      } catch (error) {
        throw unavailable("fsync", path, error);
      }
      try {
        const after = fstatSync(out, { bigint: true });
        if (Number(after.size) === before + line.length) sync.recordAppend(entry, before, line.length, after);
      } catch {
        // The checkpoint is a cache: the next call verifies from the previous one.
      }
    } finally {
      closeSync(out);
    }
    if (created) {
      try {
        fsyncDirectory(storeRoot);
      } catch (error) {
        throw unavailable("fsync-directory", storeRoot, error);
      }
    }
    return entry;
  });
}

function scan(scope: string, log: ChainLog): { entries: ChainEntry[]; verdict: ChainVerdict } {
  checkLog(log);
  const root = resolveScope(scope);
  const store = inspectStoreAt(root, log.dir);
  const empty = { entries: [], verdict: { ok: true as const, entries: 0, head: GENESIS_PREV } };
  if (!store.complete) return empty;
  const path = join(store.root, log.file);
  let bytes: Buffer;
  try {
    const fd = openForRead(path);
    if (fd === null) return empty;
    try {
      bytes = readAt(fd, 0, fstatSync(fd).size);
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    throw new OatsError(
      "invalid-artifact-store",
      `cannot read chain log ${path}: ${errnoCode(error) ?? String(error)}`,
      { path, errno: errnoCode(error) },
    );
  }
  const verdict = verifySegment(bytes, 0, 0, GENESIS_PREV);
  const entries = verdict.entries.map((located) => located.entry);
  if (!verdict.ok) return { entries, verdict: { ok: false, brokenAt: verdict.brokenAt } };
  return { entries, verdict: { ok: true, entries: entries.length, head: verdict.head } };
}

/** Check the whole chain; names the first broken link. A missing log is an empty, valid chain (head GENESIS_PREV). */
export function verifyChain(scope: string, log: ChainLog): ChainVerdict {
  return scan(scope, log).verdict;
}

/** Every entry, after verifying the whole chain; a broken chain is `integrity-mismatch` with `brokenAt`. */
export function readEntries(scope: string, log: ChainLog): { entries: ChainEntry[]; head: string } {
  const { entries, verdict } = scan(scope, log);
  if (!verdict.ok) throw brokenChain(log, verdict.brokenAt);
  return { entries, head: verdict.head };
}
