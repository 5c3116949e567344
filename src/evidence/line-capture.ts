import { StringDecoder } from "node:string_decoder";
import { formatStamp, type LogLine, type Stream } from "./log-format.js";

/**
 * Bytes of a child's stdout or stderr to log lines (docs/design/evidence.md,
 * "Capturing lines"). A line is stamped when the chunk that completes it is
 * read (push), never when anything is flushed; one StampClock is shared by
 * both streams of a run, so stamps are strictly increasing across them.
 *
 * Text, not a terminal: UTF-8 is decoded (invalid bytes become U+FFFD, a
 * character split across chunks is joined), ANSI CSI/OSC and other escape
 * sequences are removed, the text after the last carriage return of a line
 * wins (`\r\n` is a newline), and other C0 controls but tab are dropped. A
 * final line without a newline is kept by end(). A line longer than
 * maxLineChars is cut into pieces of that size, each stamped when cut;
 * `split` counts them so the footer can say so.
 */

export const MAX_LINE_CHARS = 64 * 1024;

export interface StampClock {
  /** The next stamp: now, or one microsecond after the previous stamp if now is not later. */
  next(): string;
  /** Microseconds since the epoch of the last stamp handed out (0 before the first). */
  last(): number;
  /**
   * `count` consecutive stamps taken now, as microseconds: the first is now
   * (or one after the previous stamp), the others follow it by 1 us each.
   * One clock reading for a whole chunk's lines.
   */
  reserve(count: number): number;
}

/** A monotonic clock anchored to the wall clock once, when it is created (both sources injectable, for tests of
 * collisions). */
export function createStampClock(
  now: () => number = Date.now,
  hrtime: () => bigint = process.hrtime.bigint,
): StampClock {
  const wall = now() * 1000;
  const origin = hrtime();
  let previous = 0;
  const reserve = (count: number): number => {
    const elapsed = Number((hrtime() - origin) / 1000n);
    let micros = Math.floor(wall + elapsed);
    if (micros <= previous) micros = previous + 1;
    previous = micros + Math.max(count, 1) - 1;
    return micros;
  };
  return {
    next: () => formatStamp(reserve(1)),
    last: () => previous,
    reserve,
  };
}

const ESCAPES = new RegExp(
  [
    String.raw`\x1b\[[0-?]*[ -/]*[@-~]`, // CSI: ESC [ parameters, intermediates, final
    String.raw`\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?`, // OSC: ESC ] ... BEL or ESC \
    String.raw`\x1b[PX^_][^\x1b]*(?:\x1b\\)?`, // DCS, SOS, PM, APC strings
    String.raw`\x1b[ -/]*[0-~]`, // other ESC sequences (charset, keypad)
    String.raw`\x9b[0-?]*[ -/]*[@-~]`, // 8-bit CSI
    String.raw`\x9d[^\x07\x1b]*(?:\x07|\x1b\\)?`, // 8-bit OSC
  ].join("|"),
  "g",
);
const CONTROLS = /[\x00-\x08\x0b-\x1f\x7f]/g;

const NEEDS_CLEANING = /[\x00-\x08\x0b-\x1f\x7f\x9b\x9d]/;

/** One raw line (without its newline) as it is logged. */
export function cleanLine(raw: string): string {
  // Most lines are plain text: one scan instead of three replaces.
  if (!NEEDS_CLEANING.test(raw)) return raw;
  let text = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
  text = text.replace(ESCAPES, "");
  const cr = text.lastIndexOf("\r");
  if (cr >= 0) text = text.slice(cr + 1);
  return text.replace(CONTROLS, "");
}

export class LineCapture {
  private readonly decoder = new StringDecoder("utf8");
  private pending = "";
  private ended = false;
  /** Lines cut because they were longer than maxLineChars. */
  split = 0;
  /** Complete lines emitted. */
  count = 0;

  constructor(
    private readonly stream: Stream,
    private readonly clock: StampClock,
    private readonly emit: (line: LogLine) => void,
    private readonly maxLineChars: number = MAX_LINE_CHARS,
    /** When given, gets each chunk's lines at once instead of emit: the stamp of texts[i] is first + i microseconds. */
    private readonly emitBatch?: (stream: Stream, first: number, texts: readonly string[]) => void,
  ) {}

  /** A chunk as it was read: every line it completes is stamped now, in order (one clock reading for the chunk, then
   * +1 us a line). */
  push(chunk: Buffer | string): void {
    if (this.ended) return;
    const text = typeof chunk === "string" ? chunk : this.decoder.write(chunk);
    const texts: string[] = [];
    let start = 0;
    let newline = text.indexOf("\n");
    if (newline >= 0) {
      this.line(this.pending + text.slice(0, newline), texts);
      this.pending = "";
      start = newline + 1;
      // Most chunks are plain text: one scan of the chunk instead of one a line.
      const plain = this.maxLineChars >= text.length && !NEEDS_CLEANING.test(text);
      for (newline = text.indexOf("\n", start); newline >= 0; newline = text.indexOf("\n", start)) {
        if (plain) texts.push(text.slice(start, newline));
        else this.line(text.slice(start, newline), texts);
        start = newline + 1;
      }
    }
    this.pending += start === 0 ? text : text.slice(start);
    while (this.pending.length > this.maxLineChars) {
      const piece = this.pending.slice(0, this.maxLineChars);
      this.pending = this.pending.slice(this.maxLineChars);
      this.split += 1;
      texts.push(cleanLine(piece));
    }
    this.out(texts);
  }

  /** End of stream: the final line is kept even without a newline. */
  end(): void {
    if (this.ended) return;
    const rest = this.pending + this.decoder.end();
    this.pending = "";
    this.ended = true;
    if (rest.length > 0) {
      const texts: string[] = [];
      this.line(rest, texts);
      this.out(texts);
    }
  }

  private line(raw: string, into: string[]): void {
    if (raw.length > this.maxLineChars) {
      // A long line that arrived within one chunk: cut it the same way.
      for (let at = 0; at < raw.length; at += this.maxLineChars) {
        if (at + this.maxLineChars < raw.length) this.split += 1;
        into.push(cleanLine(raw.slice(at, at + this.maxLineChars)));
      }
      return;
    }
    into.push(cleanLine(raw));
  }

  /** The chunk's lines, stamped now: a batch sink gets them at once, a line sink one by one. */
  private out(texts: string[]): void {
    if (texts.length === 0) return;
    const first = this.clock.reserve(texts.length);
    this.count += texts.length;
    if (this.emitBatch !== undefined) {
      this.emitBatch(this.stream, first, texts);
      return;
    }
    for (let index = 0; index < texts.length; index += 1)
      this.emit({ at: formatStamp(first + index), stream: this.stream, text: texts[index]! });
  }
}
