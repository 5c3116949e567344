import { closeSync, constants, fstatSync, fsyncSync, ftruncateSync, openSync, readSync, writeSync } from "node:fs";
import { withFileLock } from "../retention/store/publish-lock.js";
import { join } from "node:path";
import { OatsError, errnoCode, isOatsError } from "../errors.js";
import { canonicalJson, jsonDigest } from "../retention/digest/json.js";
import { ensureStoreAt, fsyncDirectory, inspectStoreAt, resolveScope } from "../retention/store/components.js";
import { STORED_MAX_DEPTH, scanJsonText } from "../json-text.js";

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
 * the log, inside the store root, so the managed .gitignore covers it), reads
 * only the log's last line (backwards, in chunks), refuses to append after a
 * damaged tail, writes one line with O_APPEND|O_NOFOLLOW and fsyncs it (and the
 * directory when the file was created). Any failure to write is
 * `audit-unavailable` naming the step: the caller must refuse its action.
 *
 * appendEntry checks only the tail (constant cost); verifyChain reads the whole
 * log and names the first broken link. Removing whole entries from the end
 * cannot be detected from the log alone: compare `head` with a remembered one.
 */

export const GENESIS_PREV = `sha256-${"0".repeat(64)}`;
export const DEFAULT_CHAIN_LOCK_WAIT_MS = 15_000;

const TAIL_CHUNK = 64 * 1024;
/** A longer last line is treated as damage rather than read without bound. */
const MAX_LINE_BYTES = 16 * 1024 * 1024;
const DIGEST = /^sha256-[0-9a-f]{64}$/;
const RESERVED = new Set(["seq", "at", "prev", "hash"]);
const NAME = /^[A-Za-z0-9._-]{1,255}$/;

export interface ChainLog {
  /** Store root components below the scope, e.g. [".agents", "audit"]. */
  dir: readonly string[];
  /** The log's file name inside the store root, e.g. "audit.jsonl". */
  file: string;
}

export interface ChainEntry {
  seq: number;
  at: string;
  prev: string;
  hash: string;
  [key: string]: unknown;
}

export type BrokenReason = "bad-json" | "non-canonical" | "invalid-entry" | "wrong-hash" | "wrong-prev" | "seq-gap" | "truncated";

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

export const CHAIN_LOGS = {
  approvals: { dir: [".agents", "approvals"], file: "ledger.jsonl" },
  audit: { dir: [".agents", "audit"], file: "audit.jsonl" },
} as const satisfies Record<string, ChainLog>;

function checkLog(log: ChainLog): void {
  const parts = [...log.dir, log.file];
  if (log.dir.length === 0 || parts.some((part) => typeof part !== "string" || !NAME.test(part) || part === "." || part === "..")) {
    throw new OatsError("invalid-input", `invalid chain log location: ${JSON.stringify(parts)}`, { log: parts });
  }
}

function unavailable(step: string, path: string, error: unknown, details: Record<string, unknown> = {}): OatsError {
  const errno = errnoCode(error);
  const reason = error instanceof Error ? error.message : String(error);
  return new OatsError("audit-unavailable", `cannot write ${path}: ${step} failed: ${reason}`, { path, step, ...(errno ? { errno } : {}), ...details }, { cause: error });
}

class ProtoKey extends Error {}

/** JSON.parse refusing `__proto__` keys anywhere. Throws on bad JSON. */
function parseLine(text: string): unknown {
  // The reviver recurses: a line nested past the bound is bad JSON before it can exhaust the stack.
  if (scanJsonText(text, STORED_MAX_DEPTH)?.reason === "too-deep") throw new SyntaxError("nested too deep");
  return JSON.parse(text, (key, value: unknown) => {
    if (key === "__proto__") throw new ProtoKey("__proto__ key");
    return value;
  });
}

