/**
 * The pure parts of run evidence: LineCapture (bytes to stamped lines) and
 * the log format's parser. Property-style: many generated inputs, each
 * checked against what the log must say.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { parseLog, type LogLine } from "../src/index.js";
import {
  LineCapture,
  cleanLine,
  createStampClock,
  formatFooter,
  formatLogLine,
  formatStamp,
  parseStamp,
} from "../src/evidence/index.js";

function capture(chunks: (string | Buffer)[], max?: number): { lines: LogLine[]; split: number } {
  const lines: LogLine[] = [];
  const lc = new LineCapture("out", createStampClock(), (line) => lines.push(line), max);
  for (const chunk of chunks) lc.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  lc.end();
  return { lines, split: lc.split };
}

/** A deterministic pseudo-random source, so a failure names a reproducible seed. */
function random(seed: number) {
  let state = seed >>> 0;
  return () => (state = (state * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}

describe("line capture", () => {
  test(
    "Given any split of a text into chunks, Then the lines are the same (CR, " +
      "ANSI, UTF-8 split across chunks), stamps strictly increase, and the " +
      "final line without a newline is kept",
    () => {
      const text =
        "plain\n\x1b[1;31mred\x1b[0m bold\nprogress 10%\rprogress " +
        "100%\nwin\r\n\x1b]0;title\x07after osc\nsnow ☃ é 𝄞\ntab\tkept\nlast " +
        "without newline";
      const expected = [
        "plain",
        "red bold",
        "progress 100%",
        "win",
        "after osc",
        "snow ☃ é 𝄞",
        "tab\tkept",
        "last without newline",
      ];
      const bytes = Buffer.from(text);
      for (let seed = 1; seed <= 200; seed += 1) {
        const next = random(seed);
        const chunks: Buffer[] = [];
        for (let at = 0; at < bytes.length; ) {
          const size = 1 + Math.floor(next() * 12);
          chunks.push(bytes.subarray(at, at + size));
          at += size;
        }
        const { lines } = capture(chunks);
        assert.deepEqual(
          lines.map((line) => line.text),
          expected,
          `seed ${seed}`,
        );
        const stamps = lines.map((line) => parseStamp(line.at));
        for (let i = 1; i < stamps.length; i += 1)
          assert.ok(stamps[i]! > stamps[i - 1]!, `seed ${seed}: stamp ${i} increases`);
      }
    },
  );

  test("Given a thousand lines in one chunk, Then a thousand distinct, strictly increasing stamps", () => {
    const { lines } = capture([Array.from({ length: 1000 }, (_, i) => `line ${i}\n`).join("")]);
    assert.equal(lines.length, 1000);
    assert.equal(new Set(lines.map((line) => line.at)).size, 1000);
    for (let i = 1; i < lines.length; i += 1) assert.ok(parseStamp(lines[i]!.at) > parseStamp(lines[i - 1]!.at));
  });

  test(
    "Given a clock that does not move (lines read within one microsecond), " +
      "Then stamps still strictly increase, one microsecond apart",
    () => {
      const clock = createStampClock(
        () => Date.UTC(2026, 11, 1, 4),
        () => 5n,
      );
      const stamps = Array.from({ length: 5 }, () => clock.next());
      assert.deepEqual(
        stamps,
        [0, 1, 2, 3, 4].map((n) => `2026-12-01T04:00:00.00000${n}Z`),
      );
      assert.equal(new Set(stamps).size, 5);
      for (let i = 1; i < 5; i += 1) assert.equal(parseStamp(stamps[i]!) - parseStamp(stamps[i - 1]!), 1);
    },
  );

  test(
    "Given a line is completed by a later chunk, Then it is stamped when " +
      "that chunk is pushed, not before and not at end()",
    async () => {
      const lines: LogLine[] = [];
      const lc = new LineCapture("err", createStampClock(), (line) => lines.push(line));
      lc.push(Buffer.from("first\nsec"));
      assert.equal(lines.length, 1, "the unfinished line is not emitted yet");
      await new Promise((done) => setTimeout(done, 120));
      const before = Date.now() * 1000;
      lc.push(Buffer.from("ond\n"));
      assert.equal(lines.length, 2);
      assert.ok(parseStamp(lines[1]!.at) >= before - 5000, "stamped when its newline arrived");
      assert.ok(
        parseStamp(lines[1]!.at) - parseStamp(lines[0]!.at) >= 100_000,
        "the pause between the chunks shows between the stamps",
      );
      assert.equal(lines[1]!.stream, "err");
    },
  );

  test("Given invalid UTF-8, Then it becomes U+FFFD; given other control characters, Then they are dropped", () => {
    const { lines } = capture([Buffer.from([0x61, 0xff, 0x62, 0x0a]), "bell\x07 back\x08space\x1b(B done\n"]);
    assert.deepEqual(
      lines.map((line) => line.text),
      ["a\ufffdb", "bell backspace done"],
    );
  });

  test("Given a line longer than the bound, Then it is cut into pieces of the bound and counted as split", () => {
    const { lines, split } = capture([`${"x".repeat(25)}\nshort\n`, "y".repeat(12)], 10);
    assert.deepEqual(
      lines.map((line) => line.text),
      ["xxxxxxxxxx", "xxxxxxxxxx", "xxxxx", "short", "yyyyyyyyyy", "yy"],
    );
    assert.equal(split, 3);
  });

  test(
    "Given an ordinary line, Then cleanLine leaves it alone (no " +
      "over-stripping of brackets, hex or escapes-lookalikes)",
    () => {
      for (const text of ["[ok] a [31m b", "sha256-0123abcd", "C:\\path\\to", "50% done; 100%"])
        assert.equal(cleanLine(text), text);
    },
  );
});

describe("log format", () => {
  test("Given lines and a footer, Then parseLog reads back exactly what was written", () => {
    const clock = createStampClock();
    const lines: LogLine[] = [
      { at: clock.next(), stream: "out", text: "hello world" },
      { at: clock.next(), stream: "err", text: "  two  spaces  " },
      { at: clock.next(), stream: "out", text: "" },
    ];
    const text = lines.map(formatLogLine).join("") + formatFooter({ code: 42, signal: null }, "FAILED", ["a note"]);
    const parsed = parseLog(text);
    assert.deepEqual(parsed.lines, lines);
    assert.deepEqual(parsed.footer, ["# note: a note", "# exit: code 42", "# RESULT: FAILED"]);
    assert.deepEqual(parsed.exit, { code: 42, signal: null });
    assert.equal(parsed.result, "FAILED");
    assert.deepEqual(parseLog(formatFooter({ code: null, signal: "SIGKILL" }, "FAILED")).exit, {
      code: null,
      signal: "SIGKILL",
    });
    assert.deepEqual(parseLog(formatFooter(null, "INTERRUPTED")).exit, { code: null, signal: null });
  });

  test("Given stamps, Then formatStamp and parseStamp round-trip at microsecond precision", () => {
    const four = Date.UTC(2026, 11, 1, 4) * 1000;
    for (const micros of [0, 1, 999, 1_000_000, four + 123_456, four + 999_999])
      assert.equal(parseStamp(formatStamp(micros)), micros);
    assert.equal(formatStamp(four + 123_456), "2026-12-01T04:00:00.123456Z");
    assert.ok(Number.isNaN(parseStamp("2026-12-01T04:00:00.123Z")));
    assert.ok(Number.isNaN(parseStamp("2026-13-01T04:00:00.123456Z")));
  });

  for (const [name, text] of [
    ["stamps that do not increase", "2026-12-01T04:00:00.000002Z out a\n2026-12-01T04:00:00.000002Z out b\n"],
    ["an unknown stream", "2026-12-01T04:00:00.000001Z tty a\n"],
    ["a torn last line", "2026-12-01T04:00:00.000001Z out a"],
    ["a line after the footer", "# exit: code 0\n# RESULT: OK\n2026-12-01T04:00:00.000001Z out a\n"],
    ["a footer without RESULT", "# exit: code 0\n"],
    ["RESULT before exit", "# RESULT: OK\n"],
    ["an unknown result", "# exit: code 0\n# RESULT: FINE\n"],
    ["a bad exit", "# exit: code 256\n# RESULT: OK\n"],
  ] as const) {
    test(`Given ${name}, Then parseLog refuses it (invalid-artifact, run-log-malformed)`, () => {
      assert.throws(
        () => parseLog(text),
        (error: any) => error.code === "invalid-artifact" && error.details.reason === "run-log-malformed",
      );
    });
  }
});
