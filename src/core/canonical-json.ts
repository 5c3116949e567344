import { createHash } from "node:crypto";
import { OatsError } from "./errors.js";

/**
 * oats.json.v1: SHA-256 of canonical JSON.
 *
 *   object keys sorted by their UTF-8 bytes, no insignificant whitespace,
 *   exactly one trailing LF, -0 written 0;
 *   non-finite numbers, lone surrogates, cycles and non-plain objects refused.
 */

/**
 * A JSON document as a caller holds it, parsed from text or built in code: what the validating
 * parsers take (a plan, a capture spec, a lock, a resolution record). An object member may be
 * `undefined`, as an optional field left out is; the parsers still check every value they are given.
 */
export type JsonValue = null | boolean | number | string | readonly JsonValue[] | JsonObject;

/** A JSON object: {@link JsonValue} members by name. */
export interface JsonObject {
  readonly [key: string]: JsonValue | undefined;
}

/** The keys and indexes from the root to the value being encoded; a pointer is only spelled out for a refusal. */
type Trail = (string | number)[];

function refuse(message: string, trail: Trail): never {
  const pointer = trail.map((step) => `/${String(step).replace(/~/g, "~0").replace(/\//g, "~1")}`).join("") || "/";
  throw new OatsError("invalid-input", `cannot canonicalise JSON at ${pointer}: ${message}`, { pointer });
}

const LONE_SURROGATE = /\p{Surrogate}/u;

function isPlainObject(value: object): boolean {
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function encodeString(text: string, trail: Trail): string {
  // A lone surrogate survives as \p{Surrogate} under the u flag; a proper pair does not.
  if (LONE_SURROGATE.test(text)) refuse("lone surrogate in string", trail);
  return JSON.stringify(text);
}

/**
 * Order by UTF-8 bytes without encoding: UTF-16 code units order the same
 * way except where a surrogate (a code point above U+FFFF) meets a unit
 * from U+E000 up, and only then are the strings compared as bytes.
 */
export function compareUtf8(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800 || y >= 0xd800) {
      // Start at the pair's high half when the strings first differ in a low half.
      const from = (x >= 0xdc00 && x <= 0xdfff) || (y >= 0xdc00 && y <= 0xdfff) ? i - 1 : i;
      return Buffer.compare(Buffer.from(a.slice(from)), Buffer.from(b.slice(from)));
    }
    return x - y;
  }
  return a.length - b.length;
}

function encode(value: unknown, trail: Trail, ancestors: Set<object>): string {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) refuse("non-finite number", trail);
      return Object.is(value, -0) ? "0" : JSON.stringify(value);
    case "string":
      return encodeString(value, trail);
    case "object":
      break;
    default:
      refuse(`unsupported ${typeof value}`, trail);
  }
  const object = value as object;
  if (ancestors.has(object)) refuse("cycle", trail);
  ancestors.add(object);
  let out: string;
  if (Array.isArray(object)) {
    // Array.from visits holes as undefined, so a sparse array is refused rather than written `[1,,3]`.
    out = `[${Array.from(object, (item, index) => {
      trail.push(index);
      const encoded = encode(item, trail, ancestors);
      trail.pop();
      return encoded;
    }).join(",")}]`;
  } else {
    if (!isPlainObject(object)) refuse("not a plain object", trail);
    const keys = Object.keys(object).sort(compareUtf8);
    const members = keys.map((key) => {
      trail.push(key);
      const value = (object as Record<string, unknown>)[key];
      const member = `${encodeString(key, trail)}:${encode(value, trail, ancestors)}`;
      trail.pop();
      return member;
    });
    out = `{${members.join(",")}}`;
  }
  ancestors.delete(object);
  return out;
}

/**
 * Canonical JSON text, with its one trailing LF.
 * @param value any JSON value (refused with `invalid-input` if it is not one)
 */
export function canonicalJson(value: unknown): string {
  return `${encode(value, [], new Set())}\n`;
}

/**
 * {@link canonicalJson} as UTF-8 bytes.
 * @param value any JSON value
 */
export function canonicalJsonBytes(value: unknown): Buffer {
  return Buffer.from(canonicalJson(value), "utf8");
}

/**
 * The oats.json.v1 digest (`sha256-<hex>`) of a value's canonical JSON.
 * @param value any JSON value
 */
export function jsonDigest(value: unknown): string {
  return bytesDigest(canonicalJsonBytes(value));
}

/** oats.bytes.v1: SHA-256 of the raw bytes. */
export function bytesDigest(bytes: Uint8Array): string {
  return bytesDigester().update(bytes).digest();
}

/** oats.bytes.v1 of bytes handed over in pieces (a file read through a reused buffer). */
export function bytesDigester(): { update(piece: Uint8Array): ReturnType<typeof bytesDigester>; digest(): string } {
  const hash = createHash("sha256");
  const digester = {
    update(piece: Uint8Array) {
      hash.update(piece);
      return digester;
    },
    digest: () => `sha256-${hash.digest("hex")}`,
  };
  return digester;
}
