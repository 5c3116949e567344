import { StringDecoder } from "node:string_decoder";
import type { MaskingStream } from "../captures/index.js";
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
 * maxLineChars is cut into pieces of about that size, each stamped when cut;
 * `split` counts the cuts so the footer can say so.
 *
 * Masking happens here, before a line is emitted ("Cutting and masking"):
 * a line within the bound is masked whole; a longer line goes through the
 * redactor's stream, which cuts it only where the masking is decided, so a
 * credential or a pattern match is never split between two pieces. The
 * live echo, when given, gets the same masked text: each line as it is
 * emitted, the pieces of a cut line as they are cut, and (without pattern
 * rules) the decided beginning of a line that has not ended yet.
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

/** What LineCapture needs of a redactor; a run's Redactor (run-log.ts, from createRedactor) has all of it. */
export interface LineMasker {
  apply(text: string): string;
  /** False only when apply would change no line of `text` (lines joined by newlines). */
  mayMatch?(text: string): boolean;
  /** Whether the rules hold profile patterns (a partial line is then never shown before it ends). */
  readonly hasPatterns?: boolean;
  /** A stream that masks one logical line fed in parts; without it, a long line is cut plainly and each piece masked
   * alone (and a partial line is never shown). */
  stream?(options: { counting: boolean; window: number; context: number }): MaskingStream;
}

export interface CaptureOptions {
  /** Masks every line before it is emitted (default: none). */
  readonly redactor?: LineMasker;
  /**
   * The live echo: the masked text of the stream as it is decided (lines
   * with their newline, the pieces of a cut line joined, the decided
   * beginning of an unfinished line, a carriage return where the child
   * started its line over). Never the raw bytes.
   */
  readonly echo?: (text: string) => void;
}

/** A line is shown before it ends only while it holds no byte that needs cleaning but carriage returns. */
const STOPS_PREVIEW = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x9b\x9d]/;

/** A long line's pieces without a redactor's stream: cut at the limit, masked one by one afterwards. */
class PlainStream implements MaskingStream {
  private held = "";
  push(text: string): void {
    this.held += text;
  }
  take(limit: number, minimum: number, final: boolean): string | null {
    if (this.held.length === 0 || (!final && this.held.length < minimum)) return null;
    const piece = this.held.slice(0, limit);
    this.held = this.held.slice(piece.length);
    return piece;
  }
}

/** The texts of one chunk, in order, and what the echo shows of them. */
interface Batch {
  readonly texts: string[];
  /** Indexes (ascending) of texts a redactor's stream has masked already. */
  readonly masked: number[];
  readonly echo: EchoStep[] | null;
}

type EchoStep =
  /** A text of the batch, once masked; `ends`: its line ends with it. */
  | { readonly index: number; readonly ends: boolean }
  /** A line whose last piece was emitted before: only its end. */
  | { readonly end: true }
  /** The decided beginning of the unfinished line. */
  | { readonly preview: string }
  /** The child started its unfinished line over (a carriage return). */
  | { readonly restart: true };

export class LineCapture {
  private readonly decoder = new StringDecoder("utf8");
  /** The raw text of the current line not yet emitted (or, once the line is long, not yet cut). */
  private pending = "";
  private ended = false;
  /** Cuts: a line of n pieces counts n - 1. */
  split = 0;
  /** Texts emitted (lines and pieces). */
  count = 0;
  private readonly redactor: LineMasker | null;
  private readonly echo: ((text: string) => void) | null;
  /** Whether a partial line may be shown: an echo, and a redactor with a stream and without pattern rules. */
  private readonly previewable: boolean;
  /** The current line's masking stream, once it is longer than the bound. */
  private long: MaskingStream | null = null;
  /** Pieces of the current long line emitted so far. */
  private pieces = 0;
  // The echo's view of the current unfinished line while it is within the bound: a stream of its own (not counted)
  // for the text since the line's last carriage return; off once a byte needs cleaning or the line is long.
  private preview: MaskingStream | null = null;
  private previewing: boolean;
  /** A carriage return ended the last chunk: a new start of the line, or the `\r` of `\r\n`. */
  private crHeld = false;
  // What the echo showed of the current line, as the steps are written: the text shown ahead of the emitted text,
  // and whether anything of the line was shown.
  private lag = "";
  private shown = false;

  constructor(
    private readonly stream: Stream,
    private readonly clock: StampClock,
    private readonly emit: (line: LogLine) => void,
    private readonly maxLineChars: number = MAX_LINE_CHARS,
    /** When given, gets each chunk's lines at once instead of emit: the stamp of texts[i] is first + i microseconds. */
    private readonly emitBatch?: (stream: Stream, first: number, texts: readonly string[]) => void,
    options: CaptureOptions = {},
  ) {
    this.redactor = options.redactor ?? null;
    this.echo = options.echo ?? null;
    this.previewable = this.echo !== null && this.redactor?.stream !== undefined && this.redactor.hasPatterns === false;
    this.previewing = this.previewable;
  }

