/**
 * Runs of real child processes (sh scripts and Node programs retained,
 * approved and dispatched as captures) through runDispatchPlanWithEvidence:
 * what the log, the sealed record and the audit log say afterwards.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { describe, test, type TestContext } from "node:test";
import {
  OatsError,
  bytesDigest,
  canonicalJsonBytes,
  parseLog,
  readAudit,
  readRun,
  runDispatchPlanWithEvidence,
  verifyRun,
  type RunWithEvidenceOptions,
} from "../src/index.js";
import { parseStamp } from "../src/evidence/index.js";
import { tempDir } from "./helpers.js";
import { MOUNT_SKIP, mountAt, shareTempDir } from "./support/shares.js";
import { makeUnwritable } from "./support/unwritable.js";
import { evidenceFixture, type ScriptOptions } from "./support/evidence-fixture.js";
import { alive, logText, runDir, waitFor } from "./support/evidence-run.js";
import { refusal } from "./support/refusals.js";

async function run(script: ScriptOptions, options: RunWithEvidenceOptions = {}, env: Record<string, string> = {}) {
  const f = await evidenceFixture(script);
  const plan = await f.plan(env);
  const outcome = await runDispatchPlanWithEvidence(f.scope, plan, { output: "quiet", ...options });
  const parsed = parseLog(logText(f.scope, outcome.handle));
  return { f, plan, outcome, parsed };
}

const sh = (body: string, extra: Partial<ScriptOptions> = {}): ScriptOptions => ({
  script: `#!/bin/sh\n${body}\n`,
  ...extra,
});

describe("run evidence: stamps", () => {
  test(
    "Given three lines 1.2 s apart, Then three distinct stamps, and each " +
      "real gap shows as a gap of 1 to 8 s in the log",
    async () => {
      const { parsed } = await run(sh("echo one\nsleep 1.2\necho two\nsleep 1.2\necho three"));
      assert.deepEqual(
        parsed.lines.map((line) => line.text),
        ["one", "two", "three"],
      );
      const stamps = parsed.lines.map((line) => parseStamp(line.at));
      assert.equal(new Set(stamps).size, 3, "three distinct stamps");
      for (const gap of [stamps[1]! - stamps[0]!, stamps[2]! - stamps[1]!]) {
        assert.ok(gap >= 1_000_000 && gap <= 8_000_000, `a 1.2 s gap in the source is ${gap} us in the log`);
      }
    },
  );

  test(
    "Given a burst of 5000 lines on stdout and stderr, Then every line is " +
      "logged, in order per stream, with strictly increasing stamps",
    async () => {
      const { parsed, outcome } = await run({
        node: true,
        script: "for (let i = 0; i < 5000; i++) (i % 3 ? process.stdout : process.stderr).write(`line ${i}\\n`);\n",
      });
      assert.equal(parsed.lines.length, 5000);
      assert.equal(outcome.record.log.lines, 5000);
      const stamps = parsed.lines.map((line) => parseStamp(line.at));
      for (let i = 1; i < stamps.length; i += 1) assert.ok(stamps[i]! > stamps[i - 1]!, `stamp ${i}`);
      const out = parsed.lines.filter((line) => line.stream === "out").map((line) => Number(line.text.slice(5)));
      assert.deepEqual(
        out,
        [...out].sort((a, b) => a - b),
      );
      assert.equal(parsed.lines.filter((line) => line.stream === "err").length, 1667);
    },
  );
});

describe("run evidence: a log of megabytes", () => {
  test(
    "Given 40,000 lines written in bursts of 2,000, Then every line is " +
      "logged in order with increasing stamps, the record's digest and size " +
      "are the log file's, and the outbox entry holds the same bytes",
    async () => {
      const { f, outcome, parsed } = await run({
        node: true,
        script:
          "const lines = [];\nfor (let i = 0; i < 40000; i++) { lines.push(`line " +
          "${i} ${'y'.repeat(i % 47)}`); if (lines.length === 2000) { " +
          "process.stdout.write(lines.join('\\n') + '\\n'); lines.length = 0; } }\n",
      });
      assert.equal(parsed.lines.length, 40_000);
      assert.equal(outcome.record.log.lines, 40_000);
      parsed.lines.forEach((line, index) => {
        assert.equal(line.text, `line ${index} ${"y".repeat(index % 47)}`);
      });
      const stamps = parsed.lines.map((line) => parseStamp(line.at));
      for (let i = 1; i < stamps.length; i += 1) assert.ok(stamps[i]! > stamps[i - 1]!, `stamp ${i}`);
      const log = readFileSync(join(runDir(f.scope, outcome.handle), "log"));
      assert.ok(log.length > 1024 * 1024, `${log.length} bytes`);
      assert.deepEqual(outcome.record.log, { digest: bytesDigest(log), lines: 40_000, bytes: log.length });
      const entries = join(f.scope, ".agents/outbox/entries");
      const queued = readdirSync(entries).filter((name) => name.endsWith(outcome.runId.slice("sha256-".length)));
      assert.equal(queued.length, 1);
      assert.ok(readFileSync(join(entries, queued[0]!, "log")).equals(log));
    },
  );
});

/** A 1 MiB tmpfs to fill, mounted for the test; null (the test skipped, by name) where mounting is not permitted. */
function smallFilesystem(t: TestContext): string | null {
  const mount = join(shareTempDir("oats-full-"), "mnt");
  mkdirSync(mount);
  if (mountAt(mount, "1m")) return mount;
  t.skip(`SKIPPED by name: a full filesystem needs a tmpfs mount, ${MOUNT_SKIP}`);
  return null;
}

