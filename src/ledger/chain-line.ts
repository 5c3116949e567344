import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";
import {
  errnoCode,
  bytesDigest,
  canonicalJson,
  compareUtf8,
  jsonDigest,
  STORED_MAX_DEPTH,
  nestsDeeperThan,
} from "../core/index.js";

/**
 * One line of a hash-chained log (see chain-log.ts), checked on its own, and
 * the byte-level reading both the full scan and the checkpointed sync use.
 */

export interface ChainLog {
  /** Store root components below the scope, e.g. [".agents", "audit"]. */
  dir: readonly string[];
  /** The log's file name inside the store root, e.g. "audit.jsonl". */
  file: string;
}

export const CHAIN_LOGS = {
  approvals: { dir: [".agents", "approvals"], file: "ledger.jsonl" },
  audit: { dir: [".agents", "audit"], file: "audit.jsonl" },
} as const satisfies Record<string, ChainLog>;

export function logName(log: ChainLog): string {
  return [...log.dir, log.file].join("/");
}

export const GENESIS_PREV = `sha256-${"0".repeat(64)}`;
const DIGEST = /^sha256-[0-9a-f]{64}$/;

export interface ChainEntry {
  seq: number;
  at: string;
  prev: string;
  hash: string;
  [key: string]: unknown;
}

export type BrokenReason =
  | "bad-json"
  | "non-canonical"
  | "invalid-entry"
  | "wrong-hash"
  | "wrong-prev"
  | "seq-gap"
  | "truncated";

class ProtoKey extends Error {}

/** JSON.parse refusing `__proto__` keys anywhere. Throws on bad JSON. */
export function parseLine(text: string): unknown {
  // The reviver recurses: a line nested past the bound is bad JSON before it can exhaust the stack.
  if (nestsDeeperThan(text, STORED_MAX_DEPTH)) throw new SyntaxError("nested too deep");
  return JSON.parse(text, (key, value: unknown) => {
    if (key === "__proto__") throw new ProtoKey("__proto__ key");
    return value;
  });
}

export function isPlainRecord(value: unknown): value is Record<string, unknown> {
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
 * The line's own hash, from its canonical text (`text`, verified canonical,
 * without its LF): the text with the top-level `"hash"` member cut out is
 * exactly the canonical encoding of the entry without `hash`, so it need not
 * be encoded again. The member is found by its spelling; a quote inside a
 * string is escaped, so only a member can spell it, and when it is spelled
 * more than once (a nested object with the same hash value) the entry is
 * encoded again instead of guessing which one is the top-level member.
 */
function lineHash(text: string, entry: Record<string, unknown> & { hash: string }): string {
  const member = `"hash":"${entry.hash}"`;
  const at = text.indexOf(member);
  if (at < 1 || text.indexOf(member, at + 1) >= 0) return entryHash(entry);
  const end = at + member.length;
  const before = text.charCodeAt(at - 1) === 0x2c; // ,
  const cut = before
    ? text.slice(0, at - 1) + text.slice(end)
    : text.charCodeAt(end) === 0x2c
      ? text.slice(0, at) + text.slice(end + 1)
      : text.slice(0, at) + text.slice(end);
  return bytesDigest(Buffer.from(`${cut}\n`, "utf8"));
}

/** At most STORED_MAX_DEPTH `{` and `[` in all: the line cannot nest deeper, so the depth scan is not needed. */
function fewOpenings(text: string): boolean {
  let openings = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if ((c === 0x7b || c === 0x5b) && ++openings > STORED_MAX_DEPTH) return false;
  }
  return true;
}

/**
 * Whether every object's keys are in canonical (UTF-8 byte) order, or null
 * when an object has an array-index-like key (the engine lists those first,
 * whatever the text's order, so only the full encoder can tell).
 *
 * For a value JSON.parse made from text without `\\u` escapes, the canonical
 * encoding is JSON.stringify's with keys sorted: strings and numbers are
 * spelled alike (JSON.stringify writes -0 as 0 too; a lone surrogate, which
 * canonical JSON refuses, JSON.stringify escapes, so neither equals the text).
 * So with keys already in order, `JSON.stringify(value) === text` is the
 * canonical check, without the encoder's cost.
 */
function keysOrdered(value: unknown): boolean | null {
  if (typeof value !== "object" || value === null) return true;
  if (Array.isArray(value)) {
    let result: boolean | null = true;
    for (const item of value) {
      const inner = keysOrdered(item);
      if (inner === null) return null;
      if (!inner) result = false;
    }
    return result;
  }
  let result: boolean | null = true;
  let previous: string | null = null;
  for (const key of Object.keys(value)) {
    const first = key.charCodeAt(0);
    if (first >= 0x30 && first <= 0x39) return null;
    if (previous !== null && compareUtf8(previous, key) >= 0) result = false;
    previous = key;
    const inner = keysOrdered((value as Record<string, unknown>)[key]);
    if (inner === null) return null;
    if (!inner) result = false;
  }
  return result;
}

