import { mergeSpans, type LiteralRule, type Match, type RedactionEngine } from "./redact.js";

/**
 * Masking one logical line that arrives in parts (docs/design/evidence.md,
 * "Cutting and masking"): a line longer than the line bound, which the log
 * takes in pieces, and a line the live echo shows before it ends. The text
 * is held until its masking is decided, and only what is decided is given
 * out, so no credential and no pattern match is ever given out in two
 * parts.
 *
 * What is decided:
 * - credentials, exactly: every occurrence beginning before the held-back
 *   tail is whole in the text held, the tail being the longest end of the
 *   text read that is a proper prefix of a credential value (KMP), at most
 *   the longest value less one character. The pieces joined are what
 *   masking the whole line gives, counts included;
 * - patterns, within a window: a scan begins where the held text does (a
 *   scan of the whole line passes there, since no span crosses a cut), sees
 *   up to `context` characters before it (lookbehinds, \b), and decides only
 *   what lies `window` characters before the end of its text, so a match
 *   beginning in the decided text is seen whole when it ends within the
 *   text scanned. One that runs to the end of the text scanned may go on:
 *   the rest of the line is masked (fail closed, as for a pattern whose
 *   time budget runs out).
 *
 * Overlapping matches are one span, named after its longest match, as in
 * apply(). A span is never cut: a piece ends before a span that is not yet
 * decided, or after one that is. A span that begins the held text and is
 * not yet decided is carried (its end, its name) while its text is
 * dropped, so a chain of overlapping occurrences as long as the line costs
 * no memory.
 *
 * Memory and cost: the text scanned for a piece is at most `context` +
 * `limit` + `window` characters (the held-back tail instead of the window
 * without patterns), and the stream keeps at most that plus one part read.
 * Each piece is scanned once, plus the window and the context again. The
 * caller keeps that sum under V8's large-object size (128 KiB: a flat
 * string past it costs milliseconds to make), as the line bound does.
 */

export interface MaskingStream {
  /** Appends the next part of the line (cleaned text). */
  push(text: string): void;
  /**
   * The next masked piece, or null when none is decided. A piece covers at
   * most `limit` characters of the line (more when a decided span begins
   * it: a span is never cut), and, unless `final`, at least `minimum`
   * decided ones. `final`: the line has ended, everything is decided.
   */
  take(limit: number, minimum: number, final: boolean): string | null;
}

interface Span extends Match {
  longest: number;
}

/** The length of the longest end of `text` that is a proper prefix of `literal.value` (KMP over its last chars). */
export function heldPrefix(literal: LiteralRule, text: string): number {
  const { value, fail } = literal;
  let k = 0;
  for (let at = Math.max(0, text.length - value.length + 1); at < text.length; at += 1) {
    const char = text[at];
    while (k > 0 && (k === value.length || value[k] !== char)) k = fail[k - 1]!;
    if (value[k] === char) k += 1;
  }
  return k === value.length ? fail[k - 1]! : k;
}

export function createMaskingStream(
  engine: RedactionEngine,
  options: { counting: boolean; window: number; context: number },
): MaskingStream {
  return new Stream(engine, options);
}

class Stream implements MaskingStream {
  /** The line from `start` on, as pushed: up to `context` characters given out already (patterns only), then the
   * held text. */
  private parts: string[] = [];
  private length = 0;
  /** Where `parts` begins in the line. */
  private start = 0;
  /** Where the held text (not given out) begins in the line. */
  private base = 0;
  /** The last characters read (as many as the longest credential value less one), for the held-back tail. */
  private tail = "";
  private readonly keep: number;
  /** What a decision looks past the piece: the window (patterns), or the longest value less one. */
  private readonly ahead: number;
  private readonly counting: boolean;
  private readonly context: number;
  /** A span that begins before `base` and whose end is not decided; its mask is not given out yet. */
  private open: { end: number; rule: number; longest: number } | null = null;
  /** The rest of the line is masked (a pattern match longer than the text scanned); its mask was given out. */
  private swallowing = false;

  constructor(
    private readonly engine: RedactionEngine,
    options: { counting: boolean; window: number; context: number },
  ) {
    this.counting = options.counting;
    this.keep = Math.max(0, ...engine.literals.map((literal) => literal.value.length - 1));
    // A bounded pattern whose match can read further than the window widens it: such a match is never cut.
    this.ahead = engine.hasPatterns ? Math.max(options.window, this.keep, engine.boundedReach) : this.keep;
    this.context = engine.hasPatterns ? options.context : 0;
  }

  push(text: string): void {
    if (this.swallowing || text.length === 0) return;
    this.parts.push(text);
    this.length += text.length;
    if (this.keep > 0)
      this.tail = text.length >= this.keep ? text.slice(-this.keep) : (this.tail + text).slice(-this.keep);
  }

