import { OatsError, isOatsError } from "../../core/index.js";

/**
 * The JSON envelope of contract section 7: exactly one compact line,
 *   {"schemaVersion":1,"ok":true,"command":"verify","result":{...}}
 *   {"schemaVersion":1,"ok":false,"command":"verify","error":{"code","kind","message","details"}}
 * `command` is the subcommand the arguments named, or null when none was
 * recognised (an unknown command, no command at all).
 */

export const SCHEMA_VERSION = 1;

export interface EnvelopeError {
  readonly code: string;
  readonly kind: string;
  readonly message: string;
  readonly details: Record<string, unknown>;
}

export type Envelope =
  | { schemaVersion: typeof SCHEMA_VERSION; ok: true; command: string | null; result: unknown }
  | { schemaVersion: typeof SCHEMA_VERSION; ok: false; command: string | null; error: EnvelopeError };

/**
 * Plain JSON data from what results and error details may hold (bigint, Map,
 * Set, Error, cycles). A value seen twice is written twice; only a true cycle
 * (a value inside itself) is cut.
 */
function plain(value: unknown, ancestors: Set<object>): unknown {
  if (typeof value === "bigint") return value.toString();
  if (typeof value !== "object" || value === null) return value;
  if (ancestors.has(value)) return "[circular]";
  ancestors.add(value);
  try {
    if (isOatsError(value)) return plain(value.toJSON(), ancestors);
    if (value instanceof Error) return { name: value.name, message: value.message };
    if (value instanceof Map) return plain(Object.fromEntries(value), ancestors);
    if (value instanceof Set) return plain([...value], ancestors);
    if (Array.isArray(value)) return value.map((item) => plain(item, ancestors));
    const toJSON = (value as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === "function") return plain(toJSON.call(value), ancestors);
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value))
      if (item !== undefined && typeof item !== "function") out[key] = plain(item, ancestors);
    return out;
  } finally {
    ancestors.delete(value);
  }
}

export function compactJson(value: unknown): string {
  return JSON.stringify(plain(value, new Set()));
}

export function successEnvelope(command: string | null, result: unknown): string {
  return compactJson({ schemaVersion: SCHEMA_VERSION, ok: true, command, result } satisfies Envelope);
}

export function failureEnvelope(command: string | null, error: EnvelopeError): string {
  return compactJson({ schemaVersion: SCHEMA_VERSION, ok: false, command, error } satisfies Envelope);
}

/** A usage error: code "usage", kind "usage", exit 2. */
export function usageError(message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("usage", message, details);
}

/**
 * Any thrown value as an OatsError. Refusals pass through unchanged; anything
 * else is `internal-error` (exit 1) carrying only its name and message.
 */
export function asOatsError(error: unknown): OatsError {
  if (isOatsError(error)) return error;
  const message = error instanceof Error ? error.message : String(error);
  const name = error instanceof Error ? error.name : typeof error;
  return new OatsError("internal-error", message, { name }, { cause: error });
}

export function envelopeError(error: OatsError): EnvelopeError {
  return error.toJSON();
}
