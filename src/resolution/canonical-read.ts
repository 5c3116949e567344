import {
  OatsError,
  STORED_MAX_DEPTH,
  describeJsonProblem,
  nestsDeeperThan,
  scanJsonText,
  canonicalJsonBytes,
  compareUtf8,
} from "../core/index.js";

/**
 * The strict reader of canonical JSON (oats.json.v1). Bytes are accepted only
 * when they are exactly what the canonical writer would produce for the value
 * they decode to. That one comparison refuses, without a parser of our own:
 * invalid UTF-8, a BOM, whitespace, trailing bytes, keys out of order,
 * duplicate keys (JSON.parse keeps the last; the writer then writes one),
 * integers beyond 2^53 (they decode rounded and re-encode differently), lone
 * surrogates (the writer refuses them), and any other spelling of a number or
 * string than the canonical one. Integers beyond 2^53 that happen to survive
 * the round trip (9007199254740994, 1e+21) are refused too: another reader
 * may not decode them to the same value. A `__proto__` key is refused outright, and
 * objects come back without a prototype, so a record can never reach
 * Object.prototype. Nesting deeper than STORED_MAX_DEPTH is refused before
 * JSON.parse (`reason: too-deep`): the writer, the schema and the copy below
 * all recurse.
 */

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

export function readCanonicalJson(bytes: Uint8Array, what: string): unknown {
  return withoutPrototypes(canonicalValue(bytes, what), "");
}

/**
 * readCanonicalJson's verdict and refusals without its copy: for a caller
 * that hands the value to a schema and copies the schema's output without
 * prototypes anyway (store.ts, a resolution record), one deep copy of a
 * 100 KB record and its garbage fewer. The `__proto__` keys and unsafe
 * integers are refused here, before the schema sees the value. Its objects
 * keep Object.prototype: the value must go no further than that schema.
 */
export function readCanonicalJsonForSchema(bytes: Uint8Array, what: string): unknown {
  const value = canonicalValue(bytes, what);
  checkedCopy(value, [], false);
  return value;
}

function canonicalValue(bytes: Uint8Array, what: string): unknown {
  const refuse = (reason: string) =>
    new OatsError("invalid-resolution", `${what} is not canonical JSON: ${reason}`, { reason });
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw refuse("invalid UTF-8");
  }
  // The scan's key sets and pointers serve only a refusal: the depth bound alone first (everything after JSON.parse
  // recurses), and the scan's findings (too deep, else a repeated key, which the comparison below refuses too) take
  // precedence over whatever refusal comes next, as when the scan ran first.
  const scanned = (otherwise: OatsError): OatsError => {
    const problem = scanJsonText(text, STORED_MAX_DEPTH);
    if (problem === null) return otherwise;
    return new OatsError("invalid-resolution", `${what} is not canonical JSON: ${describeJsonProblem(problem)}`, {
      reason: problem.reason,
      pointer: problem.pointer,
    });
  };
  if (nestsDeeperThan(text, STORED_MAX_DEPTH)) throw scanned(refuse("nested too deep"));
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw scanned(refuse((error as Error).message));
  }
  if (!matchesPlainEncoding(value, text, bytes)) {
    let canonical: Buffer;
    try {
      canonical = canonicalJsonBytes(value);
    } catch (error) {
      throw scanned(refuse((error as Error).message));
    }
    if (!canonical.equals(bytes))
      throw scanned(refuse("the bytes differ from the canonical form of the value they hold"));
  }
  return value;
}

/**
 * A shortcut to the same verdict for the common case: V8's own
 * JSON.stringify writes a parsed value as the canonical writer does (the
 * same string and number spellings, -0 as 0, members in property order),
 * except that it does not sort keys and writes a lone surrogate as a \u
 * escape. So when its output (plus the LF) is the bytes, every object's
 * keys are already in canonical order, and the text has no \u escape at all
 * (fatal UTF-8 decoding already refused an encoded surrogate), the bytes are
 * canonical. Anything else (including a canonical record whose integer-like
 * keys V8 reorders) takes the canonical writer's full comparison.
 */
function matchesPlainEncoding(value: unknown, text: string, bytes: Uint8Array): boolean {
  if (text.includes("\\u") || text !== `${JSON.stringify(value)}\n`) return false;
  // A BOM is dropped by the decoder, so the text alone would not show it.
  return Buffer.byteLength(text) === bytes.length && keysInCanonicalOrder(value);
}

function keysInCanonicalOrder(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return true;
  if (Array.isArray(value)) return value.every(keysInCanonicalOrder);
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    if (i > 0 && compareUtf8(keys[i - 1]!, keys[i]!) >= 0) return false;
    if (!keysInCanonicalOrder((value as Record<string, unknown>)[keys[i]!])) return false;
  }
  return true;
}

export function withoutPrototypes(value: unknown, pointer: string): unknown {
  return checkedCopy(value, pointer ? pointer.split("/").slice(1) : [], true);
}

/**
 * Refuses a `__proto__` key or an integer beyond 2^53 anywhere in `value`;
 * with `copy`, returns a copy whose objects have no prototype, else the
 * value itself. `trail` holds the keys down to `value`; a pointer is
 * spelled out only for a refusal.
 */
function checkedCopy(value: unknown, trail: (string | number)[], copy: boolean): unknown {
  const at = () => trail.map((step) => `/${String(step).replace(/~/g, "~0").replace(/\//g, "~1")}`).join("") || "/";
  if (Array.isArray(value)) {
    const items = copy ? new Array<unknown>(value.length) : null;
    for (let index = 0; index < value.length; index++) {
      trail.push(index);
      const item = checkedCopy(value[index], trail, copy);
      if (items) items[index] = item;
      trail.pop();
    }
    return items ?? value;
  }
  if (typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value)) {
    throw new OatsError("invalid-resolution", `integer beyond 2^53 at ${at()}`, {
      pointer: at(),
      reason: "unsafe-integer",
    });
  }
  if (typeof value !== "object" || value === null) return value;
  const out = copy ? (Object.create(null) as Record<string, unknown>) : null;
  for (const key of Object.keys(value)) {
    if (key === "__proto__")
      throw new OatsError("invalid-resolution", `key __proto__ refused at ${at()}`, {
        pointer: at(),
        reason: "proto-key",
      });
    trail.push(key);
    const item = checkedCopy((value as Record<string, unknown>)[key], trail, copy);
    if (out) out[key] = item;
    trail.pop();
  }
  return out ?? value;
}
