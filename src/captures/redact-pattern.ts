import { z } from "zod";
import { identifierSchema } from "../retention/index.js";

/**
 * The redaction patterns of a capture profile (`redact: [{name, pattern,
 * flags?}]`), validated where the profile is read (prepare), so a profile
 * that would mask nothing, mask everything or run away never gets pinned.
 *
 * A pattern is refused when it
 * - is empty or longer than MAX_PATTERN_LENGTH characters;
 * - has flags other than i, m, u (g and y are the redactor's business; s, d,
 *   v change nothing a profile needs);
 * - does not compile;
 * - can match the empty string (statically: every path through it may
 *   consume nothing, counting assertions such as ^, \b and lookarounds as
 *   possibly empty): such a pattern masks nothing or splits every line;
 * - uses a backreference (not regular: no bound on its work);
 * - repeats a group that itself repeats or alternates (`(a+)+`, `(a|ab)*`):
 *   the shape of exponential backtracking.
 *
 * What is left still backtracks polynomially; the redactor bounds the work
 * per line (redact.ts). `analysePattern` also returns the pattern's
 * quantifier ranges, from which the redactor estimates that work, and the
 * longest text a match can cover, which a line masked in parts must see
 * past a cut (redact-stream.ts).
 */

export const MAX_PATTERN_LENGTH = 256;
export const MAX_PROFILE_PATTERNS = 32;

/** A quantifier's range: max - min, Infinity when unbounded. */
export type QuantifierRange = number;

export interface PatternAnalysis {
  readonly ranges: readonly QuantifierRange[];
  /**
   * The longest text (UTF-16 code units) a match can cover, lookaheads counted as covered, Infinity when a
   * quantifier is unbounded: how far past its start a match may read (one more character to end it).
   */
  readonly maxLength: number;
}

interface Node {
  nullable: boolean;
  /** Contains a quantifier with max > 1, or an alternation. */
  repeats: boolean;
  /** The longest match, in UTF-16 code units. */
  max: number;
}

class Parser {
  index = 0;
  readonly ranges: number[] = [];
  /** The code units one character can take: two with the u flag (a surrogate pair), one without. */
  private readonly unit: number;
  constructor(
    private readonly source: string,
    flags = "",
  ) {
    this.unit = flags.includes("u") ? 2 : 1;
  }

  fail(message: string): never {
    throw new PatternRefusal(message);
  }

  /** Consumes one character and answers `value`. */
  advance<T>(value: T): T {
    this.index += 1;
    return value;
  }

  peek(offset = 0): string | undefined {
    return this.source[this.index + offset];
  }

  /** alternation := sequence ('|' sequence)* */
  alternation(): Node {
    const branches = [this.sequence()];
    while (this.peek() === "|") {
      this.index += 1;
      branches.push(this.sequence());
    }
    return {
      nullable: branches.some((branch) => branch.nullable),
      repeats: branches.length > 1 || branches.some((branch) => branch.repeats),
      max: Math.max(...branches.map((branch) => branch.max)),
    };
  }

  sequence(): Node {
    const node: Node = { nullable: true, repeats: false, max: 0 };
    while (this.index < this.source.length && this.peek() !== "|" && this.peek() !== ")") {
      const item = this.quantified();
      node.nullable &&= item.nullable;
      node.repeats ||= item.repeats;
      node.max += item.max;
    }
    return node;
  }

  quantified(): Node {
    const atom = this.atom();
    const quantifier = this.quantifier();
    if (quantifier === null) return atom;
    const { min, max } = quantifier;
    if (this.peek() === "?") this.index += 1;
    if (max > 1 && atom.repeats)
      this.fail("it repeats a group that itself repeats or alternates (exponential backtracking)");
    this.ranges.push(max - min);
    return {
      nullable: atom.nullable || min === 0,
      repeats: atom.repeats || max > 1,
      max: atom.max === 0 || max === 0 ? 0 : atom.max * max,
    };
  }

  quantifier(): { min: number; max: number } | null {
    const char = this.peek();
    if (char === "*") return this.advance({ min: 0, max: Infinity });
    if (char === "+") return this.advance({ min: 1, max: Infinity });
    if (char === "?") return this.advance({ min: 0, max: 1 });
    if (char === "{") {
      const match = /^\{(\d+)(,(\d*))?\}/.exec(this.source.slice(this.index));
      if (match === null) return null;
      this.index += match[0].length;
      const min = Number(match[1]);
      const max = match[2] === undefined ? min : match[3] === "" ? Infinity : Number(match[3]);
      return { min, max };
    }
    return null;
  }