  /** A chunk as it was read: every line it completes is stamped now, in order (one clock reading for the chunk, then
   * +1 us a line). */
  push(chunk: Buffer | string): void {
    if (this.ended) return;
    const text = typeof chunk === "string" ? chunk : this.decoder.write(chunk);
    const batch: Batch = { texts: [], masked: [], echo: this.echo === null ? null : [] };
    let start = 0;
    let newline = text.indexOf("\n");
    if (newline >= 0) {
      this.finish(text.slice(0, newline), batch);
      start = newline + 1;
      // Most chunks are plain text: one scan of the chunk instead of one a line.
      const plain = this.maxLineChars >= text.length && !NEEDS_CLEANING.test(text);
      for (newline = text.indexOf("\n", start); newline >= 0; newline = text.indexOf("\n", start)) {
        if (plain) this.add(batch, text.slice(start, newline), true, false);
        else this.whole(text.slice(start, newline), batch);
        start = newline + 1;
      }
    }
    this.grow(start === 0 ? text : text.slice(start), batch);
    this.out(batch);
  }

  /** End of stream: the final line is kept even without a newline. */
  end(): void {
    if (this.ended) return;
    const rest = this.decoder.end();
    this.ended = true;
    if (this.pending.length === 0 && rest.length === 0 && this.long === null) return;
    const batch: Batch = { texts: [], masked: [], echo: this.echo === null ? null : [] };
    this.finish(rest, batch);
    this.out(batch);
  }

  /** The current line ends with `head`. */
  private finish(head: string, batch: Batch): void {
    const raw = this.pending + head;
    this.pending = "";
    if (this.long !== null) {
      this.feed(this.long, raw);
      this.drain(this.long, true, batch);
      this.long = null;
    } else this.whole(raw, batch);
    this.previewing = this.previewable;
    this.preview = null;
    this.crHeld = false;
  }

  /** A whole line (without its newline); a long one is cut where its masking allows. */
  private whole(raw: string, batch: Batch): void {
    if (raw.length <= this.maxLineChars) {
      this.add(batch, cleanLine(raw), true, false);
      return;
    }
    const stream = this.lineStream();
    this.feed(stream, raw);
    this.drain(stream, true, batch);
  }

  /** The unfinished line grows by `tail`: a long line is cut as far as decided, a short one may be shown. */
  private grow(tail: string, batch: Batch): void {
    this.pending += tail;
    if (this.long === null && this.pending.length > this.maxLineChars) {
      this.long = this.lineStream();
      this.previewing = false;
      this.preview = null;
    }
    if (this.long !== null) {
      // Raw pieces of the bound, each cleaned alone (a line of gigabytes is never held whole).
      while (this.pending.length > this.maxLineChars) {
        this.long.push(cleanLine(this.pending.slice(0, this.maxLineChars)));
        this.pending = this.pending.slice(this.maxLineChars);
      }
      this.drain(this.long, false, batch);
      return;
    }
    if (this.previewing && tail.length > 0) this.show(tail, batch);
  }

  /**
   * A long line's masking stream. A pattern's scan looks half the bound past a piece and a quarter before it: with the
   * piece, under V8's large-object size for one-byte text (64 Ki pieces: 112 Ki characters).
   */
  private lineStream(): MaskingStream {
    return this.redactor?.stream?.({ counting: true, ...this.windows() }) ?? new PlainStream();
  }

  private windows(): { window: number; context: number } {
    return { window: Math.ceil(this.maxLineChars / 2), context: Math.ceil(this.maxLineChars / 4) };
  }

  /** Raw text of a long line into its stream, in pieces of the bound, each cleaned alone. */
  private feed(stream: MaskingStream, raw: string): void {
    for (let at = 0; at < raw.length; at += this.maxLineChars)
      stream.push(cleanLine(raw.slice(at, at + this.maxLineChars)));
  }

  /** Pieces of a long line as far as they are decided; `final`: the line has ended. */
  private drain(stream: MaskingStream, final: boolean, batch: Batch): void {
    const masked = !(stream instanceof PlainStream);
    const before = batch.texts.length;
    const limit = this.maxLineChars;
    for (let piece = stream.take(limit, limit, final); piece !== null; piece = stream.take(limit, limit, final)) {
      if (this.pieces > 0) this.split += 1;
      this.pieces += 1;
      this.add(batch, /[\r\n]/.test(piece) ? piece.replace(/[\r\n]/g, " ") : piece, false, masked);
    }
    if (!final) return;
    // A line that cleaned to nothing is still a line.
    if (this.pieces === 0) this.add(batch, "", false, masked);
    if (batch.echo !== null) {
      const last = batch.echo[batch.echo.length - 1];
      if (batch.texts.length > before && last !== undefined && "index" in last)
        batch.echo[batch.echo.length - 1] = { index: last.index, ends: true };
      else batch.echo.push({ end: true });
    }
    this.pieces = 0;
  }

