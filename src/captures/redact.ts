import { createContext, Script } from "node:vm";
import { OatsError } from "../core/index.js";
import { PatternRefusal, analysePattern, type RedactPattern } from "./redact-pattern.js";
import { createMaskingStream, type MaskingStream } from "./redact-stream.js";

/**
 * Redaction of captured log lines (the conformance property `redaction`). The specification
 * is the corpus test/conformance/redaction-corpus.json; this module is one
 * implementation of it.
 *
 * Rules:
 * - literal: the value of a credential the record names, rule name
 *   `credential:<ENV_NAME>`, matched exactly (case-sensitive), every
 *   occurrence, overlapping ones included;
 * - pattern: a capture profile pattern, rule name `profile:<name>`, matched
 *   as a global regular expression with the profile's flags.
 * A match is replaced by `[REDACTED:<rule name>]`. All matches are found on
 * the original line first, so a mask is never matched again. Overlapping
 * matches are merged into one masked span (no fragment of either stays
 * visible) named after the longest of them (the earlier rule on a tie).
 * Empty matches mask nothing.
 *
 * A credential value shorter than MIN_CREDENTIAL_LENGTH characters, or one
 * with a line break or another control character (the log is split into
 * lines and stripped of escapes before redaction, so such a value could
 * never match whole), is refused: it cannot be masked without masking
 * ordinary text, or cannot be masked at all.
 *
 * Work per line is bounded: a pattern whose estimated backtracking on the
 * line is small runs directly; otherwise the line's pattern rules run in a
 * separate V8 context with a time budget (LINE_BUDGET_MS). A line whose
 * budget runs out is masked whole, named after the rule that was running:
 * fail closed, never a partly redacted line.
 */

export const MIN_CREDENTIAL_LENGTH = 4;
export const LINE_BUDGET_MS = 100;
/** Estimated backtracking steps below which a pattern runs without a time budget. */
const DIRECT_STEPS = 1_000_000;

export type RedactionRule =
  | { readonly name: string; readonly kind: "literal"; readonly value: string }
  | { readonly name: string; readonly kind: "pattern"; readonly source: string; readonly flags?: string };

export interface RedactionStatementEntry {
  readonly rule: string;
  readonly count: number;
}

export interface Redactor {
  apply(text: string): string;
  /**
   * False only when apply would mask nothing in any line of `text` (lines
   * joined by newlines): no pattern rule, and no credential value occurs in
   * it (a value has no line break, so it cannot span lines).
   */
  mayMatch(text: string): boolean;
  /** Every rule, in the order given, with the number of masks it wrote so far (0 included). */
  statement(): RedactionStatementEntry[];
  /**
   * Whether the rules hold profile patterns. A pattern is matched against a
   * whole line (or, on a line cut into pieces, against a window around each
   * cut), so the beginning of a line is decided only when its end, or the
   * window after it, has been read.
   */
  readonly hasPatterns: boolean;
  /**
   * A stream that masks one logical line fed to it in parts, with the rules
   * of this redactor (redact-stream.ts): a line cut at the line bound, or a
   * line shown before it ends. `counting`: its masks count in statement();
   * `window` and `context`: how far a pattern's scan looks past a piece and
   * before it.
   */
  stream(options: { counting: boolean; window: number; context: number }): MaskingStream;
}

/** Why a credential value cannot be masked, or null when it can. */
export function credentialValueProblem(value: string): string | null {
  if ([...value].length < MIN_CREDENTIAL_LENGTH)
    return `shorter than ${MIN_CREDENTIAL_LENGTH} characters: masking it would mask ordinary text`;
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000a-\u001f\u007f-\u009f]/.test(value))
    return "it contains a line break or a control character: a line log could never match it whole";
  return null;
}

/** The rules for a run: one per provided credential (sorted by name), then the profile's patterns in order. */
export function redactionRules(
  credentials: Readonly<Record<string, string>>,
  patterns: readonly RedactPattern[] = [],
): RedactionRule[] {
  return [
    ...Object.keys(credentials)
      .sort()
      .map((name) => ({ name: `credential:${name}`, kind: "literal" as const, value: credentials[name]! })),
    ...patterns.map((pattern) => ({
      name: `profile:${pattern.name}`,
      kind: "pattern" as const,
      source: pattern.pattern,
      ...(pattern.flags === undefined ? {} : { flags: pattern.flags }),
    })),
  ];
}

interface CompiledPattern {
  readonly index: number;
  readonly regexp: RegExp;
  readonly ranges: readonly number[];
  readonly maxLength: number;
}

export interface Match {
  start: number;
  end: number;
  rule: number;
  /** The length the span is named by, when it is not end - start (a match clipped or carried by a stream). */
  longest?: number;
}

