/**
 * A bound on the shape of JSON and YAML text before anything recursive sees
 * it. JSON.parse itself copes with any depth, but everything after it does
 * not: a reviver, zod, the canonical writer, `__proto__` checks and
 * structuredClone all recurse, and 5,000 nested arrays in 10 KB are enough to
 * exhaust the stack. JSON.parse also keeps the last of two equal keys
 * silently, where the YAML reader refuses them.
 *
 * scanJsonText is one linear, iterative pass over the text: it tracks only
 * the open containers and, per object, the keys already seen (decoded, so
 * "a" and "\u0061" are the same key). It does not validate the syntax;
 * JSON.parse does that afterwards, and a malformed text is refused either
 * way. nestsDeeperThan is its depth half alone, for a reader whose own
 * check refuses a repeated key. valueDepthProblem bounds an already built
 * value (YAML) iteratively.
 */

/** Operator files: plans, capture specs, classification configs, profiles, locks, instance files. */
export const OPERATOR_MAX_DEPTH = 64;
/**
 * Stored JSON (records, refs, jobs, ledger and audit lines, bundle
 * manifests). Records embed operator values a few levels down, so this bound
 * is the operator bound with room to spare: what an operator file may hold
 * always fits in a record.
 */
export const STORED_MAX_DEPTH = 128;

export type JsonTextProblem =
  | { readonly reason: "too-deep"; readonly pointer: string; readonly maxDepth: number }
  | { readonly reason: "duplicate-key"; readonly pointer: string; readonly key: string };

interface Frame {
  readonly keys: Set<string> | null;
  key: string | null;
  index: number;
  expectKey: boolean;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;

export function escapeSegment(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

function pointerOf(stack: readonly Frame[]): string {
  let pointer = "";
  for (const frame of stack) {
    if (frame.keys === null) pointer += `/${frame.index}`;
    else if (frame.key !== null) pointer += `/${escapeSegment(frame.key)}`;
  }
  return pointer;
}

/**
 * The first container deeper than `maxDepth`, else the first repeated key
 * of an object, else null. Depth comes first wherever it is: a caller that
 * checks only for "too-deep" before something recursive must not be told
 * "duplicate-key" about a text that also nests past the bound (a chain
 * line with a repeated key and then 5,000 nested arrays overflowed the
 * stack of checkLine's reviver that way).
 */
export function scanJsonText(text: string, maxDepth: number): JsonTextProblem | null {
  let duplicate: JsonTextProblem | null = null;
  const stack: Frame[] = [];
  const length = text.length;
  let i = 0;
  while (i < length) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const start = i;
      let escaped = false;
      i += 1;
      while (i < length) {
        const d = text.charCodeAt(i);
        if (d === QUOTE) break;
        if (d === BACKSLASH) {
          escaped = true;
          i += 2;
        } else {
          i += 1;
        }
      }
      const end = Math.min(i, length);
      i = end + 1;
      const top = stack[stack.length - 1];
      if (top !== undefined && top.keys !== null && top.expectKey) {
        let key = text.slice(start + 1, end);
        if (escaped) {
          try {
            key = JSON.parse(text.slice(start, end + 1)) as string;
          } catch {
            // Malformed: JSON.parse of the whole text refuses it.
          }
        }
        if (top.keys.has(key)) {
          top.key = key;
          duplicate ??= { reason: "duplicate-key", pointer: pointerOf(stack), key };
        }
        top.keys.add(key);
        top.key = key;
        top.expectKey = false;
      }
      continue;
    }
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (stack.length >= maxDepth) return { reason: "too-deep", pointer: pointerOf(stack), maxDepth };
      const object = c === OPEN_OBJECT;
      stack.push({ keys: object ? new Set() : null, key: null, index: 0, expectKey: object });
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      stack.pop();
    } else if (c === COMMA) {
      const top = stack[stack.length - 1];
      if (top !== undefined) {
        if (top.keys !== null) top.expectKey = true;
        else top.index += 1;
      }
    }
    i += 1;
  }
  return duplicate;
}

/**
 * Whether the text opens a container deeper than `maxDepth`: scanJsonText's
 * depth check alone, without its key sets and slices (a third of the cost
 * of reading a 100 KB record, whose canonical comparison refuses a repeated
 * key on its own: resolution/canonical-read.ts).
 */
export function nestsDeeperThan(text: string, maxDepth: number): boolean {
  const length = text.length;
  let depth = 0;
  for (let i = 0; i < length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      for (i += 1; i < length; i++) {
        const d = text.charCodeAt(i);
        if (d === BACKSLASH) i += 1;
        else if (d === QUOTE) break;
      }
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (++depth > maxDepth) return true;
    } else if ((c === CLOSE_OBJECT || c === CLOSE_ARRAY) && depth > 0) {
      depth -= 1;
    }
  }
  return false;
}

/** The pointer of the first container of a built value deeper than `maxDepth`, or null. Iterative; a shared node is
 * visited once per path, as YAML aliases are bounded upstream. */
export function valueDepthProblem(value: unknown, maxDepth: number): string | null {
  const pending: [unknown, number, string][] = [[value, 0, ""]];
  while (pending.length > 0) {
    const [current, depth, pointer] = pending.pop()!;
    if (typeof current !== "object" || current === null) continue;
    if (depth >= maxDepth) return pointer;
    if (Array.isArray(current)) {
      for (let index = current.length - 1; index >= 0; index -= 1)
        pending.push([current[index], depth + 1, `${pointer}/${index}`]);
    } else {
      const keys = Object.keys(current);
      for (let index = keys.length - 1; index >= 0; index -= 1) {
        const key = keys[index]!;
        pending.push([(current as Record<string, unknown>)[key], depth + 1, `${pointer}/${escapeSegment(key)}`]);
      }
    }
  }
  return null;
}

export function describeJsonProblem(problem: JsonTextProblem): string {
  return problem.reason === "too-deep"
    ? `nested deeper than ${problem.maxDepth} levels at ${problem.pointer || "/"}`
    : `duplicate key ${JSON.stringify(problem.key)} at ${problem.pointer}`;
}

/**
 * JSON.parse behind the scan (an optional reviver runs only on text of bounded depth). `refuse` builds the reader's
 * own typed error
 * from a reason ("too-deep", "duplicate-key", "syntax") and a message, so a
 * lock stays invalid-lock and a record invalid-resolution.
 */
export function parseJsonText(
  text: string,
  maxDepth: number,
  refuse: (reason: "too-deep" | "duplicate-key" | "syntax", message: string, details: Record<string, unknown>) => Error,
  reviver?: (this: unknown, key: string, value: unknown) => unknown,
): unknown {
  const problem = scanJsonText(text, maxDepth);
  if (problem?.reason === "too-deep")
    throw refuse("too-deep", describeJsonProblem(problem), { pointer: problem.pointer, maxDepth });
  let value: unknown;
  try {
    value = reviver ? JSON.parse(text, reviver) : JSON.parse(text);
  } catch (error) {
    // What the reviver throws is the caller's own refusal.
    if (error instanceof SyntaxError) throw refuse("syntax", error.message, {});
    throw error;
  }
  if (problem !== null)
    throw refuse(problem.reason, describeJsonProblem(problem), { pointer: problem.pointer, key: problem.key });
  return value;
}