  atom(): Node {
    const char = this.peek()!;
    this.index += 1;
    switch (char) {
      case "^":
      case "$":
        return { nullable: true, repeats: false, max: 0 };
      case "[":
        this.skipClass();
        return { nullable: false, repeats: false, max: this.unit };
      case "\\":
        return this.escape();
      case "(":
        return this.group();
      default:
        return { nullable: false, repeats: false, max: this.unit };
    }
  }

  escape(): Node {
    const char = this.peek();
    if (char === undefined) this.fail("it ends in a lone backslash");
    if (/[1-9]/.test(char) || (char === "k" && this.peek(1) === "<")) this.fail("it uses a backreference");
    this.index += 1;
    if (char === "b" || char === "B") return { nullable: true, repeats: false, max: 0 };
    if ((char === "p" || char === "P") && this.peek() === "{") this.index = this.source.indexOf("}", this.index) + 1;
    return { nullable: false, repeats: false, max: this.unit };
  }

  skipClass(): void {
    while (this.index < this.source.length) {
      const char = this.source[this.index]!;
      this.index += char === "\\" ? 2 : 1;
      if (char === "]") return;
    }
  }

  group(): Node {
    let assertion = false;
    let ahead = false;
    if (this.peek() === "?") {
      const rest = this.source.slice(this.index + 1);
      if (rest.startsWith(":")) this.index += 2;
      else if (rest.startsWith("=") || rest.startsWith("!")) {
        this.index += 2;
        assertion = true;
        ahead = true;
      } else if (rest.startsWith("<=") || rest.startsWith("<!")) {
        this.index += 3;
        assertion = true;
      } else if (rest.startsWith("<")) this.index = this.source.indexOf(">", this.index) + 1;
      else this.fail("it uses an unsupported group");
    }
    const inner = this.alternation();
    if (this.peek() !== ")") this.fail("it has an unbalanced group");
    this.index += 1;
    // A lookahead reads the text it looks at: counted as if consumed (more, never less); a lookbehind reads before.
    return assertion ? { nullable: true, repeats: inner.repeats, max: ahead ? inner.max : 0 } : inner;
  }
}

export class PatternRefusal extends Error {}

/**
 * Check a pattern (source + flags, as given in a profile); throws
 * PatternRefusal with the reason, or returns its quantifier ranges.
 */
export function analysePattern(source: string, flags = ""): PatternAnalysis {
  if (source.length === 0) throw new PatternRefusal("it is empty");
  if (source.length > MAX_PATTERN_LENGTH)
    throw new PatternRefusal(`it is longer than ${MAX_PATTERN_LENGTH} characters`);
  if (!/^[imu]*$/.test(flags) || new Set(flags).size !== flags.length)
    throw new PatternRefusal("its flags may only be i, m and u, each at most once");
  try {
    new RegExp(source, `${flags}g`);
  } catch (error) {
    throw new PatternRefusal(`it does not compile: ${(error as Error).message}`);
  }
  const parser = new Parser(source, flags);
  const node = parser.alternation();
  if (parser.index !== source.length) throw new PatternRefusal("it has an unbalanced group");
  if (node.nullable) throw new PatternRefusal("it can match the empty string");
  return { ranges: parser.ranges, maxLength: node.max };
}

/** A profile's `redact` entry. */
export const redactPatternSchema = z
  .object({
    name: identifierSchema,
    pattern: z.string().min(1).max(MAX_PATTERN_LENGTH),
    flags: z
      .string()
      .regex(/^[imu]{0,3}$/, "flags may only be i, m and u")
      .optional(),
  })
  .strict()
  .superRefine((entry, context) => {
    try {
      analysePattern(entry.pattern, entry.flags ?? "");
    } catch (error) {
      if (!(error instanceof PatternRefusal)) throw error;
      context.addIssue({
        code: "custom",
        path: ["pattern"],
        message: `redaction pattern ${entry.name} is refused: ${error.message}`,
      });
    }
  });

export const redactPatternsSchema = z
  .array(redactPatternSchema)
  .max(MAX_PROFILE_PATTERNS)
  .superRefine((entries, context) => {
    const seen = new Set<string>();
    entries.forEach((entry, index) => {
      if (seen.has(entry.name))
        context.addIssue({
          code: "custom",
          path: [index, "name"],
          message: `redaction pattern ${entry.name} is named twice`,
        });
      seen.add(entry.name);
    });
  });

export type RedactPattern = z.infer<typeof redactPatternSchema>;
