/**
 * Masking across the 64 Ki line bound in real runs (docs/design/evidence.md,
 * "Cutting and masking"): a child prints long lines with a credential, or a
 * token a profile pattern matches, at every offset across the first cut, on
 * stdout and on stderr. The sealed log (its file's bytes), the outbox copy
 * and the echo hold neither the value nor its halves, and the record's
 * counts say one mask a line.
 */
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { describe, test } from "node:test";
import { parseLog, runDispatchPlanWithEvidence } from "../src/index.js";
import { MAX_LINE_CHARS } from "../src/evidence/index.js";
import { evidenceFixture } from "./support/evidence-fixture.js";
import { logText, runDir } from "./support/evidence-run.js";

const CUT = MAX_LINE_CHARS;
const SECRET = "Tk9-CUT-s3cret-Value-77x";
const TOKEN = `ghp_${"Zq7".repeat(12)}`;
/** Past the cut, so each line is cut once. */
const LENGTH = CUT + 3000;

/** A Node child printing `value` at each offset from `first` to `last` in a line of LENGTH, on stdout and stderr. */
function printer(value: string, first: number, last: number): string {
  return (
    `const value = ${value};\n` +
    `for (let at = ${first}; at <= ${last}; at++) {\n` +
    `  const line = "a".repeat(at) + value + "b".repeat(${LENGTH} - at - value.length) + "\\n";\n` +
    "  process.stdout.write(line);\n  process.stderr.write(line);\n}\n"
  );
}

function collector() {
  const stream = new PassThrough();
  const chunks: Buffer[] = [];
  stream.on("data", (chunk: Buffer) => chunks.push(chunk));
  return { stream, text: () => Buffer.concat(chunks).toString("utf8") };
}

/** Run the capture; what the log, the outbox and the echo hold. */
async function printed(options: Parameters<typeof evidenceFixture>[0], env: Record<string, string> = {}) {
  const f = await evidenceFixture(options);
  const stdout = collector();
  const stderr = collector();
  const outcome = await runDispatchPlanWithEvidence(f.scope, await f.plan(env), {
    output: { stdout: stdout.stream, stderr: stderr.stream },
  });
  const logFile = readFileSync(join(runDir(f.scope, outcome.handle), "log"), "utf8");
  const entries = join(f.scope, ".agents/outbox/entries");
  const entry = readdirSync(entries).find((name) => name.endsWith(outcome.runId.slice("sha256-".length)))!;
  const outbox = readFileSync(join(entries, entry, "log"), "utf8");
  return { outcome, logFile, outbox, parsed: parseLog(logText(f.scope, outcome.handle)), echo: [stdout, stderr] };
}

/** Every place the value could be rebuilt from: the log file, the outbox copy, the echo, and each stream's texts. */
function assertNowhere(
  run: Awaited<ReturnType<typeof printed>>,
  value: string,
  expected: (at: number) => string,
  offsets: number[],
) {
  assert.ok(!run.logFile.includes(value), "the value is not in the sealed log");
  assert.equal(run.outbox, run.logFile, "the outbox holds the log's bytes");
  for (const stream of ["out", "err"] as const) {
    const texts = run.parsed.lines.filter((line) => line.stream === stream).map((line) => line.text);
    const joined = texts.join("");
    assert.ok(!joined.includes(value), `${stream}: the texts joined do not rebuild the value`);
    assert.equal(joined, offsets.map(expected).join(""), `${stream}: the lines masked whole`);
    for (let index = 1; index < texts.length; index += 1)
      for (let k = 1; k < value.length; k += 1)
        assert.ok(
          !(texts[index - 1]!.endsWith(value.slice(0, k)) && texts[index]!.startsWith(value.slice(k))),
          `${stream}: pieces ${index - 1} and ${index} hold the halves of the value at ${k}`,
        );
    // A half long enough to matter (a credential has at least 4 characters) appears nowhere.
    for (let k = 4; k <= value.length - 4; k += 1)
      for (const half of [value.slice(0, k), value.slice(k)])
        assert.ok(!joined.includes(half), `${stream}: the half ${JSON.stringify(half)} is in the log`);
  }
  for (const [index, sink] of run.echo.entries()) {
    const shown = sink.text();
    assert.ok(!shown.includes(value), `the echo of ${index === 0 ? "stdout" : "stderr"} holds the value`);
    assert.equal(shown, offsets.map((at) => `${expected(at)}\n`).join(""), "the echo shows the lines masked");
  }
}

describe("run evidence: masking across the line bound", () => {
  test(
    "Given a credential at every offset across the 64 Ki cut, on stdout and on stderr, Then the value and its " +
      "halves are nowhere in the sealed log, the outbox or the echo, each line is masked once, and counted",
    async () => {
      const first = CUT - SECRET.length - 1;
      const last = CUT + 1;
      const offsets = Array.from({ length: last - first + 1 }, (_, index) => first + index);
      const run = await printed(
        { node: true, credentials: ["CUT_TOKEN"], script: printer("process.env.CUT_TOKEN", first, last) },
        { CUT_TOKEN: SECRET },
      );
      assert.equal(run.outcome.result, "OK");
      const mask = "[REDACTED:credential:CUT_TOKEN]";
      assertNowhere(run, SECRET, (at) => `${"a".repeat(at)}${mask}${"b".repeat(LENGTH - at - SECRET.length)}`, offsets);
      assert.deepEqual(run.outcome.record.redactions, [{ rule: "credential:CUT_TOKEN", count: 2 * offsets.length }]);
      assert.ok(
        run.parsed.footer.some((line) => /lines were longer than the line bound/.test(line)),
        run.parsed.footer.join("\n"),
      );
    },
  );

  test(
    "Given a token a profile pattern matches at every offset across the 64 Ki cut, on stdout and on stderr, " +
      "Then it is masked whole, nowhere in the log, the outbox or the echo, and counted once a line",
    async () => {
      const first = CUT - TOKEN.length - 1;
      const last = CUT + 1;
      const offsets = Array.from({ length: last - first + 1 }, (_, index) => first + index);
      const run = await printed({
        node: true,
        redact: [{ name: "github", pattern: "ghp_[A-Za-z0-9]{36}" }],
        script: printer(JSON.stringify(TOKEN), first, last),
      });
      assert.equal(run.outcome.result, "OK");
      assertNowhere(
        run,
        TOKEN,
        (at) => `${"a".repeat(at)}[REDACTED:profile:github]${"b".repeat(LENGTH - at - TOKEN.length)}`,
        offsets,
      );
      assert.deepEqual(run.outcome.record.redactions, [{ rule: "profile:github", count: 2 * offsets.length }]);
    },
  );
});
