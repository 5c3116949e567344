/**
 * Cutting and masking (docs/design/evidence.md, "Cutting and masking"): a
 * line longer than the bound is cut only where its masking is decided, so a
 * credential or a pattern match that falls across a cut is masked whole,
 * never left as two halves in two pieces; and the live echo shows the same
 * masked text, the decided beginning of a line before it ends. LineCapture
 * with a run's redactor and a small bound, every offset, many chunkings.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createRedactor, type RedactionRule } from "../src/captures/redact.js";
import { analysePattern } from "../src/captures/redact-pattern.js";
import { LineCapture, createStampClock } from "../src/evidence/index.js";

const VALUE = "Tk9-CUT-s3cret-Value-77x";
const MASK = "[REDACTED:credential:CUT_TOKEN]";
const CREDENTIAL: RedactionRule = { name: "credential:CUT_TOKEN", kind: "literal", value: VALUE };
const GITHUB: RedactionRule = { name: "profile:github", kind: "pattern", source: "ghp_[A-Za-z0-9]{36}" };
const TOKEN = `ghp_${"Zq7".repeat(12)}`;

/** A deterministic pseudo-random source, so a failure names a reproducible seed. */
function random(seed: number) {
  let state = seed >>> 0;
  return () => (state = (state * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}

/** Ways to feed a text: whole, a character at a time, random sizes, and cut exactly at each multiple of the bound. */
function chunkings(text: string, max: number, seed: number): Array<{ name: string; chunks: string[] }> {
  const next = random(seed);
  const sized: string[] = [];
  for (let at = 0; at < text.length; ) {
    const size = 1 + Math.floor(next() * 2 * max);
    sized.push(text.slice(at, at + size));
    at += size;
  }
  const atCuts: string[] = [];
  for (let at = 0; at < text.length; at += max) atCuts.push(text.slice(at, at + max));
  return [
    { name: "one chunk", chunks: [text] },
    { name: "a character at a time", chunks: [...text] },
    { name: `random sizes (seed ${seed})`, chunks: sized },
    { name: "chunks ending at the cuts", chunks: atCuts },
  ];
}

function capture(rules: RedactionRule[], chunks: string[], options: { max: number; stream?: "out" | "err" }) {
  const redactor = createRedactor(rules);
  const texts: string[] = [];
  const echoed: string[] = [];
  const lc = new LineCapture(
    options.stream ?? "out",
    createStampClock(),
    (line) => texts.push(line.text),
    options.max,
    undefined,
    { redactor, echo: (text) => echoed.push(text) },
  );
  for (const chunk of chunks) lc.push(chunk);
  lc.end();
  return { texts, echoed, echo: echoed.join(""), statement: redactor.statement(), split: lc.split };
}

/** No piece ends with the beginning of `value` while the next begins with the rest of it. */
function assertNoHalves(texts: readonly string[], value: string, what: string): void {
  for (let index = 1; index < texts.length; index += 1)
    for (let k = 1; k < value.length; k += 1)
      assert.ok(
        !(texts[index - 1]!.endsWith(value.slice(0, k)) && texts[index]!.startsWith(value.slice(k))),
        `${what}: pieces ${index - 1} and ${index} hold the value's halves at ${k}`,
      );
}

describe("cutting and masking: a credential across a cut", () => {
  const max = 64;
  const offsets: number[] = [];
  for (const cut of [max, 2 * max]) for (let at = cut - VALUE.length - 1; at <= cut + 1; at += 1) offsets.push(at);

  for (const stream of ["out", "err"] as const) {
    test(
      `Given the credential at every offset across the first and second cut of a long line on ${stream}, fed ` +
        "whole, a character at a time, in random chunks and in chunks ending at the cuts, Then the pieces joined are " +
        "the line masked whole, no piece holds the value or half of it, and the count is one",
      () => {
        for (const at of offsets) {
          const line = `${"a".repeat(at)}${VALUE}${"b".repeat(3 * max + 5 - at - VALUE.length)}`;
          const expected = `${"a".repeat(at)}${MASK}${"b".repeat(3 * max + 5 - at - VALUE.length)}`;
          for (const { name, chunks } of chunkings(`${line}\nnext\n`, max, at)) {
            const what = `offset ${at}, ${name}`;
            const { texts, statement, echo, split } = capture([CREDENTIAL], chunks, { max, stream });
            assert.equal(texts.at(-1), "next", what);
            const pieces = texts.slice(0, -1);
            assert.equal(pieces.join(""), expected, what);
            assert.ok(pieces.length >= 2 && split === pieces.length - 1, `${what}: the line is cut`);
            for (const piece of pieces) assert.ok(!piece.includes(VALUE), `${what}: ${piece}`);
            assertNoHalves(pieces, VALUE, what);
            assert.ok(
              pieces.every((piece) => piece.length <= max + MASK.length),
              `${what}: pieces stay near the bound`,
            );
            assert.deepEqual(statement, [{ rule: CREDENTIAL.name, count: 1 }], what);
            assert.equal(echo, `${expected}\nnext\n`, `${what}: the echo is the masked line`);
          }
        }
      },
    );
  }

  test(
    "Given overlapping occurrences of a credential chained across many cuts, Then they are one mask (a chain " +
      "longer than the bound is carried, not held), as masking the whole line gives",
    () => {
      const rules: RedactionRule[] = [{ name: "credential:CHAIN", kind: "literal", value: "abab" }];
      const line = `x${"ab".repeat(500)}y`;
      for (const { name, chunks } of chunkings(`${line}\n`, 16, 7)) {
        const { texts, statement } = capture(rules, chunks, { max: 16 });
        assert.equal(texts.join(""), "x[REDACTED:credential:CHAIN]y", name);
        assert.deepEqual(statement, [{ rule: "credential:CHAIN", count: 1 }], name);
      }
    },
  );

  test(
    "Given random lines with credentials that overlap, chain and repeat, any bound and any chunking, Then the " +
      "pieces joined are exactly the whole line masked, with the same counts, and the echo shows the same text",
    () => {
      const rules: RedactionRule[] = [
        { name: "credential:A", kind: "literal", value: "abab" },
        { name: "credential:B", kind: "literal", value: "babx" },
        { name: "credential:C", kind: "literal", value: "xy-long-value-xy" },
      ];
      const alphabet = ["a", "b", "x", "y", "-", "ab", "abab", "babx", "xy-long-value-xy", "xy-long-val"];
      for (let seed = 1; seed <= 300; seed += 1) {
        const next = random(seed);
        const lines: string[] = [];
        for (let count = 1 + Math.floor(next() * 3); count > 0; count -= 1) {
          let line = "";
          for (let length = Math.floor(next() * 400); line.length < length; )
            line += alphabet[Math.floor(next() * alphabet.length)];
          lines.push(line);
        }
        const max = 8 + Math.floor(next() * 40);
        const whole = createRedactor(rules);
        const expected = lines.map((line) => whole.apply(line));
        for (const { name, chunks } of chunkings(`${lines.join("\n")}\n`, max, seed)) {
          const { texts, statement, echo } = capture(rules, chunks, { max });
          const what = `seed ${seed}, bound ${max}, ${name}`;
          assert.equal(texts.join(""), expected.join(""), what);
          assert.deepEqual(statement, whole.statement(), what);
          assert.equal(echo, expected.map((line) => `${line}\n`).join(""), what);
        }
      }
    },
  );

  test(
    "Given a line of many times the bound without a newline, Then its pieces are emitted as it is read (the " +
      "line is never held whole), each masked",
    () => {
      const redactor = createRedactor([CREDENTIAL, GITHUB]);
      const texts: string[] = [];
      const lc = new LineCapture("out", createStampClock(), (line) => texts.push(line.text), 64 * 1024, undefined, {
        redactor,
      });
      const part = `${"w".repeat(16 * 1024 - VALUE.length - TOKEN.length - 2)} ${VALUE}${TOKEN} `;
      for (let index = 0; index < 64; index += 1) lc.push(part);
      assert.ok(texts.length >= 12, `${texts.length} pieces before the line ended`);
      lc.end();
      const joined = texts.join("");
      assert.ok(!joined.includes(VALUE) && !joined.includes(TOKEN.slice(4)));
      assert.deepEqual(redactor.statement(), [
        { rule: CREDENTIAL.name, count: 64 },
        { rule: GITHUB.name, count: 64 },
      ]);
    },
  );
});

describe("cutting and masking: a profile pattern across a cut", () => {
  const max = 64;
  for (const stream of ["out", "err"] as const) {
    test(
      `Given a GitHub token matched by a profile pattern at every offset across a cut on ${stream}, Then it is ` +
        "masked whole in one piece, and counted once",
      () => {
        for (let at = max - TOKEN.length - 1; at <= max + 1; at += 1) {
          const line = `${"a".repeat(at)}${TOKEN}${"b".repeat(2 * max)}`;
          const expected = `${"a".repeat(at)}[REDACTED:profile:github]${"b".repeat(2 * max)}`;
          for (const { name, chunks } of chunkings(`${line}\n`, max, at)) {
            const what = `offset ${at}, ${name}`;
            const { texts, statement, echo } = capture([GITHUB], chunks, { max, stream });
            assert.equal(texts.join(""), expected, what);
            assert.ok(texts.length >= 2, `${what}: the line is cut`);
            assertNoHalves(texts, TOKEN, what);
            for (const text of texts) assert.ok(!text.includes(TOKEN.slice(4, 20)), `${what}: ${text}`);
            assert.deepEqual(statement, [{ rule: GITHUB.name, count: 1 }], what);
            assert.equal(echo, `${expected}\n`, what);
          }
        }
      },
    );
  }

  test(
    "Given random lines, bounded patterns (a lookbehind, a word boundary, alternatives) beside credentials, any " +
      "bound and any chunking, Then the pieces joined are exactly the whole line masked, with the same counts",
    () => {
      const rules: RedactionRule[] = [
        { name: "credential:A", kind: "literal", value: "abab" },
        { name: "profile:x", kind: "pattern", source: "x[ab]{3}y" },
        { name: "profile:key", kind: "pattern", source: "(?<=k=)[ab]{2,5}" },
        { name: "profile:word", kind: "pattern", source: "\\bxy\\b|yx-?k" },
      ];
      const alphabet = ["a", "b", "x", "y", "k", "=", "-", " ", "k=", "xaby", "xy", "abab"];
      for (let seed = 1; seed <= 300; seed += 1) {
        const next = random(seed);
        let line = "";
        for (let length = Math.floor(next() * 500); line.length < length; )
          line += alphabet[Math.floor(next() * alphabet.length)];
        const max = 8 + Math.floor(next() * 40);
        const whole = createRedactor(rules);
        const expected = whole.apply(line);
        for (const { name, chunks } of chunkings(`${line}\n`, max, seed)) {
          const { texts, statement } = capture(rules, chunks, { max });
          const what = `seed ${seed}, bound ${max}, ${name}: ${JSON.stringify(line)}`;
          assert.equal(texts.join(""), expected, what);
          assert.deepEqual(statement, whole.statement(), what);
        }
      }
    },
  );

  test("Given a lookbehind's key just before a cut and its value just after, Then the value is masked", () => {
    const rules: RedactionRule[] = [{ name: "profile:password", kind: "pattern", source: "(?<=password=)[^\\s&]+" }];
    const line = `${"a".repeat(64 - "password=".length)}password=hunter2-is-long&${"b".repeat(200)}`;
    for (const { name, chunks } of chunkings(`${line}\n`, 64, 3)) {
      const { texts, statement } = capture(rules, chunks, { max: 64 });
      assert.equal(
        texts.join(""),
        `${"a".repeat(64 - "password=".length)}password=[REDACTED:profile:password]&${"b".repeat(200)}`,
        name,
      );
      assert.deepEqual(statement, [{ rule: "profile:password", count: 1 }], name);
    }
  });

  test(
    "Given a pattern match longer than the window (it runs past everything read), Then nothing of it is given " +
      "out: the rest of the line is masked (fail closed), counted once",
    () => {
      const rules: RedactionRule[] = [{ name: "profile:secret", kind: "pattern", source: "secret=\\S+" }];
      const line = `${"x".repeat(10)}secret=${"Z".repeat(5 * 64)} tail`;
      for (const { name, chunks } of chunkings(`${line}\nnext\n`, 64, 5)) {
        const { texts, statement } = capture(rules, chunks, { max: 64 });
        const joined = texts.join("");
        assert.ok(joined.startsWith(`${"x".repeat(10)}[REDACTED:profile:secret]`), `${name}: ${joined}`);
        assert.ok(!joined.includes("Z"), `${name}: ${joined}`);
        assert.equal(texts.at(-1), "next", name);
        assert.deepEqual(statement, [{ rule: "profile:secret", count: 1 }], name);
      }
    },
  );
});

describe("cutting and masking: how far a pattern's match reads", () => {
  test("analysePattern gives the longest text a match covers (lookaheads counted, 2 units a character with u)", () => {
    const longest = (source: string, flags = "") => analysePattern(source, flags).maxLength;
    assert.equal(longest("ghp_[A-Za-z0-9]{36}"), 40);
    assert.equal(longest("a|bcd|ef"), 3);
    assert.equal(longest("(?:ab){2,4}c?"), 9);
    assert.equal(longest("(?<=password=)[a-z]{8}"), 8, "a lookbehind reads before the match");
    assert.equal(longest("x(?=[0-9]{5})"), 6, "a lookahead reads past the match");
    assert.equal(longest("\\bkey\\b$"), 3);
    assert.equal(longest("\\p{L}{3}", "u"), 6);
    assert.equal(longest("bearer \\S+"), Infinity);
    assert.equal(longest("a{2,}"), Infinity);
  });

  test(
    "Given a bounded pattern whose match is longer than the window, Then the window widens to it: the match is " +
      "masked whole across a cut",
    () => {
      const rules: RedactionRule[] = [{ name: "profile:long", kind: "pattern", source: "K[0-9a-f]{150}" }];
      const value = `K${"0123456789abcdef".repeat(10).slice(0, 150)}`;
      for (let at = 0; at <= 130; at += 5) {
        const line = `${"z".repeat(at)}${value}${"z".repeat(300)}`;
        for (const { name, chunks } of chunkings(`${line}\n`, 64, at)) {
          const { texts, statement } = capture(rules, chunks, { max: 64 });
          assert.equal(texts.join(""), `${"z".repeat(at)}[REDACTED:profile:long]${"z".repeat(300)}`, name);
          assert.deepEqual(statement, [{ rule: "profile:long", count: 1 }], name);
        }
      }
    },
  );
});

describe("the live echo", () => {
  const rules = [{ ...CREDENTIAL, value: "tok-3cho-s3cret" }];
  const mask = MASK;

  test(
    "Given a line written in parts, Then the echo shows each decided beginning at once, holds back only what " +
      "may begin the credential, and never shows the value, not even across writes",
    () => {
      const redactor = createRedactor(rules);
      const echoed: string[] = [];
      const lc = new LineCapture("out", createStampClock(), () => undefined, 64 * 1024, undefined, {
        redactor,
        echo: (text) => echoed.push(text),
      });
      lc.push("waiting ");
      assert.equal(echoed.join(""), "waiting ", "shown before the line ends");
      lc.push("key=tok-3c");
      assert.equal(echoed.join(""), "waiting key=", "the beginning of the value is held back");
      lc.push("ho-s3cret done");
      assert.equal(echoed.join(""), `waiting key=${mask} done`);
      lc.push("\nnext\n");
      assert.equal(echoed.join(""), `waiting key=${mask} done\nnext\n`);
      for (const text of echoed) assert.ok(!text.includes("tok-3cho-s3cret"));
      assert.deepEqual(redactor.statement(), [{ rule: CREDENTIAL.name, count: 1 }], "the echo counts nothing");
    },
  );

  test(
    "Given carriage-return progress, Then each start of the line is shown (masked, even one the log never " +
      "keeps), a carriage return between them, and the line the log keeps last",
    () => {
      const { texts, echo } = capture(rules, ["10%\r", "20%\r", "tok-3cho-s3cret\r", "done\r", "\n"], {
        max: 64 * 1024,
      });
      assert.deepEqual(texts, ["done"]);
      assert.equal(echo, `10%\r20%\r${mask}\rdone\n`);
    },
  );

  test(
    "Given profile patterns, Then a partial line is not shown before it ends (a pattern is matched against " +
      "the whole line), and then masked",
    () => {
      const redactor = createRedactor([...rules, GITHUB]);
      const echoed: string[] = [];
      const lc = new LineCapture("out", createStampClock(), () => undefined, 64 * 1024, undefined, {
        redactor,
        echo: (text) => echoed.push(text),
      });
      lc.push(`clone ${TOKEN.slice(0, 10)}`);
      assert.equal(echoed.join(""), "");
      lc.push(`${TOKEN.slice(10)} ok\n`);
      assert.equal(echoed.join(""), "clone [REDACTED:profile:github] ok\n");
    },
  );

  test(
    "Given escapes in a partial line, Then it is shown when it ends, as the log keeps it; given a line " +
      "started over, Then the echo starts over with a carriage return",
    () => {
      assert.equal(capture(rules, ["\x1b[31mred", "\x1b[0m text\n"], { max: 64 * 1024 }).echo, "red text\n");
      assert.equal(capture(rules, ["ab", "\rxy\n"], { max: 64 * 1024 }).echo, "ab\rxy\n");
      assert.equal(capture(rules, ["abc", "def\n"], { max: 64 * 1024 }).echo, "abcdef\n");
      assert.equal(capture(rules, ["crlf\r", "\n"], { max: 64 * 1024 }).echo, "crlf\n");
    },
  );
});