function isPlainRecord(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/** The entry's own hash: jsonDigest of everything but `hash`. */
export function entryHash(entry: Record<string, unknown>): string {
  const { hash: _hash, ...rest } = entry;
  void _hash;
  return jsonDigest(rest);
}

/**
 * Check one line (without its LF) on its own: JSON, canonical spelling, shape,
 * self-hash. Returns the entry or the reason it is broken.
 */
function checkLine(text: string): { entry: ChainEntry } | { reason: BrokenReason; seq: number | null } {
  let parsed: unknown;
  try {
    parsed = parseLine(text);
  } catch {
    return { reason: "bad-json", seq: null };
  }
  if (!isPlainRecord(parsed)) return { reason: "invalid-entry", seq: null };
  const seq = Number.isSafeInteger(parsed.seq) && (parsed.seq as number) >= 1 ? (parsed.seq as number) : null;
  let canonical: string;
  try {
    canonical = canonicalJson(parsed);
  } catch {
    return { reason: "non-canonical", seq };
  }
  if (canonical !== `${text}\n`) return { reason: "non-canonical", seq };
  if (seq === null || typeof parsed.at !== "string" || typeof parsed.prev !== "string" || !DIGEST.test(parsed.prev) || typeof parsed.hash !== "string" || !DIGEST.test(parsed.hash)) {
    return { reason: "invalid-entry", seq };
  }
  if (entryHash(parsed) !== parsed.hash) return { reason: "wrong-hash", seq };
  return { entry: parsed as ChainEntry };
}

function openForRead(path: string): number | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return null;
    throw error;
  }
  try {
    if (!fstatSync(fd).isFile()) throw Object.assign(new Error(`not a regular file: ${path}`), { code: "EISDIR_OR_SPECIAL" });
  } catch (error) {
    closeSync(fd);
    throw error;
  }
  return fd;
}

/**
 * The last line of the file (without its LF), read backwards in chunks up to
 * the previous newline; "truncated" when the file does not end with LF.
 */
function readLastLine(fd: number, size: number): { text: string } | { reason: "truncated" | "too-long" } {
  const last = Buffer.alloc(1);
  readSync(fd, last, 0, 1, size - 1);
  if (last[0] !== 0x0a) return { reason: "truncated" };
  const chunks: Buffer[] = [];
  let end = size - 1;
  let total = 0;
  while (end > 0) {
    const start = Math.max(0, end - TAIL_CHUNK);
    const chunk = Buffer.alloc(end - start);
    let read = 0;
    while (read < chunk.length) {
      const n = readSync(fd, chunk, read, chunk.length - read, start + read);
      if (n === 0) throw new Error("log shrank while reading its tail");
      read += n;
    }
    const newline = chunk.lastIndexOf(0x0a);
    if (newline >= 0) {
      chunks.unshift(chunk.subarray(newline + 1));
      break;
    }
    chunks.unshift(chunk);
    total += chunk.length;
    if (total > MAX_LINE_BYTES) return { reason: "too-long" };
    end = start;
  }
  return { text: Buffer.concat(chunks).toString("utf8") };
}

function withLogLock<T>(root: string, file: string, waitMs: number, body: (stillHeld: () => void) => T): Promise<T> {
  const lockfilePath = join(root, `${file}.lock`);
  // Appends are short: retry often, so eight writers interleave without long idle gaps.
  return withFileLock(
    { target: join(root, file), lockfilePath, waitMs, minTimeout: 10, maxTimeout: 100, factor: 1.3, failure: (error) => unavailable("lock", join(root, file), error, { lock: lockfilePath }) },
    body,
  );
}

