import { createContext, Script } from "node:vm";
import { OatsError } from "../core/index.js";
import { PatternRefusal, analysePattern, type RedactPattern } from "./redact-pattern.js";

/**
 * Redaction of captured log lines (issue 11, property 7). The specification
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
}

export interface Match {
  start: number;
  end: number;
  rule: number;
}

function refuse(rule: string, reason: string, details: Record<string, unknown> = {}): OatsError {
  // Never the value: the refusal is audited.
  return new OatsError("invalid-input", `redaction rule ${rule} is refused: ${reason}`, { rule, reason, ...details });
}

function validateRules(rules: readonly RedactionRule[]): {
  literals: Array<{ index: number; value: string }>;
  patterns: CompiledPattern[];
} {
  const literals: Array<{ index: number; value: string }> = [];
  const patterns: CompiledPattern[] = [];
  const names = new Set<string>();
  rules.forEach((rule, index) => {
    if (names.has(rule.name)) throw refuse(rule.name, "the rule is given twice");
    names.add(rule.name);
    if (rule.kind === "literal") {
      if (!rule.name.startsWith("credential:")) throw refuse(rule.name, "a literal rule is named credential:<NAME>");
      const problem = credentialValueProblem(rule.value);
      if (problem !== null) throw refuse(rule.name, `its value is ${problem}`, { minLength: MIN_CREDENTIAL_LENGTH });
      literals.push({ index, value: rule.value });
    } else {
      if (!rule.name.startsWith("profile:")) throw refuse(rule.name, "a pattern rule is named profile:<name>");
      try {
        const { ranges } = analysePattern(rule.source, rule.flags ?? "");
        patterns.push({ index, regexp: new RegExp(rule.source, `${rule.flags ?? ""}g`), ranges });
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

function patternMatches(regexp: RegExp, text: string, rule: number, into: Match[]): void {
  regexp.lastIndex = 0;
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
    found: [] as number[][],
    done: 0,
  });
  new Script("patterns = patterns.map((p) => new RegExp(p.source, p.flags));").runInContext(context);
  const script = new Script(`
    found = []; done = 0;
    for (const regexp of patterns) {
      const spans = [];
      regexp.lastIndex = 0;
      for (let m = regexp.exec(text); m !== null; m = regexp.exec(text)) {
        if (m[0].length === 0) { regexp.lastIndex += 1; continue; }
        spans.push(m.index, m.index + m[0].length);
      }
      found.push(spans);
      done += 1;
    }`);
  return (text: string, into: Match[]): { exhausted: number | null } => {
    context["text"] = text;
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
function mergeSpans(matches: Match[]): Match[] {
  matches.sort((a, b) => a.start - b.start || b.end - a.end || a.rule - b.rule);
  const merged: Array<Match & { longest: number }> = [];
  for (const match of matches) {
    const last = merged[merged.length - 1];
    const length = match.end - match.start;
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
  return {
    mayMatch(text: string): boolean {
      if (patterns.length > 0) return true;
      for (const { value } of literals) if (text.includes(value)) return true;
      return false;
    },
    apply(text: string): string {
      if (rules.length === 0) return text;
      const matches: Match[] = [];
      for (const { index, value } of literals) {
        for (let at = text.indexOf(value); at !== -1; at = text.indexOf(value, at + 1))
          matches.push({ start: at, end: at + value.length, rule: index });
      }
      if (patterns.length > 0) {
        if (text.length <= direct) {
          for (const pattern of patterns) patternMatches(pattern.regexp, text, pattern.index, matches);
        } else {
          budgeted ??= budgetedRunner(patterns);
          const { exhausted } = budgeted(text, matches);
          if (exhausted !== null) {
            counts[exhausted]! += 1;
            return masks[exhausted]!;
          }
        }
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
  };
}
