/**
 * The chunk-at-a-time capture path (line-capture.ts, run-exec.ts): one clock
 * reading per chunk, consecutive stamps for its lines, one redaction
 * pre-check per chunk. Each test fails if the fast path skips stamping,
 * cleaning or masking.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { createRedactor } from "../src/captures/redact.js";
import { parseLog, readRun, runDispatchPlanWithEvidence, type LogLine } from "../src/index.js";
import { LineCapture, createStampClock, formatStamp, parseStamp } from "../src/evidence/index.js";
import { evidenceFixture } from "./support/evidence-fixture.js";
import { logText } from "./support/evidence-run.js";

const EPOCH_US = Date.UTC(2026, 11, 1, 4) * 1000;

/** A clock whose hrtime is set by the test (nanoseconds since its origin). */
function steppedClock() {
  let ns = 0n;
  const clock = createStampClock(
    () => EPOCH_US / 1000,
    () => ns,
  );
  return { clock, at: (micros: number) => (ns = BigInt(micros) * 1000n) };
}

describe("capture: a chunk of many lines", () => {
  test(
    "Given 1000 lines in one chunk read at a frozen clock, Then 1000 " +
      "distinct, strictly increasing stamps, the first one the reading",
    () => {
      const { clock, at } = steppedClock();
      at(500);
      const lines: LogLine[] = [];
      const capture = new LineCapture("out", clock, (line) => lines.push(line));
      capture.push(Buffer.from(Array.from({ length: 1000 }, (_, i) => `line ${i}\n`).join("")));
      assert.equal(lines.length, 1000);
      assert.equal(capture.count, 1000);
      const stamps = lines.map((line) => parseStamp(line.at));
      assert.equal(
        stamps[0],
        EPOCH_US + 500,
        "the chunk's first line is stamped with the reading taken when the chunk was pushed",
      );
      for (let i = 1; i < stamps.length; i += 1)
        assert.equal(stamps[i], stamps[i - 1]! + 1, `line ${i} is 1 us after the one before`);
      assert.deepEqual(
        lines.slice(0, 2).map((line) => line.text),
        ["line 0", "line 1"],
      );
    },
  );

  test(
    "Given two chunks on two streams sharing a clock, Then stamps stay " +
      "strictly increasing across them, and a later chunk is stamped with its " +
      "own reading",
    () => {
      const { clock, at } = steppedClock();
      const batches: Array<{ stream: string; first: number; texts: readonly string[] }> = [];
      const sink = (stream: "out" | "err", first: number, texts: readonly string[]) =>
        batches.push({ stream, first, texts: [...texts] });
      const out = new LineCapture("out", clock, () => assert.fail("a batch sink gets the lines"), 64 * 1024, sink);
      const err = new LineCapture("err", clock, () => assert.fail("a batch sink gets the lines"), 64 * 1024, sink);
      at(10);
      out.push("a\nb\nc\n");
      err.push("d\ne\n"); // same reading: must follow c
      at(1_000_000);
      out.push("f\n");
      assert.deepEqual(
        batches.map((batch) => [batch.stream, batch.first - EPOCH_US, batch.texts.join(",")]),
        [
          ["out", 10, "a,b,c"],
          ["err", 13, "d,e"],
          ["out", 1_000_000, "f"],
        ],
      );
      assert.equal(clock.last(), EPOCH_US + 1_000_000);
    },
  );

  test(
    "Given a chunk of plain lines with one line carrying an escape and a " +
      "carriage return, Then that line alone is cleaned; a line split across " +
      "chunks joins and is stamped when completed",
    () => {
      const { clock, at } = steppedClock();
      const lines: LogLine[] = [];
      const capture = new LineCapture("out", clock, (line) => lines.push(line));
      at(1);
      capture.push(`${"plain\n".repeat(50)}\x1b[31mred\x1b[0m\nhalf one\rwhole\npart`);
      at(99);
      capture.push("ial\n");
      assert.equal(lines.length, 53);
      assert.equal(lines[50]!.text, "red");
      assert.equal(lines[51]!.text, "whole");
      assert.equal(lines[52]!.text, "partial");
      assert.equal(parseStamp(lines[52]!.at), EPOCH_US + 99);
    },
  );
});

describe("capture: redaction pre-check", () => {
  test("mayMatch is false only when no credential value occurs and no pattern rule exists", () => {
    const literal = createRedactor([{ name: "credential:TOKEN", kind: "literal", value: "s3cret-tok" }]);
    assert.equal(literal.mayMatch("a\nb\nc"), false);
    assert.equal(literal.mayMatch(`a\nxx s3cret-tok yy\nc`), true);
    const pattern = createRedactor([{ name: "profile:digits", kind: "pattern", source: "\\d{6}" }]);
    assert.equal(pattern.mayMatch("nothing here"), true, "a pattern rule is always checked line by line");
  });

  test(
    "Given a real run printing 20,000 plain lines with the credential on one " +
      "of them, Then that line is masked, the value is nowhere in the log, and " +
      "the count is 1",
    async () => {
      const secret = "tok-batch-s3cret";
      const f = await evidenceFixture({
        node: true,
        credentials: ["API_TOKEN"],
        script:
          "const out = [];\nfor (let i = 0; i < 20000; i++) out.push(i === 12345 ? " +
          "`key=${process.env.API_TOKEN}!` : `line " +
          "${i}`);\nprocess.stdout.write(out.join('\\n') + '\\n');\n",
      });
      const plan = await f.plan({ API_TOKEN: secret });
      const outcome = await runDispatchPlanWithEvidence(f.scope, plan, { output: "quiet" });
      const text = logText(f.scope, outcome.handle);
      assert.ok(!text.includes(secret), "the credential value is not in the log");
      const parsed = parseLog(text);
      assert.equal(parsed.lines.length, 20000);
      assert.equal(parsed.lines[12345]!.text, "key=[REDACTED:credential:API_TOKEN]!");
      assert.equal(parsed.lines[12346]!.text, "line 12346");
      assert.deepEqual(outcome.record.redactions, [{ rule: "credential:API_TOKEN", count: 1 }]);
      assert.equal(outcome.record.log.lines, 20000);
      const stamps = parsed.lines.map((line) => parseStamp(line.at));
      for (let i = 1; i < stamps.length; i += 1)
        assert.ok(stamps[i]! > stamps[i - 1]!, `stamp ${i} is after stamp ${i - 1}`);
      assert.equal(readRun(f.scope, outcome.runId).lines.length, 20000);
      assert.equal(formatStamp(stamps[0]!), parsed.lines[0]!.at);
    },
  );
});
