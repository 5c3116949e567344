import { OatsError } from "../core/index.js";

/**
 * The run log (docs/design/evidence.md, "The log"): UTF-8, one entry per
 * line, `<stamp> <stream> <text>\n`, where the stamp is a microsecond UTC
 * time (`2026-12-01T03:40:00.123456Z`) and the stream is `out` or `err`.
 * When the child has ended, footer lines that start with `# ` follow:
 * `# exit: code 42` | `# exit: signal SIGKILL` | `# exit: unknown`, then
 * `# RESULT: OK|FAILED|CANCELLED|INTERRUPTED`, optionally preceded by
 * `# note: ...` lines. Pure: nothing here touches a file.
 */

export const STREAMS = ["out", "err"] as const;
export type Stream = (typeof STREAMS)[number];
export const RESULTS = ["OK", "FAILED", "CANCELLED", "INTERRUPTED"] as const;
export type RunResult = (typeof RESULTS)[number];

export interface LogLine {
  /** The stamp text, `YYYY-MM-DDTHH:MM:SS.ffffffZ`. */
  readonly at: string;
  readonly stream: Stream;
  readonly text: string;
}

export interface RunExit {
  readonly code: number | null;
  readonly signal: string | null;
}

export interface ParsedLog {
  readonly lines: LogLine[];
  /** The footer lines, verbatim without their newline (`# exit: code 0`, ...); empty while the run is open. */
  readonly footer: string[];
  /** From the footer; null when there is no footer yet. */
  readonly exit: RunExit | null;
  readonly result: RunResult | null;
}

const STAMP = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})Z$/;

// The `YYYY-MM-DDTHH:MM:SS.` of the last second formatted: lines come many to a second.
let cachedSecond = Number.NaN;
let cachedPrefix = "";

/** Microseconds since the epoch as a stamp. */
export function formatStamp(micros: number): string {
  const second = Math.floor(micros / 1_000_000);
  if (second !== cachedSecond) {
    cachedPrefix = new Date(second * 1000).toISOString().slice(0, 20);
    cachedSecond = second;
  }
  return `${cachedPrefix}${String(micros - second * 1_000_000).padStart(6, "0")}Z`;
}

/** A stamp back to microseconds since the epoch; NaN when it is not a stamp. */
export function parseStamp(stamp: string): number {
  const match = STAMP.exec(stamp);
  if (!match) return Number.NaN;
  const millis = Date.parse(`${stamp.slice(0, 23)}Z`);
  if (Number.isNaN(millis) || new Date(millis).toISOString().slice(0, 23) !== stamp.slice(0, 23)) return Number.NaN;
  return millis * 1000 + Number(match[7]!.slice(3));
}

export function formatLogLine(line: LogLine): string {
  return `${line.at} ${line.stream} ${line.text}\n`;
}

/** How a run log's footer writes an exit: `code <n>`, `signal <NAME>`, or `unknown`. */
export function exitText(exit: RunExit | null): string {
  if (exit === null || (exit.code === null && exit.signal === null)) return "unknown";
  return exit.signal !== null ? `signal ${exit.signal}` : `code ${exit.code}`;
}

/** The footer written after the child ends: notes, exit, result. */
export function formatFooter(exit: RunExit | null, result: RunResult, notes: readonly string[] = []): string {
  return [...notes.map((note) => `# note: ${note}`), `# exit: ${exitText(exit)}`, `# RESULT: ${result}`]
    .map((line) => `${line}\n`)
    .join("");
}

function bad(message: string, line: number): OatsError {
  return new OatsError("invalid-artifact", `run log line ${line}: ${message}`, { line, reason: "run-log-malformed" });
}

function parseExit(text: string, line: number): RunExit {
  if (text === "unknown") return { code: null, signal: null };
  const code = /^code (0|[1-9]\d{0,2})$/.exec(text);
  if (code && Number(code[1]) <= 255) return { code: Number(code[1]), signal: null };
  const signal = /^signal (SIG[A-Z0-9]+)$/.exec(text);
  if (signal) return { code: null, signal: signal[1]! };
  throw bad(`exit status ${JSON.stringify(text)} is not "code N", "signal SIGX" or "unknown"`, line);
}

/**
 * The checks of one log, a row at a time: stamps strictly increasing; after
 * the first footer line only footer lines, and a footer ends with exactly
 * one `# exit:` then one `# RESULT:` line. parseLog feeds it whole rows;
 * LogChecker feeds it rows of a log handed over in pieces.
 */
class LogRows {
  lines = 0;
  readonly footer: string[] = [];
  exit: RunExit | null = null;
  result: RunResult | null = null;
  #last = -Infinity;

  constructor(private readonly onLine: ((line: LogLine) => void) | null) {}

