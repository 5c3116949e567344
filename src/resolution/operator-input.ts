import { parseDocument } from "yaml";
import type { z } from "zod";
import { OatsError, type ErrorCode, OPERATOR_MAX_DEPTH, parseJsonText, valueDepthProblem } from "../core/index.js";
import { readRegularFile } from "../retention/index.js";

/**
 * Files an operator hands the toolkit (plans, capture specs, classification
 * configs, profiles): read whole with a bound, decoded as strict UTF-8, parsed
 * as one YAML document (core schema, duplicate keys refused) or JSON
 * (duplicate keys refused too), bounded to OPERATOR_MAX_DEPTH levels of
 * nesting (`reason: too-deep`; everything downstream recurses), and checked
 * for `__proto__` keys before any schema sees them (zod's records would
 * silently drop or mis-assign one). Every refusal is typed.
 */

export function escapePointerSegment(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

/** The JSON pointer of the first `__proto__` key anywhere in a value, or null. Cycles are skipped. */
export function findProtoKey(value: unknown, pointer = "", ancestors = new Set<object>()): string | null {
  if (typeof value !== "object" || value === null || ancestors.has(value)) return null;
  ancestors.add(value);
  try {
    for (const key of Object.keys(value)) {
      const at = `${pointer}/${escapePointerSegment(key)}`;
      if (key === "__proto__") return at;
      const found = findProtoKey((value as Record<string, unknown>)[key], at, ancestors);
      if (found !== null) return found;
    }
    return null;
  } finally {
    ancestors.delete(value);
  }
}

/** Throw `code` naming the first `__proto__` key, if there is one. */
export function refuseProtoKeys(value: unknown, origin: string, code: ErrorCode = "invalid-input"): void {
  const at = findProtoKey(value);
  if (at !== null)
    throw new OatsError(code, `${origin}: key __proto__ refused at ${at}`, { pointer: at, reason: "proto-key" });
}

/** The text of one YAML document (core schema, unique keys, no merge keys, bounded aliases). */
export function parseYamlText(text: string, origin: string, details: Record<string, unknown> = {}): unknown {
  const tooDeep = (pointer: string | null) =>
    new OatsError(
      "invalid-input",
      `${origin} is nested deeper than ${OPERATOR_MAX_DEPTH} levels${pointer === null ? "" : ` at ${pointer || "/"}`}`,
      {
        ...details,
        reason: "too-deep",
        maxDepth: OPERATOR_MAX_DEPTH,
        ...(pointer === null ? {} : { pointer }),
      },
    );
  let document;
  try {
    document = parseDocument(text, {
      schema: "core",
      merge: false,
      uniqueKeys: true,
      prettyErrors: true,
      strict: true,
    });
  } catch (cause) {
    // The yaml package reports its own stack exhaustion as RESOURCE_EXHAUSTION; this catches any that escapes it.
    if (cause instanceof RangeError) throw tooDeep(null);
    throw cause;
  }
  const error = document.errors[0];
  if (error?.code === "RESOURCE_EXHAUSTION") throw tooDeep(null);
  if (error)
    throw new OatsError("invalid-input", `${origin} is not valid YAML: ${error.message}`, {
      ...details,
      reason: error.code,
    });
  let value: unknown;
  try {
    value = document.toJS({ maxAliasCount: 100 });
  } catch (cause) {
    if (cause instanceof RangeError) throw tooDeep(null);
    throw new OatsError("invalid-input", `${origin} is not valid YAML: ${(cause as Error).message}`, details);
  }
  // The parser's own limit depends on the stack left; this one does not.
  const deep = valueDepthProblem(value, OPERATOR_MAX_DEPTH);
  if (deep !== null) throw tooDeep(deep);
  return value;
}

/** JSON text with duplicate keys and excessive depth refused (`invalid-input`, reason `duplicate-key` / `too-deep`). */
export function parseJsonOperatorText(
  text: string,
  origin: string,
  details: Record<string, unknown> = {},
  code: ErrorCode = "invalid-input",
): unknown {
  return parseJsonText(
    text,
    OPERATOR_MAX_DEPTH,
    (reason, message, more) =>
      new OatsError(code, reason === "syntax" ? `${origin} is not JSON: ${message}` : `${origin}: ${message}`, {
        ...details,
        ...more,
        ...(reason === "syntax" ? {} : { reason }),
      }),
  );
}

/** `.json` as JSON, `.yaml`/`.yml` as one YAML document; any other extension is refused. */
export function parseByExtension(
  text: string,
  extension: string,
  origin: string,
  details: Record<string, unknown> = {},
): unknown {
  const ext = extension.toLowerCase();
  if (ext === ".json") return parseJsonOperatorText(text, origin, details);
  if (ext === ".yaml" || ext === ".yml") return parseYamlText(text, origin, details);
  throw new OatsError("invalid-input", `${origin}: the file must end in .json, .yaml or .yml`, {
    ...details,
    extension,
  });
}

export function decodeUtf8(bytes: Uint8Array, origin: string, details: Record<string, unknown> = {}): string {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw new OatsError("invalid-input", `${origin} is not UTF-8`, details);
  }
}

/**
 * Read a file the operator named, of at most `limit` bytes; every failure is
 * `invalid-input`. It is opened once, never through a symlink at its name
 * and never blocking on a FIFO, its type checked on the descriptor, and read
 * through it (readRegularFile): the directory it sits in may be one another
 * user can write, who could otherwise swap the name between a check and the
 * read. A symlink at the name is refused (`reason: symlink`); the operator
 * names the file itself (symlinked directories on the way are followed).
 */
export function readOperatorFile(
  path: string,
  limit: number,
  origin: string,
  details: Record<string, unknown> = {},
): Buffer {
  return readRegularFile(path, {
    limit,
    refuse: (failure, more) => {
      const info = { ...details, ...more };
      if (failure === "not-a-file") return new OatsError("invalid-input", `${origin} is not a regular file`, info);
      if (failure === "symlink")
        return new OatsError(
          "invalid-input",
          `${origin} is a symlink; oats never follows a symlink at the name of a file it reads: name the file itself`,
          { ...info, reason: "symlink" },
        );
      if (failure === "too-large")
        return new OatsError("invalid-input", `${origin} is larger than ${limit} bytes`, info);
      if (failure === "changed") return new OatsError("invalid-input", `${origin} changed while it was read`, info);
      return new OatsError("invalid-input", `cannot read ${origin}: ${String(more["errno"] ?? failure)}`, info);
    },
  });
}

/** Validate with a strict zod schema; the first issue becomes an `invalid-input` naming its pointer. */
export function parseWith<T extends z.ZodType>(
  schema: T,
  value: unknown,
  origin: string,
  details: Record<string, unknown> = {},
): z.infer<T> {
  refuseProtoKeys(value, origin);
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const pointer = `/${(issue?.path ?? []).map((part) => escapePointerSegment(String(part))).join("/")}`;
  throw new OatsError("invalid-input", `${origin}: ${pointer}: ${issue?.message ?? "malformed"}`, {
    ...details,
    pointer,
    issues: parsed.error.issues.slice(0, 20).map((each) => ({
      pointer: `/${each.path.map((part) => escapePointerSegment(String(part))).join("/")}`,
      message: each.message,
    })),
  });
}