/**
 * Check one line (without its LF) on its own: JSON, canonical spelling, shape,
 * self-hash. Returns the entry or the reason it is broken.
 *
 * The `__proto__`-refusing reviver costs as much as the parse; a line that
 * spells neither `__proto__` nor a `\u` escape (which could spell it) cannot
 * hold such a key, so it is parsed without one.
 */
export function checkLine(text: string): { entry: ChainEntry } | { reason: BrokenReason; seq: number | null } {
  let parsed: unknown;
  const plain = !text.includes("__proto__") && !text.includes("\\u");
  try {
    if (!plain) parsed = parseLine(text);
    else {
      if (!fewOpenings(text) && nestsDeeperThan(text, STORED_MAX_DEPTH)) throw new SyntaxError("nested too deep");
      parsed = JSON.parse(text);
    }
  } catch {
    return { reason: "bad-json", seq: null };
  }
  if (!isPlainRecord(parsed)) return { reason: "invalid-entry", seq: null };
  const seq = Number.isSafeInteger(parsed.seq) && (parsed.seq as number) >= 1 ? (parsed.seq as number) : null;
  const ordered = plain ? keysOrdered(parsed) : null;
  if (ordered !== null) {
    if (!ordered || JSON.stringify(parsed) !== text) return { reason: "non-canonical", seq };
  } else {
    let canonical: string;
    try {
      canonical = canonicalJson(parsed);
    } catch {
      return { reason: "non-canonical", seq };
    }
    if (canonical !== `${text}\n`) return { reason: "non-canonical", seq };
  }
  if (
    seq === null ||
    typeof parsed.at !== "string" ||
    typeof parsed.prev !== "string" ||
    !DIGEST.test(parsed.prev) ||
    typeof parsed.hash !== "string" ||
    !DIGEST.test(parsed.hash)
  ) {
    return { reason: "invalid-entry", seq };
  }
  if (lineHash(text, parsed as Record<string, unknown> & { hash: string }) !== parsed.hash)
    return { reason: "wrong-hash", seq };
  return { entry: parsed as ChainEntry };
}

/** Open a regular file for reading, never through a symlink nor waiting on a FIFO; null when it does not exist. */
export function openForRead(path: string): number | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return null;
    throw error;
  }
  try {
    if (!fstatSync(fd).isFile())
      throw Object.assign(new Error(`not a regular file: ${path}`), { code: "EISDIR_OR_SPECIAL" });
  } catch (error) {
    closeSync(fd);
    throw error;
  }
  return fd;
}

/** Exactly `length` bytes at `position`, or fewer when the file ends first. */
export function readAt(fd: number, position: number, length: number): Buffer {
  const bytes = Buffer.alloc(length);
  let read = 0;
  while (read < length) {
    const n = readSync(fd, bytes, read, length - read, position + read);
    if (n === 0) break;
    read += n;
  }
  return read === length ? bytes : bytes.subarray(0, read);
}

export interface LocatedEntry {
  entry: ChainEntry;
  /** Byte offset of the line's first byte. */
  offset: number;
  /** Bytes of the line, LF included. */
  length: number;
}

export type SegmentVerdict =
  | { ok: true; entries: LocatedEntry[]; seq: number; head: string }
  | { ok: false; entries: LocatedEntry[]; brokenAt: { line: number; seq: number | null; reason: BrokenReason } };

/**
 * Verify the lines in `bytes` (which start at byte `base` of the file) as the
 * continuation of a chain whose last verified entry is (`seq`, `head`) on
 * line `lineBase`. The segment must end with LF; a partial last line is
 * `truncated`.
 */
export function verifySegment(bytes: Buffer, base: number, seq: number, head: string, lineBase = seq): SegmentVerdict {
  const entries: LocatedEntry[] = [];
  let start = 0;
  let line = lineBase;
  while (start < bytes.length) {
    line += 1;
    const end = bytes.indexOf(0x0a, start);
    const broken = (reason: BrokenReason, claimed: number | null) => ({
      ok: false as const,
      entries,
      brokenAt: { line, seq: claimed, reason },
    });
    if (end < 0) {
      const match = /"seq":(\d+)/.exec(bytes.subarray(start, Math.min(bytes.length, start + 64)).toString("utf8"));
      return broken("truncated", match ? Number(match[1]) : null);
    }
    const checked = checkLine(bytes.subarray(start, end).toString("utf8"));
    if (!("entry" in checked)) return broken(checked.reason, checked.seq);
    const { entry } = checked;
    if (entry.seq !== seq + 1) return broken("seq-gap", entry.seq);
    if (entry.prev !== head) return broken("wrong-prev", entry.seq);
    entries.push({ entry, offset: base + start, length: end + 1 - start });
    seq = entry.seq;
    head = entry.hash;
    start = end + 1;
  }
  return { ok: true, entries, seq, head };
}