function checkBody(body: Record<string, unknown>): void {
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
export async function appendEntry(scope: string, log: ChainLog, body: Record<string, unknown>, options: AppendOptions = {}): Promise<ChainEntry> {
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
    // 1. The tail: the last entry, checked on its own.
    let previous: ChainEntry | null = null;
    let fd: number | null;
    try {
      fd = openForRead(path);
    } catch (error) {
      throw unavailable("open-tail", path, error);
    }
    if (fd !== null) {
      try {
        const size = fstatSync(fd).size;
        if (size > 0) {
          const tail = readLastLine(fd, size);
          if (!("text" in tail)) throw new OatsError("audit-unavailable", `refusing to append to ${path}: its last line is damaged (${tail.reason})`, { path, step: "verify-tail", reason: tail.reason });
          const checked = checkLine(tail.text);
          if (!("entry" in checked)) {
            throw new OatsError("audit-unavailable", `refusing to append to ${path}: its last line is damaged (${checked.reason})`, { path, step: "verify-tail", reason: checked.reason, seq: checked.seq });
          }
          previous = checked.entry;
        }
      } catch (error) {
        if (isOatsError(error)) throw error;
        throw unavailable("read-tail", path, error);
      } finally {
        closeSync(fd);
      }
    }
    const created = fd === null;

    // 2. The entry.
    const withoutHash: Record<string, unknown> = { seq: previous ? previous.seq + 1 : 1, at: new Date().toISOString(), ...body, prev: previous ? previous.hash : GENESIS_PREV };
    const entry = { ...withoutHash, hash: jsonDigest(withoutHash) } as ChainEntry;
    const line = Buffer.from(canonicalJson(entry), "utf8");

    // 3. The write: O_APPEND, never through a symlink; a failed write is taken back.
    stillHeld();
    let out: number;
    try {
      out = openSync(path, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW | (created ? constants.O_EXCL : 0), 0o644);
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
  let fd: number | null;
  let bytes: Buffer;
  try {
    fd = openForRead(path);
    if (fd === null) return empty;
    try {
      bytes = Buffer.alloc(fstatSync(fd).size);
      let read = 0;
      while (read < bytes.length) {
        const n = readSync(fd, bytes, read, bytes.length - read, read);
        if (n === 0) break;
        read += n;
      }
      bytes = bytes.subarray(0, read);
    } finally {
      closeSync(fd);
    }
  } catch (error) {
    throw new OatsError("invalid-artifact-store", `cannot read chain log ${path}: ${errnoCode(error) ?? String(error)}`, { path, errno: errnoCode(error) });
  }
  const text = bytes.toString("utf8");
  const lines = text.split("\n");
  const complete = text.endsWith("\n") || text.length === 0;
  // With a final LF the split leaves one empty string behind.
  const last = lines.pop() as string;
  if (!complete) lines.push(last);
  const entries: ChainEntry[] = [];
  let head = GENESIS_PREV;
  for (const [index, lineText] of lines.entries()) {
    const line = index + 1;
    const broken = (reason: BrokenReason, seq: number | null) => ({ entries, verdict: { ok: false as const, brokenAt: { line, seq, reason } } });
    if (!complete && index === lines.length - 1) {
      let seq: number | null = null;
      const match = /"seq":(\d+)/.exec(lineText);
      if (match) seq = Number(match[1]);
      return broken("truncated", seq);
    }
    const checked = checkLine(lineText);
    if (!("entry" in checked)) return broken(checked.reason, checked.seq);
    const { entry } = checked;
    if (entry.seq !== entries.length + 1) return broken("seq-gap", entry.seq);
    if (entry.prev !== head) return broken("wrong-prev", entry.seq);
    entries.push(entry);
    head = entry.hash;
  }
  return { entries, verdict: { ok: true, entries: entries.length, head } };
}

/** Check the whole chain; names the first broken link. A missing log is an empty, valid chain (head GENESIS_PREV). */
export function verifyChain(scope: string, log: ChainLog): ChainVerdict {
  return scan(scope, log).verdict;
}

/** Every entry, after verifying the whole chain; a broken chain is `integrity-mismatch` with `brokenAt`. */
export function readEntries(scope: string, log: ChainLog): { entries: ChainEntry[]; head: string } {
  const { entries, verdict } = scan(scope, log);
  if (!verdict.ok) {
    const { line, seq, reason } = verdict.brokenAt;
    throw new OatsError("integrity-mismatch", `chain log ${[...log.dir, log.file].join("/")} is broken at line ${line}${seq === null ? "" : ` (seq ${seq})`}: ${reason}`, { log: [...log.dir, log.file].join("/"), brokenAt: verdict.brokenAt });
  }
  return { entries, head: verdict.head };
}