/** A credential value with its KMP failure table (the longest proper prefix of value[0..i] that is also a suffix). */
export interface LiteralRule {
  readonly index: number;
  readonly value: string;
  readonly fail: Uint32Array;
}

/**
 * What a redactor's line streams need of it (redact-stream.ts): its masks,
 * its credential values, the matches its rules find in a text, and its
 * counts.
 */
export interface RedactionEngine {
  readonly masks: readonly string[];
  readonly literals: readonly LiteralRule[];
  readonly hasPatterns: boolean;
  /** The longest text a match of a bounded pattern can read (its longest match and one character), 0 when none. */
  readonly boundedReach: number;
  /** Every occurrence of every credential value in `text` at `from` or later, overlapping ones included. */
  literalMatches(text: string, into: Match[], from?: number): void;
  /**
   * Every match of every pattern in `text` that begins at `from` or later (what is before it is seen by lookbehinds
   * and \b, never by `^`); the rule whose budget ran out (nothing added), or null.
   */
  patternMatches(text: string, into: Match[], from?: number): number | null;
  count(rule: number): void;
}

function failTable(value: string): Uint32Array {
  const fail = new Uint32Array(value.length);
  let k = 0;
  for (let i = 1; i < value.length; i += 1) {
    while (k > 0 && value[i] !== value[k]) k = fail[k - 1]!;
    if (value[i] === value[k]) k += 1;
    fail[i] = k;
  }
  return fail;
}

function refuse(rule: string, reason: string, details: Record<string, unknown> = {}): OatsError {
  // Never the value: the refusal is audited.
  return new OatsError("invalid-input", `redaction rule ${rule} is refused: ${reason}`, { rule, reason, ...details });
}

function validateRules(rules: readonly RedactionRule[]): {
  literals: LiteralRule[];
  patterns: CompiledPattern[];
} {
  const literals: LiteralRule[] = [];
  const patterns: CompiledPattern[] = [];
  const names = new Set<string>();
  rules.forEach((rule, index) => {
    if (names.has(rule.name)) throw refuse(rule.name, "the rule is given twice");
    names.add(rule.name);
    if (rule.kind === "literal") {
      if (!rule.name.startsWith("credential:")) throw refuse(rule.name, "a literal rule is named credential:<NAME>");
      const problem = credentialValueProblem(rule.value);
      if (problem !== null) throw refuse(rule.name, `its value is ${problem}`, { minLength: MIN_CREDENTIAL_LENGTH });
      literals.push({ index, value: rule.value, fail: failTable(rule.value) });
    } else {
      if (!rule.name.startsWith("profile:")) throw refuse(rule.name, "a pattern rule is named profile:<name>");
      try {
        const { ranges, maxLength } = analysePattern(rule.source, rule.flags ?? "");
        patterns.push({ index, regexp: new RegExp(rule.source, `${rule.flags ?? ""}g`), ranges, maxLength });
      } catch (error) {
        if (error instanceof PatternRefusal) throw refuse(rule.name, error.message);
        throw error;
      }
    }
  });
  return { literals, patterns };
}

/** Upper estimate of the backtracking steps of a star-height-1 pattern on a text of this length. */
function estimatedSteps(ranges: readonly number[], length: number): number {
  let steps = Math.max(length, 1);
  for (const range of ranges) steps *= Math.min(range, length) + 1;
  return steps;
}

/** The longest line on which every pattern's estimate stays under DIRECT_STEPS (computed once per redactor). */
function directLimit(patterns: readonly CompiledPattern[]): number {
  let low = 0;
  let high = 1 << 24;
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (patterns.every((pattern) => estimatedSteps(pattern.ranges, middle) <= DIRECT_STEPS)) low = middle;
    else high = middle - 1;
  }
  return low;
}

function patternMatches(regexp: RegExp, text: string, rule: number, into: Match[], from = 0): void {
  regexp.lastIndex = from;
  for (let match = regexp.exec(text); match !== null; match = regexp.exec(text)) {
    if (match[0].length === 0) {
      regexp.lastIndex += 1;
      continue;
    }
    into.push({ start: match.index, end: match.index + match[0].length, rule });
  }
}

/**
 * The budgeted runner: one V8 context per redactor holding the compiled
 * patterns; `done` tells which rule was running when the budget ran out.
 */
