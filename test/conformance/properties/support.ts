/**
 * What properties share: the property shape, script builders, the log
 * format as the contract states it (docs/design/evidence.md, "The log"),
 * digests computed here (never asked of the driver), and patient polling.
 * Nothing here knows how the implementation is reached.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { DispatchOutcome, Driver, DriverScope, LogLine, PropertyName } from "../driver.js";

export interface PropertyContext {
  readonly driver: Driver;
  /** A fresh empty directory anyone may write (the child may run as another user), removed when the suite ends: for
   * markers and pid files. */
  tempDir(prefix: string): string;
  /** The property's scope, made on first use and shared by its captures (no other property's runs are in it). */
  scope(): Promise<DriverScope>;
  /** Another new, empty scope, for a property that needs more than one or moves one away. */
  freshScope(): Promise<DriverScope>;
  diagnostic(message: string): void;
}

export interface Property {
  readonly name: PropertyName;
  /** The property as the suite states it (numbered), for the test's name. */
  readonly title: string;
  /**
   * Timing-sensitive: it measures time between stamps, so it runs before the
   * others, alongside only other timing properties (an in-process dispatcher
   * shares its event loop with every other capture the suite runs).
   */
  readonly timing?: boolean;
  run(context: PropertyContext): Promise<void>;
}

// ------------------------------------------------------------------ scripts

/** A shell word that is exactly `text`. */
export function shQuote(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

export function sh(...lines: string[]): { lang: "sh"; body: string } {
  return { lang: "sh", body: `${lines.join("\n")}\n` };
}

export function node(...lines: string[]): { lang: "node"; body: string } {
  return { lang: "node", body: `${lines.join("\n")}\n` };
}

/** A unique capture name (an identifier) for a property's capture. */
let counter = 0;
export function captureName(prefix: string): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}`;
}

// --------------------------------------------------------------------- time

export const STAMP = /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z$/;

/** A stamp as microseconds since the epoch (UTC); throws on anything not in the contract's form. */
export function stampMicros(stamp: string): number {
  const match = STAMP.exec(stamp);
  assert.ok(match, `a stamp is yyyy-mm-ddThh:mm:ss.uuuuuuZ (UTC, microseconds), got ${JSON.stringify(stamp)}`);
  const millis = Date.UTC(
    Number(match[1]),
    Number(match[2]) - 1,
    Number(match[3]),
    Number(match[4]),
    Number(match[5]),
    Number(match[6]),
  );
  return millis * 1000 + Number(match[7]);
}

/** Run `tasks` at most `limit` at a time (one scope's audit log is appended under a lock). */
export async function limited<T>(limit: number, tasks: ReadonlyArray<() => Promise<T>>): Promise<T[]> {
  const results: T[] = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const index = next++;
      results[index] = await tasks[index]!();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  return results;
}

export async function waitFor<T>(
  what: string,
  probe: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== null && value !== false) return value;
    if (Date.now() > deadline)
      throw new assert.AssertionError({ message: `timed out after ${timeoutMs} ms waiting for ${what}` });
    await sleep(everyMs);
  }
}

/** A promise that rejects with a named timeout instead of hanging the suite. */
export async function within<T>(what: string, promise: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new assert.AssertionError({ message: `timed out after ${timeoutMs} ms waiting for ${what}` })),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export function fileSize(path: string): number {
  return existsSync(path) ? statSync(path).size : 0;
}

// ------------------------------------------------------------------ digests

export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** The 64-hex SHA-256 inside a digest text (`oats.bytes.v1:sha256-<hex>`, `sha256-<hex>`, `oats.json.v1:<hex>`...). */
export function digestHex(text: unknown): string {
  assert.equal(typeof text, "string", `a digest is a string, got ${JSON.stringify(text)}`);
  const match = /([0-9a-f]{64})$/.exec(text as string);
  assert.ok(match, `a digest ends in 64 lowercase hex digits, got ${JSON.stringify(text)}`);
  return match[1]!;
}

// ---------------------------------------------------------------------- log

/**
 * The log file as the contract defines it: UTF-8, one entry a line,
 * `<stamp> <stream> <text>` for captured lines, then footer lines that start
 * with `# `. Parsed here so a far side's bytes and a local file are read
 * the same way, without asking the driver.
 */
export function parseLogBytes(bytes: Buffer): { lines: LogLine[]; footer: string[] } {
  const text = bytes.toString("utf8");
  assert.ok(text === "" || text.endsWith("\n"), "every log entry, the footer's included, ends with a newline");
  const entries = text === "" ? [] : text.slice(0, -1).split("\n");
  const lines: LogLine[] = [];
  const footer: string[] = [];
  for (const entry of entries) {
    if (entry.startsWith("# ")) {
      footer.push(entry.slice(2));
      continue;
    }
    assert.equal(footer.length, 0, `no captured line after the footer: ${JSON.stringify(entry)}`);
    const match = /^(\S+) (out|err) (.*)$/s.exec(entry);
    assert.ok(match, `a log line is "<stamp> <out|err> <text>": ${JSON.stringify(entry)}`);
    stampMicros(match[1]!);
    lines.push({ at: match[1]!, stream: match[2] as "out" | "err", text: match[3]! });
  }
  return { lines, footer };
}

export function readLogFile(path: string): { bytes: Buffer; lines: LogLine[]; footer: string[] } {
  const bytes = readFileSync(path);
  return { bytes, ...parseLogBytes(bytes) };
}

// ----------------------------------------------------------------- outcomes

export function assertRan(
  outcome: DispatchOutcome,
  what: string,
): asserts outcome is Extract<DispatchOutcome, { kind: "ran" }> {
  assert.equal(outcome.kind, "ran", `${what}: expected a run, got ${JSON.stringify(outcome)}`);
}

export function assertRefused(
  outcome: DispatchOutcome,
  what: string,
  code?: string,
): asserts outcome is Extract<DispatchOutcome, { kind: "refused" }> {
  assert.equal(outcome.kind, "refused", `${what}: expected a refusal, got ${JSON.stringify(outcome)}`);
  if (code !== undefined) assert.equal(outcome.code, code, `${what}: ${outcome.message}`);
}

export function texts(lines: readonly LogLine[], stream?: "out" | "err"): string[] {
  return lines.filter((line) => stream === undefined || line.stream === stream).map((line) => line.text);
}

/** Is the process alive (a zombie counts as dead: it runs nothing and writes nothing)? */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) Z /s.test(stat);
  } catch {
    return false;
  }
}

export function readPid(path: string): number | null {
  if (!existsSync(path)) return null;
  const text = readFileSync(path, "utf8").trim();
  return /^\d+$/.test(text) ? Number(text) : null;
}