describe("run evidence: a log that cannot be written", () => {
  test(
    "Given a child whose output fills the scope's filesystem (a 1 MiB " +
      "tmpfs), Then the dispatcher does not crash: the child is stopped, the " +
      "log holds whole lines only, and the run refuses (audit-unavailable, " +
      "log-unwritable); sealed CANCELLED with the cause when the seal had room",
    async (t) => {
      const mount = smallFilesystem(t);
      if (mount === null) return;
      const f = await evidenceFixture({
        node: true,
        scope: join(mount, "scope"),
        script:
          "const chunk = ('x'.repeat(99) + '\\n').repeat(1000);\nfor (let i = 0; i " +
          "< 100; i++) process.stdout.write(chunk);\nsetTimeout(() => undefined, 120000);\n",
      });
      const plan = await f.plan();
      const started = Date.now();
      const error = await runDispatchPlanWithEvidence(f.scope, plan, { output: "quiet", graceMs: 500 }).then(
        () => assert.fail("a run whose log cannot be written is refused"),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof OatsError, String(error));
      assert.equal(error.code, "audit-unavailable", error.message);
      assert.equal(error.details["reason"], "log-unwritable");
      assert.ok(Date.now() - started < 60_000, "the child (which would sleep two minutes) was stopped");
      const handle = String(error.details["handle"]);
      const control = JSON.parse(readFileSync(join(runDir(f.scope, handle), "control.json"), "utf8"));
      await waitFor("the child gone", () => !alive(control.child.pid));
      const text = logText(f.scope, handle);
      assert.ok(text.length > 0 && text.endsWith("\n"), "no torn last line");
      for (const line of text.split("\n").slice(0, -1)) assert.match(line, /^(\S+Z out x{99}|# .*)$/);
      if (error.details["sealed"] === true) {
        const run = readRun(f.scope, handle);
        assert.equal(run.record!.result, "CANCELLED");
        assert.equal(run.record!.log.lines, run.lines.length);
        assert.ok(
          run.footer.some((line) => line.includes("the log could not be written")),
          run.footer.join("\n"),
        );
      } else {
        t.diagnostic("the seal found no room either: the run is left unsealed for `oats run seal`");
        assert.equal(error.details["sealed"], false);
      }
    },
  );

  test(
    "Given room for every whole line but not the last one, which has no " +
      "newline and is logged only once the child has ended, Then the run is " +
      "sealed with the child's own result, the cause in a footer note, and " +
      "refused as log-unwritable",
    async (t) => {
      const mount = smallFilesystem(t);
      if (mount === null) return;
      // The child measures the room left: whole lines (132 bytes each in the log) up to 24 KiB short of it, then
      // 60,000 characters without a newline, which the log takes only at the end of the stream. It prints its count on
      // stderr.
      const f = await evidenceFixture({
        node: true,
        scope: join(mount, "scope"),
        script:
          `import { statfsSync } from "node:fs";\nconst { bavail, bsize } = ` +
          `statfsSync(${JSON.stringify(mount)});\nconst n = Math.floor((bavail * ` +
          `bsize - 24 * 1024) / 132 / 100) * 100;\nconst chunk = ('x'.repeat(99) + ` +
          `'\\n').repeat(100);\nfor (let i = 0; i < n; i += 100) ` +
          `process.stdout.write(chunk);\nprocess.stdout.write('y'.repeat(60000));\nprocess.stderr.write(n ` +
          `+ '\\n');\n`,
      });
      const error = await runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet" }).then(
        () => assert.fail("a run whose last line cannot be logged is refused"),
        (caught: unknown) => caught,
      );
      assert.ok(error instanceof OatsError, String(error));
      assert.equal(error.details["reason"], "log-unwritable", error.message);
      assert.equal(error.details["sealed"], true, error.message);
      const run = readRun(f.scope, String(error.details["handle"]));
      assert.equal(run.record!.result, "OK", "the child ended on its own: nothing was cancelled");
      // Two pipes: the count (stderr) may be read before the last stdout lines.
      const counts = run.lines.filter((line) => line.stream === "err");
      assert.equal(counts.length, 1);
      const lines = Number(counts[0]!.text);
      assert.ok(lines > 1000, `${lines} lines`);
      assert.equal(run.lines.length, lines + 1, "every whole line and the count, not the last line");
      assert.equal(run.record!.log.lines, lines + 1);
      assert.ok(
        run.footer.some((line) => line.startsWith("# note: the log could not be written")),
        run.footer.join("\n"),
      );
    },
  );
});

describe("run evidence: exit status and result", () => {
  for (const [code, result] of [
    [42, "FAILED"],
    [0, "OK"],
  ] as const) {
    test(
      `Given a child that prints and exits ${code}, Then exit code ${code} ` +
        `passes through, the record and footer say code ${code} and RESULT ` +
        `${result}, and the output before the exit is all there`,
      async () => {
        const { outcome, parsed } = await run(sh(`echo before\necho also >&2\nexit ${code}`));
        assert.equal(outcome.exitCode, code);
        assert.deepEqual(outcome.exit, { code, signal: null });
        assert.equal(outcome.result, result);
        assert.deepEqual(outcome.record.exit, { code, signal: null });
        assert.equal(outcome.record.result, result);
        assert.deepEqual(parsed.footer.slice(-2), [`# exit: code ${code}`, `# RESULT: ${result}`]);
        assert.deepEqual(
          parsed.lines.map((line) => `${line.stream} ${line.text}`),
          ["out before", "err also"],
        );
      },
    );
  }

  test(
    "Given a child killed by a signal, Then the signal is recorded (not a " +
      "code), the exit code is 128 + its number, and RESULT is FAILED",
    async () => {
      const { outcome, parsed } = await run(sh("echo dying\nkill -KILL $$"));
      assert.deepEqual(outcome.exit, { code: null, signal: "SIGKILL" });
      assert.equal(outcome.exitCode, 137);
      assert.equal(outcome.result, "FAILED");
      assert.deepEqual(parsed.footer.slice(-2), ["# exit: signal SIGKILL", "# RESULT: FAILED"]);
      assert.deepEqual(
        parsed.lines.map((line) => line.text),
        ["dying"],
      );
    },
  );
});

describe("run evidence: text, not a terminal", () => {
  test(
    "Given ANSI colours, an OSC title, carriage-return progress, stderr and " +
      "a final line without a newline, Then the log holds clean text per " +
      "stream, and the operator's echo shows that text (never the raw bytes)",
    async () => {
      const script = [
        'process.stdout.write("\\x1b[32mgreen\\x1b[0m text\\n");',
        'process.stdout.write("\\x1b]0;a title\\x07titled\\n");',
        'process.stdout.write("10%\\r50%\\r100%\\n");',
        'process.stderr.write("warning: on stderr\\n");',
        'process.stdout.write("no newline at the end");',
      ].join("\n");
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      const raw = { out: [] as Buffer[], err: [] as Buffer[] };
      stdout.on("data", (chunk: Buffer) => raw.out.push(chunk));
      stderr.on("data", (chunk: Buffer) => raw.err.push(chunk));
      const { parsed } = await run({ node: true, script }, { output: { stdout, stderr } });
      const rows = parsed.lines.map((line) => `${line.stream} ${line.text}`);
      assert.deepEqual(
        rows.filter((row) => row.startsWith("out")),
        ["out green text", "out titled", "out 100%", "out no newline at the end"],
      );
      assert.deepEqual(
        rows.filter((row) => row.startsWith("err")),
        ["err warning: on stderr"],
      );
      assert.equal(rows.at(-1), "out no newline at the end", "the final line is kept, and last");
      assert.equal(Buffer.concat(raw.out).toString(), "green text\ntitled\n100%\nno newline at the end\n");
      assert.equal(Buffer.concat(raw.err).toString(), "warning: on stderr\n");
    },
  );

  test("Given output quiet, Then nothing is teed, and the log still has every line", async () => {
    const stdout = new PassThrough();
    let teed = 0;
    stdout.on("data", (chunk: Buffer) => (teed += chunk.length));
    const { parsed } = await run(sh("echo logged"), { output: "quiet" });
    assert.equal(teed, 0);
    assert.deepEqual(
      parsed.lines.map((line) => line.text),
      ["logged"],
    );
  });
});

describe("run evidence: the record, the files and the audit log", () => {
  test(
    "Given a run with a credential, Then the record names job, resolution, " +
      "composition, approval, dispatch and start entries, principal, times, " +
      "exit, result and the log's digest and line count; its bytes are " +
      "canonical and hash to the run id; the credential's value is nowhere in " +
      "the run's metadata",
    async () => {
      const { f, plan, outcome } = await run(
        sh("echo hi", { credentials: ["API_TOKEN"] }),
        {},
        { API_TOKEN: "tok-s3cret-value" },
      );
      const dir = runDir(f.scope, outcome.handle);
      const recordBytes = readFileSync(join(dir, "record.json"));
      assert.equal(bytesDigest(recordBytes), outcome.runId);
      assert.deepEqual(recordBytes, canonicalJsonBytes(outcome.record));
      const { record } = outcome;
      assert.equal(record.format, "oats.run.v1");
      assert.equal(record.handle, outcome.handle);
      assert.equal(record.job, f.job);
      assert.equal(record.resolution, f.resolution);
      assert.deepEqual(record.composition, { ...plan.composition });
      assert.deepEqual(record.approval, { seq: plan.approval.seq, hash: plan.approval.hash });
      assert.deepEqual(record.dispatchAudit, plan.audit);
      assert.equal(record.principal, plan.principal);
      assert.deepEqual(record.environment, Object.keys(plan.env).sort());
      assert.ok(record.environment.includes("API_TOKEN"));
      assert.ok(parseStamp(record.startedAt) < parseStamp(record.endedAt));
      const log = readFileSync(join(dir, "log"));
      assert.deepEqual(record.log, { digest: bytesDigest(log), lines: 1, bytes: log.length });
      assert.deepEqual(
        record.redactions,
        [{ rule: "credential:API_TOKEN", count: 0 }],
        "the redaction statement names the rule (the child printed no token)",
      );
      for (const name of readdirSync(dir))
        assert.ok(
          !readFileSync(join(dir, name)).includes("tok-s3cret-value") || name === "log",
          `${name} holds no credential value`,
        );
      assert.equal(statSync(dir).mode & 0o777, 0o700);
      assert.equal(statSync(join(dir, "log")).mode & 0o777, 0o600);
    },
  );

  test(
    "Given a run, Then the audit log holds dispatch, run-start (before the " +
      "child) and run-end (handle, run id, exit, result) in that order, and " +
      "verifyRun checks them",
    async () => {
      const { f, outcome } = await run(sh("echo hi\nexit 3"));
      const entries = readAudit(f.scope).entries;
      const dispatch = entries.findIndex((entry) => entry.action === "dispatch" && entry.outcome === "ok");
      const start = entries.findIndex((entry) => entry.action === "run-start");
      const end = entries.findIndex((entry) => entry.action === "run-end");
      assert.ok(dispatch >= 0 && dispatch < start && start < end, "dispatch, run-start, run-end in order");
      assert.deepEqual(entries[start]!.subject, { handle: outcome.handle, job: f.job, resolution: f.resolution });
      assert.deepEqual({ seq: entries[start]!.seq, hash: entries[start]!.hash }, outcome.record.startAudit);
      assert.equal(entries[end]!.details["runId"], outcome.runId);
      assert.deepEqual(entries[end]!.details["exit"], { code: 3, signal: null });
      assert.equal(entries[end]!.details["result"], "FAILED");
      const verdict = verifyRun(f.scope, outcome.runId);
      assert.deepEqual(verdict.checks, {
        record: true,
        log: true,
        audit: { start: entries[start]!.seq, end: entries[end]!.seq },
      });
      assert.equal(
        readRun(f.scope, outcome.handle.slice(0, 20)).runId,
        outcome.runId,
        "a unique prefix of the handle finds it",
      );
    },
  );

  test(
    "Given the audit log refuses the run-start entry, Then the child never " +
      "starts, no run is left behind and the plan's run copy is gone",
    async () => {
      const marker = join(tempDir("oats-marker-"), "marker");
      const g = await evidenceFixture(sh(`touch '${marker}'`));
      const plan = await g.plan();
      const auditDir = join(g.scope, ".agents/audit");
      const fault = makeUnwritable(auditDir, join(auditDir, "audit.jsonl"));
      try {
        await assert.rejects(
          runDispatchPlanWithEvidence(g.scope, plan, { output: "quiet" }),
          refusal("audit-unavailable"),
        );
      } finally {
        fault.restore();
      }
      assert.equal(existsSync(marker), false, "the child never ran");
      assert.deepEqual(
        readdirSync(join(g.scope, ".agents/runs")).filter((name) => name !== ".gitignore"),
        [],
      );
      assert.equal(existsSync(plan.run.dir), false);
    },
  );

  test(
    "Given a child that exits while a background process of its group keeps " +
      "the output pipe open, Then the run still ends (after the drain time), " +
      "the leftover is killed, and a note says so",
    async () => {
      const pidFile = join(tempDir("oats-bg-"), "bg.pid");
      const g = await evidenceFixture(sh(`sleep 300 &\necho "$!" > ${pidFile}\necho parent done`));
      const outcome = await runDispatchPlanWithEvidence(g.scope, await g.plan(), { output: "quiet", drainMs: 300 });
      const pid = Number(readFileSync(pidFile, "utf8"));
      await waitFor("the leftover to be gone", () => !alive(pid));
      assert.equal(outcome.result, "OK");
      const parsed = parseLog(logText(g.scope, outcome.handle));
      assert.ok(
        parsed.footer.some((line) => line.includes("still held its output")),
        parsed.footer.join("\n"),
      );
      assert.deepEqual(
        parsed.lines.map((line) => line.text),
        ["parent done"],
      );
    },
  );
});
