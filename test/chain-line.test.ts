/**
 * checkLine's fast path (no reviver for a line that cannot spell `__proto__`,
 * the self-hash taken from the canonical text) gives the verdict of the plain
 * check on every line: real chains written by appendEntry, and each of them
 * damaged the ways a hand edit or an attacker would.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { appendEntry, type ChainLog } from "../src/ledger/chain-log.js";
import { checkLine, entryHash, isPlainRecord, parseLine, type BrokenReason } from "../src/ledger/chain-line.js";
import { canonicalJson, jsonDigest } from "../src/core/canonical-json.js";
import { tempDir } from "./helpers.js";

const DIGEST = /^sha256-[0-9a-f]{64}$/;

/** The check as it was before the fast path: reviver always, the entry encoded again for its hash. */
function referenceVerdict(text: string): { reason: BrokenReason; seq: number | null } | "ok" {
  let parsed: unknown;
  try {
    parsed = parseLine(text);
  } catch {
    return { reason: "bad-json", seq: null };
  }
  if (!isPlainRecord(parsed)) return { reason: "invalid-entry", seq: null };
  const seq = Number.isSafeInteger(parsed.seq) && (parsed.seq as number) >= 1 ? (parsed.seq as number) : null;
  let canonical: string;
  try {
    canonical = canonicalJson(parsed);
  } catch {
    return { reason: "non-canonical", seq };
  }
  if (canonical !== `${text}\n`) return { reason: "non-canonical", seq };
  if (
    seq === null ||
    typeof parsed.at !== "string" ||
    typeof parsed.prev !== "string" ||
    !DIGEST.test(parsed.prev) ||
    typeof parsed.hash !== "string" ||
    !DIGEST.test(parsed.hash)
  )
    return { reason: "invalid-entry", seq };
  if (entryHash(parsed) !== parsed.hash) return { reason: "wrong-hash", seq };
  return "ok";
}

const verdict = (text: string) => {
  const checked = checkLine(text);
  return "entry" in checked ? "ok" : checked;
};

/** A line that is canonical and hashes right, for any body (as appendEntry would write it). */
function sealed(body: Record<string, unknown>): string {
  const entry = { ...body, hash: jsonDigest(body) };
  return canonicalJson(entry).slice(0, -1);
}

const prev = `sha256-${"0".repeat(64)}`;

describe("checkLine fast path", () => {
  test(
    "Given real chain lines and every kind of damage to them, Then " + "checkLine's verdict is the reference check's",
    async () => {
      const scope = tempDir("oats-chain-line-");
      const log: ChainLog = { dir: [".agents", "test"], file: "log.jsonl" };
      for (let i = 0; i < 6; i++)
        await appendEntry(scope, log, {
          action: "note",
          subject: { n: i, text: `line ${i} "quoted" \u00e9 \u{1f600}` },
          details: i % 2 ? { hash: "nested", list: [1, { hash: `sha256-${"a".repeat(64)}` }] } : {},
        });
      const lines = readFileSync(join(scope, ".agents", "test", "log.jsonl"), "utf8")
        .split("\n")
        .filter(Boolean);
      const cases: string[] = [...lines];
      for (const line of lines) {
        const entry = JSON.parse(line) as Record<string, unknown>;
        cases.push(line.replace(/"hash":"sha256-[0-9a-f]{64}"/, `"hash":"sha256-${"f".repeat(64)}"`)); // wrong-hash
        cases.push(line.replace('"note"', '"nota"')); // body edited: wrong-hash
        cases.push(`${line} `, line.replace("{", "{ "), line.slice(0, -1)); // non-canonical, bad JSON
        // __proto__, plainly and escaped
        cases.push(line.replace(/"at":"/, '"__proto__":{},"at":"'), line.replace(/"action"/, '"\\u005f_proto__"'));
        cases.push(canonicalJson({ ...entry, hash: 42 }).slice(0, -1)); // invalid-entry
      }
      // The entry's own hash value also spelled inside a nested member: the cut must not guess.
      const body = { at: "2026-01-01T00:00:00.000Z", prev, seq: 1, details: {} as Record<string, unknown> };
      const own = jsonDigest(body);
      cases.push(canonicalJson({ ...body, details: { hash: own }, hash: own }).slice(0, -1));
      cases.push(sealed({ ...body, details: { hash: own } }));
      cases.push(sealed({ ...body, zeta: { hash: `sha256-${"b".repeat(64)}` } }));
      cases.push(canonicalJson({ hash: own }).slice(0, -1), sealed({ at: "x", prev, seq: 3 }));
      // Nesting: past the stored depth bound (bad JSON), and many openings that nest shallowly (fine).
      cases.push(sealed({ at: "x", prev, seq: 1 }).replace('"at"', `"deep":${"[".repeat(200)}${"]".repeat(200)},"at"`));
      cases.push(sealed({ at: "x", prev, seq: 1, wide: Array.from({ length: 300 }, () => ({})) }));
      // Spellings JSON.stringify and the canonical encoder might treat differently.
      const base = sealed({ at: "x", prev, seq: 1, details: { "10": 1, "9": 2, b: [1, { z: 1, a: 2 }] } });
      cases.push(base); // array-index keys, canonically ordered ("10" before "9")
      cases.push(base.replace('"10":1,"9":2', '"9":2,"10":1')); // the engine's own order: not canonical
      cases.push(
        base.replace('"a":2,"z":1', '"z":1,"a":2'),
        base.replace('"a":2', '"a":2,"a":3'),
        base.replace('"b":[1,', '"b":[1.0,'),
        base.replace('"b":[1,', '"b":[-0,'),
        base.replace('"b":[1,', '"b":[1e0,'),
      );
      cases.push(
        base.replace('"at":"x"', '"at":"\\ud800"'),
        base.replace('"at":"x"', '"at":"\ud800"'),
        base.replace('"at":"x"', '"at":"\u{1f600}\u2028"'),
      );
      cases.push(
        sealed({ at: "x", prev, seq: 1, details: { "": 1, A: 2, a: 3, "\u00e9": 4, "\u{1f600}": 5, "\uffff": 6 } }),
      );
      cases.push(sealed({ at: "x", prev, seq: 1, details: { b: 1, a: 2 } }).replace('"a":2,"b":1', '"b":1,"a":2'));
      let ok = 0;
      for (const text of cases) {
        const expected = referenceVerdict(text);
        assert.deepEqual(verdict(text), expected, text);
        if (expected === "ok") ok += 1;
      }
      assert.ok(ok >= lines.length + 3, "valid lines were among the cases");
    },
  );

  test(
    "Given a line whose key spells __proto__ through a \\u escape, Then it " +
      "is refused as bad JSON, not merely non-canonical",
    () => {
      const escaped = sealed({ at: "x", prev, seq: 1 }).replace('"at"', '"\\u005f_proto__":{},"at"');
      assert.deepEqual(checkLine(escaped), { reason: "bad-json", seq: null });
      const plain = sealed({ at: "x", prev, seq: 1 }).replace('"at"', '"__proto__":{},"at"');
      assert.deepEqual(checkLine(plain), { reason: "bad-json", seq: null });
    },
  );
});
