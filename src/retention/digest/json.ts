import { createHash } from "node:crypto";
import { OatsError } from "../../errors.js";

/**
 * oats.json.v1: SHA-256 of canonical JSON.
 *
 *   object keys sorted by their UTF-8 bytes, no insignificant whitespace,
 *   exactly one trailing LF, -0 written 0;
 *   non-finite numbers, lone surrogates, cycles and non-plain objects refused.
 */

function refuse(message: string, path: string): never {
  throw new OatsError("invalid-input", `cannot canonicalise JSON at ${path || "/"}: ${message}`, { pointer: path || "/" });
}

const LONE_SURROGATE = /\p{Surrogate}/u;

function isPlainObject(value: object): boolean {
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function encodeString(text: string, path: string): string {
  // A lone surrogate survives as \p{Surrogate} under the u flag; a proper pair does not.
  if (LONE_SURROGATE.test(text)) refuse("lone surrogate in string", path);
  return JSON.stringify(text);
}

function escapePointer(key: string): string {
  return key.replace(/~/g, "~0").replace(/\//g, "~1");
}

function encode(value: unknown, path: string, ancestors: Set<object>): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) refuse("non-finite number", path);
      return Object.is(value, -0) ? "0" : JSON.stringify(value);
    case "string":
      return encodeString(value, path);
    case "object":
      break;
    default:
      refuse(`unsupported ${typeof value}`, path);
  }
  const object = value as object;
  if (ancestors.has(object)) refuse("cycle", path);
  ancestors.add(object);
  let out: string;
  if (Array.isArray(object)) {
    // Array.from visits holes as undefined, so a sparse array is refused rather than written `[1,,3]`.
    out = `[${Array.from(object, (item, index) => encode(item, `${path}/${index}`, ancestors)).join(",")}]`;
  } else {
    if (!isPlainObject(object)) refuse("not a plain object", path);
    const keys = Object.keys(object).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
    const members = keys.map((key) => `${encodeString(key, path)}:${encode((object as Record<string, unknown>)[key], `${path}/${escapePointer(key)}`, ancestors)}`);
    out = `{${members.join(",")}}`;
  }
  ancestors.delete(object);
  return out;
}

/** Canonical JSON text, with its one trailing LF. */
export function canonicalJson(value: unknown): string {
  return `${encode(value, "", new Set())}\n`;
}

export function canonicalJsonBytes(value: unknown): Buffer {
  return Buffer.from(canonicalJson(value), "utf8");
}

export function jsonDigest(value: unknown): string {
  return bytesDigest(canonicalJsonBytes(value));
}

/** oats.bytes.v1: SHA-256 of the raw bytes. */
export function bytesDigest(bytes: Uint8Array): string {
  return `sha256-${createHash("sha256").update(bytes).digest("hex")}`;
}