function budgetedRunner(patterns: readonly CompiledPattern[]) {
  const context = createContext({
    patterns: patterns.map((pattern) => ({ source: pattern.regexp.source, flags: pattern.regexp.flags })),
    text: "",
    from: 0,
    found: [] as number[][],
    done: 0,
  });
  new Script("patterns = patterns.map((p) => new RegExp(p.source, p.flags));").runInContext(context);
  const script = new Script(`
    found = []; done = 0;
    for (const regexp of patterns) {
      const spans = [];
      regexp.lastIndex = from;
      for (let m = regexp.exec(text); m !== null; m = regexp.exec(text)) {
        if (m[0].length === 0) { regexp.lastIndex += 1; continue; }
        spans.push(m.index, m.index + m[0].length);
      }
      found.push(spans);
      done += 1;
    }`);
  return (text: string, into: Match[], from = 0): { exhausted: number | null } => {
    context["text"] = text;
    context["from"] = from;
    let timedOut = false;
    try {
      script.runInContext(context, { timeout: LINE_BUDGET_MS });
    } catch (error) {
      if ((error as { code?: string }).code !== "ERR_SCRIPT_EXECUTION_TIMEOUT") throw error;
      timedOut = true;
    }
    return budgetedOutcome(patterns, timedOut, context["done"] as number, context["found"] as number[][], into);
  };
}

/**
 * What one budgeted run found. The watchdog can fire after the last rule has
 * already finished (the script is then only returning): every rule's spans
 * are complete, so that is a finished run, not an exhausted budget.
 */
export function budgetedOutcome(
  patterns: readonly { index: number }[],
  timedOut: boolean,
  done: number,
  found: readonly number[][],
  into: Match[],
): { exhausted: number | null } {
  if (timedOut && done < patterns.length) return { exhausted: patterns[done]!.index };
  found.forEach((spans, position) => {
    for (let at = 0; at < spans.length; at += 2)
      into.push({ start: spans[at]!, end: spans[at + 1]!, rule: patterns[position]!.index });
  });
  return { exhausted: null };
}

/** Merge overlapping matches; each merged span is named after its longest match (the earlier rule on a tie). */
export function mergeSpans(matches: Match[]): Match[] {
  matches.sort((a, b) => a.start - b.start || b.end - a.end || a.rule - b.rule);
  const merged: Array<Match & { longest: number }> = [];
  for (const match of matches) {
    const last = merged[merged.length - 1];
    const length = match.longest ?? match.end - match.start;
    if (last !== undefined && match.start < last.end) {
      if (length > last.longest || (length === last.longest && match.rule < last.rule)) {
        last.rule = match.rule;
        last.longest = length;
      }
      last.end = Math.max(last.end, match.end);
    } else {
      merged.push({ ...match, longest: length });
    }
  }
  return merged;
}

export function createRedactor(rules: readonly RedactionRule[]): Redactor {
  const { literals, patterns } = validateRules(rules);
  const counts = rules.map(() => 0);
  const masks = rules.map((rule) => `[REDACTED:${rule.name}]`);
  let budgeted: ReturnType<typeof budgetedRunner> | null = null;
  const direct = directLimit(patterns);
  const engine: RedactionEngine = {
    masks,
    literals,
    hasPatterns: patterns.length > 0,
    boundedReach: Math.max(0, ...patterns.filter((p) => Number.isFinite(p.maxLength)).map((p) => p.maxLength + 1)),
    literalMatches(text, into, from = 0) {
      for (const { index, value } of literals) {
        for (let at = text.indexOf(value, from); at !== -1; at = text.indexOf(value, at + 1))
          into.push({ start: at, end: at + value.length, rule: index });
      }
    },
    patternMatches(text, into, from = 0) {
      if (patterns.length === 0) return null;
      if (text.length <= direct) {
        for (const pattern of patterns) patternMatches(pattern.regexp, text, pattern.index, into, from);
        return null;
      }
      budgeted ??= budgetedRunner(patterns);
      return budgeted(text, into, from).exhausted;
    },
    count(rule) {
      counts[rule]! += 1;
    },
  };
  return {
    hasPatterns: engine.hasPatterns,
    mayMatch(text: string): boolean {
      if (patterns.length > 0) return true;
      for (const { value } of literals) if (text.includes(value)) return true;
      return false;
    },
    apply(text: string): string {
      if (rules.length === 0) return text;
      const matches: Match[] = [];
      engine.literalMatches(text, matches);
      const exhausted = engine.patternMatches(text, matches);
      if (exhausted !== null) {
        counts[exhausted]! += 1;
        return masks[exhausted]!;
      }
      if (matches.length === 0) return text;
      let out = "";
      let at = 0;
      for (const span of mergeSpans(matches)) {
        out += text.slice(at, span.start) + masks[span.rule];
        counts[span.rule]! += 1;
        at = span.end;
      }
      return out + text.slice(at);
    },
    statement(): RedactionStatementEntry[] {
      return rules.map((rule, index) => ({ rule: rule.name, count: counts[index]! }));
    },
    stream: (options) => createMaskingStream(engine, options),
  };
}