  take(limit: number, minimum: number, final: boolean): string | null {
    const end = this.start + this.length;
    if (this.swallowing || end === this.base) return null;
    if (!final && end - this.base < minimum) return null;
    // The text a decision looks at: the piece and what lies ahead of it, no more.
    const view = Math.min(end, this.base + limit + this.ahead);
    const whole = view === end;
    const known = whole ? (final ? end : this.horizon(end)) : view - this.ahead;
    if (!final && known - this.base < Math.max(minimum, 1)) return null;
    const edge = Math.min(this.base + limit, known);
    const text = this.range(this.start, view);
    const { spans, exhausted } = this.spans(text, known, final && whole);
    if (exhausted !== null) {
      // Fail closed: the piece is masked whole, named after the rule whose budget ran out.
      this.count(exhausted);
      this.advance(edge);
      return this.engine.masks[exhausted]!;
    }
    let cut = edge;
    for (const span of spans) {
      if (span.start >= edge) break;
      if (span.end <= edge) continue;
      // The span crosses the edge: end the piece before it, or after it when it begins the piece.
      if (span.start > this.base) cut = span.start;
      else if (span.end !== Infinity && span.end <= known) cut = span.end;
      else if (span.end === Infinity) {
        this.swallowing = true;
        this.parts = [];
        this.length = 0;
        this.start = this.base = end;
        this.open = null;
        this.count(span.rule);
        return this.engine.masks[span.rule]!;
      } else {
        // Not decided and at the start: carry it, and drop the text it covers up to what is decided.
        this.open = { end: span.end, rule: span.rule, longest: span.longest };
        this.advance(known);
        return this.take(limit, minimum, final);
      }
      break;
    }
    let out = "";
    let at = this.base;
    for (const span of spans) {
      if (span.start >= cut) break;
      out += text.slice(at - this.start, span.start - this.start) + this.engine.masks[span.rule];
      this.count(span.rule);
      at = span.end;
    }
    out += text.slice(at - this.start, cut - this.start);
    this.advance(cut);
    return out;
  }

  /** Where the decided text ends when the whole text read is looked at: before the held-back tail (credentials) and
   * the window (patterns). */
  private horizon(end: number): number {
    let hold = 0;
    // The tail can reach before `base` only where nothing could begin a value: what was given out was decided.
    for (const literal of this.engine.literals) hold = Math.max(hold, heldPrefix(literal, this.tail));
    return this.engine.hasPatterns ? Math.min(end - hold, end - this.ahead) : end - hold;
  }

  /** The line's text from `from` to `to` (absolute), one flat string. */
  private range(from: number, to: number): string {
    let at = this.start;
    const pieces: string[] = [];
    for (const part of this.parts) {
      const next = at + part.length;
      if (next > from && at < to) pieces.push(part.slice(Math.max(from - at, 0), Math.min(to, next) - at));
      if (next >= to) break;
      at = next;
    }
    return pieces.length === 1 ? pieces[0]! : pieces.join("");
  }

  /** The merged spans of the matches in `text` (from `start`) that begin in the held text before `known`, the
   * carried span first. `whole`: the text ends where the line does. */
  private spans(text: string, known: number, whole: boolean): { spans: Span[]; exhausted: number | null } {
    const from = this.base - this.start;
    const literals: Match[] = [];
    this.engine.literalMatches(text, literals, from);
    const patterns: Match[] = [];
    const exhausted = this.engine.hasPatterns ? this.engine.patternMatches(text, patterns, from) : null;
    if (exhausted !== null) return { spans: [], exhausted };
    const matches: Match[] = [];
    for (const match of literals) {
      const start = match.start + this.start;
      if (start < known) matches.push({ start, end: match.end + this.start, rule: match.rule });
    }
    for (const match of patterns) {
      const start = match.start + this.start;
      if (start >= known) continue;
      // A match that runs to the end of the text scanned may go on: it masks the rest of the line.
      const truncated = !whole && match.end === text.length;
      matches.push({
        start,
        end: truncated ? Infinity : match.end + this.start,
        rule: match.rule,
        longest: truncated ? Infinity : match.end - match.start,
      });
    }
    if (this.open !== null) matches.push({ start: this.base, ...this.open });
    return { spans: mergeSpans(matches) as Span[], exhausted: null };
  }

  /** The held text now begins at `to`; what lies more than `context` before it is dropped. */
  private advance(to: number): void {
    this.base = to;
    const start = Math.max(this.start, to - this.context);
    let drop = start - this.start;
    while (drop > 0 && this.parts.length > 0) {
      const first = this.parts[0]!;
      if (first.length <= drop) {
        this.parts.shift();
        drop -= first.length;
        this.length -= first.length;
      } else {
        this.parts[0] = first.slice(drop);
        this.length -= drop;
        drop = 0;
      }
    }
    this.start = start;
    if (this.open !== null && this.open.end <= to) this.open = null;
  }

  private count(rule: number): void {
    if (this.counting) this.engine.count(rule);
  }
}