  /** One row without its newline; `cut`: only its start was kept (a captured line's text is not needed). */
  row(row: string, number: number, cut = false): void {
    if (row.startsWith("# ")) {
      if (this.result !== null) throw bad("nothing may follow the RESULT line", number);
      this.footer.push(row);
      if (row.startsWith("# exit: ")) {
        if (this.exit !== null) throw bad("a second exit line", number);
        this.exit = parseExit(row.slice("# exit: ".length), number);
      } else if (row.startsWith("# RESULT: ")) {
        const word = row.slice("# RESULT: ".length);
        if (!(RESULTS as readonly string[]).includes(word)) throw bad(`unknown result ${JSON.stringify(word)}`, number);
        if (this.exit === null) throw bad("RESULT before exit", number);
        this.result = word as RunResult;
      } else if (!row.startsWith("# note: ") || this.exit !== null) {
        throw bad(`unexpected footer line ${JSON.stringify(row.slice(0, 80))}`, number);
      }
      return;
    }
    if (this.footer.length > 0) throw bad("a captured line after the footer", number);
    const first = row.indexOf(" ");
    const second = first < 0 ? -1 : row.indexOf(" ", first + 1);
    if (second < 0)
      throw bad(cut ? "no stamp and stream where a line starts" : "not `<stamp> <stream> <text>`", number);
    const at = row.slice(0, first);
    const stream = row.slice(first + 1, second);
    const micros = parseStamp(at);
    if (Number.isNaN(micros)) throw bad(`bad stamp ${JSON.stringify(at.slice(0, 40))}`, number);
    if (!(STREAMS as readonly string[]).includes(stream))
      throw bad(`bad stream ${JSON.stringify(stream.slice(0, 20))}`, number);
    if (micros <= this.#last) throw bad("stamps are not strictly increasing", number);
    this.#last = micros;
    this.lines += 1;
    this.onLine?.({ at, stream: stream as Stream, text: row.slice(second + 1) });
  }

  finish(rows: number): void {
    if (this.footer.length > 0 && this.result === null) throw bad("the footer has no RESULT line", rows);
  }
}

/**
 * Parse a whole log (LogRows says what is checked). A log without a
 * trailing newline (torn by a crash) is refused here; sealInterruptedRun
 * trims it first.
 */
export function parseLog(text: string): ParsedLog {
  if (text.length > 0 && !text.endsWith("\n"))
    throw bad("the log does not end with a newline (a torn write)", text.split("\n").length);
  const rows = text.length === 0 ? [] : text.slice(0, -1).split("\n");
  const lines: LogLine[] = [];
  const parser = new LogRows((line) => lines.push(line));
  rows.forEach((row, index) => {
    parser.row(row, index + 1);
  });
  parser.finish(rows.length);
  return { lines, footer: parser.footer, exit: parser.exit, result: parser.result };
}

/** What LogChecker says of a log: parseLog's findings without the lines' text. */
export interface CheckedLog {
  readonly lines: number;
  readonly footer: string[];
  readonly exit: RunExit | null;
  readonly result: RunResult | null;
}

/**
 * A log's bytes checked as parseLog checks them, handed over in pieces of
 * any size and never held: of each captured line only its first
 * LINE_HEAD_BYTES are kept (its stamp and stream; the text is not checked),
 * and a footer line, which is read whole, may be at most FOOTER_LINE_LIMIT
 * bytes (oats writes footers of a few dozen). A newline byte never occurs
 * inside a UTF-8 sequence, so rows split on bytes are the rows parseLog
 * splits the decoded text into. The first refusal is kept, not thrown, so
 * that a caller hashing the same pieces can say first that the bytes are
 * not the ones it expected; `result` throws it.
 */
export class LogChecker {
  static readonly LINE_HEAD_BYTES = 64;
  static readonly FOOTER_LINE_LIMIT = 64 * 1024;
  readonly #rows = new LogRows(null);
  readonly #head = Buffer.allocUnsafe(LogChecker.FOOTER_LINE_LIMIT);
  #kept = 0;
  #rowBytes = 0;
  #number = 0;
  #error: unknown = null;

  update(piece: Buffer): void {
    if (this.#error !== null) return;
    try {
      for (let start = 0; start < piece.length; ) {
        const newline = piece.indexOf(0x0a, start);
        const end = newline < 0 ? piece.length : newline;
        this.#take(piece, start, end);
        if (newline < 0) break;
        this.#endRow();
        start = newline + 1;
      }
    } catch (error) {
      this.#error = error;
    }
  }

  #take(piece: Buffer, start: number, end: number): void {
    const room = this.#head.length - this.#kept;
    if (room > 0 && end > start) this.#kept += piece.copy(this.#head, this.#kept, start, Math.min(end, start + room));
    this.#rowBytes += end - start;
  }

  #endRow(): void {
    this.#number += 1;
    const footer = this.#kept >= 2 && this.#head[0] === 0x23 && this.#head[1] === 0x20;
    if (footer && this.#rowBytes > this.#head.length)
      throw bad(`a footer line longer than ${LogChecker.FOOTER_LINE_LIMIT} bytes`, this.#number);
    const kept = footer ? this.#kept : Math.min(this.#kept, LogChecker.LINE_HEAD_BYTES);
    this.#rows.row(this.#head.toString("utf8", 0, kept), this.#number, kept < this.#rowBytes);
    this.#kept = 0;
    this.#rowBytes = 0;
  }

  /** The findings once every piece is in; the first refusal of the log, if there was one. */
  result(): CheckedLog {
    if (this.#error !== null) throw this.#error;
    if (this.#rowBytes > 0) throw bad("the log does not end with a newline (a torn write)", this.#number + 1);
    this.#rows.finish(this.#number);
    const rows = this.#rows;
    return { lines: rows.lines, footer: rows.footer, exit: rows.exit, result: rows.result };
  }
}

/** Where the footer starts: the first line that starts with `# ` (a captured line starts with its stamp); the log's
 * length when there is none. */
export function footerOffset(log: Buffer): number {
  if (log.length >= 2 && log[0] === 0x23 && log[1] === 0x20) return 0;
  const at = log.indexOf("\n# ");
  return at < 0 ? log.length : at + 1;
}