  private add(batch: Batch, text: string, ends: boolean, masked: boolean): void {
    if (masked) batch.masked.push(batch.texts.length);
    batch.echo?.push({ index: batch.texts.length, ends });
    batch.texts.push(text);
  }

  /**
   * The echo's view of the unfinished line: the new text is masked by a stream of its own, and what is decided is
   * shown. A carriage return starts the line over (shown as one); a byte that needs cleaning stops the view, and the
   * line is shown when it ends.
   */
  private show(tail: string, batch: Batch): void {
    if (STOPS_PREVIEW.test(tail)) {
      this.previewing = false;
      this.preview = null;
      return;
    }
    this.preview ??= this.previewStream();
    let from = 0;
    if (this.crHeld) {
      this.crHeld = false;
      this.restart(batch);
    }
    for (let cr = tail.indexOf("\r"); cr >= 0; cr = tail.indexOf("\r", from)) {
      this.preview.push(tail.slice(from, cr));
      from = cr + 1;
      if (from === tail.length) {
        // `\r` last: the text before it is whole either way; a new start only if more than a newline follows.
        this.crHeld = true;
        this.showDecided(batch, true);
        return;
      }
      this.restart(batch);
    }
    this.preview.push(tail.slice(from));
    this.showDecided(batch, false);
  }

  private previewStream(): MaskingStream {
    return this.redactor!.stream!({ counting: false, ...this.windows() });
  }

  private restart(batch: Batch): void {
    this.showDecided(batch, true);
    batch.echo!.push({ restart: true });
    this.preview = this.previewStream();
  }

  private showDecided(batch: Batch, final: boolean): void {
    const preview = this.preview!;
    for (let piece = preview.take(Infinity, 1, final); piece !== null; piece = preview.take(Infinity, 1, final))
      if (piece.length > 0) batch.echo!.push({ preview: piece });
  }

  /** The chunk's lines, masked and stamped now: a batch sink gets them at once, a line sink one by one; then the
   * echo. */
  private out(batch: Batch): void {
    const { texts } = batch;
    if (texts.length > 0) {
      this.mask(batch);
      const first = this.clock.reserve(texts.length);
      this.count += texts.length;
      if (this.emitBatch !== undefined) this.emitBatch(this.stream, first, texts);
      else
        for (let index = 0; index < texts.length; index += 1)
          this.emit({ at: formatStamp(first + index), stream: this.stream, text: texts[index]! });
    }
    if (this.echo !== null && batch.echo !== null && batch.echo.length > 0) this.echo(this.echoText(batch));
  }

  /** Masks the texts no stream masked: one pre-check for the chunk (Redactor.mayMatch), then line by line. */
  private mask(batch: Batch): void {
    const redactor = this.redactor;
    if (redactor === null) return;
    const { texts, masked } = batch;
    if (masked.length === texts.length) return;
    const own = masked.length === 0 ? texts : texts.filter((_, index) => !masked.includes(index));
    if (redactor.mayMatch !== undefined && !redactor.mayMatch(own.join("\n"))) return;
    let next = 0;
    for (let index = 0; index < texts.length; index += 1) {
      if (masked[next] === index) {
        next += 1;
        continue;
      }
      const text = texts[index]!;
      const out = redactor.apply(text);
      // A cleaned line has no CR or LF; only a mask could bring one.
      if (out !== text) texts[index] = out.replace(/[\r\n]/g, " ");
    }
  }

  /**
   * What the echo writes for the batch. Text shown ahead (a preview) is not shown again: an emitted text that begins
   * with it is shown from there on; one that does not (the child started its line over) is shown after a carriage
   * return.
   */
  private echoText(batch: Batch): string {
    let out = "";
    for (const step of batch.echo!) {
      if ("index" in step) {
        const text = batch.texts[step.index]!;
        if (this.lag.length === 0) out += text;
        else if (text.startsWith(this.lag)) out += text.slice(this.lag.length);
        else if (!step.ends && this.lag.startsWith(text)) {
          this.lag = this.lag.slice(text.length);
          continue;
        } else out += `\r${text}`;
        this.lag = "";
        if (step.ends) out += "\n";
        this.shown = !step.ends;
      } else if ("end" in step) {
        out += "\n";
        this.lag = "";
        this.shown = false;
      } else if ("preview" in step) {
        out += step.preview;
        this.lag += step.preview;
        this.shown = true;
      } else {
        if (this.shown) out += "\r";
        this.lag = "";
      }
    }
    return out;
  }
}
