/**
 * A seal that does not finish: the footer (whole or torn) is on the log and
 * the record is not. A real write limit (RLIMIT_FSIZE on a real CLI
 * dispatcher, through prlimit) makes the footer's write fail part way; a
 * real SIGKILL at the record step leaves a whole footer. Either way the run
 * stays open, and `oats run seal` cuts the footer off, quotes it in a note
 * and seals the run INTERRUPTED with every captured line.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { fsckScope, listRuns, parseLog, readAudit, verifyRun } from "../src/index.js";
import { footerOffset } from "../src/evidence/index.js";
import { REPO, runJson } from "./helpers.js";
import { evidenceFixture } from "./support/evidence-fixture.js";
import { canLimitFileSize } from "./support/prlimit.js";
import { logText, runDir } from "./support/evidence-run.js";

/** Bytes of one log line: a 27-character stamp, ` out `, the text, a newline. */
const lineBytes = (text: number) => 27 + 5 + text + 1;

const canLimit = (t: TestContext) => canLimitFileSize(t, "the dispatcher");

/** `oats --json dispatch <job> --exec` (the built CLI) under a file size limit of `limit` bytes, refused: its
 * envelope. */
function refusedUnderLimit(scope: string, job: string, limit: number) {
  const cli = spawnSync(
    "prlimit",
    [
      `--fsize=${limit}`,
      process.execPath,
      join(REPO, "dist/cli/bin.js"),
      "--scope",
      scope,
      "--quiet",
      "--json",
      "dispatch",
      job,
      "--exec",
    ],
    { encoding: "utf8" },
  );
  assert.equal(
    cli.status,
    6,
    `refused, exit 6 (signal ${cli.signal}; stdout: ${cli.stdout.slice(0, 2000)}; stderr: ${cli.stderr.slice(-2000)})`,
  );
  return JSON.parse(cli.stdout);
}

describe("run evidence: a seal that does not finish", () => {
  test(
    "Given a dispatcher whose file size limit leaves room for every line but " +
      "only 20 bytes of the footer, Then it refuses (audit-unavailable, " +
      "seal-failed, EFBIG, the child's exit 0) and writes no record; `oats run " +
      "seal` cuts the torn footer, quotes what was whole, and seals " +
      "INTERRUPTED with every line, verifiable",
    async (t) => {
      if (!canLimit(t)) return;
      const limit = 1 << 20;
      const room = 20;
      const whole = Math.floor((limit - room) / lineBytes(100));
      const last = limit - room - whole * lineBytes(100) - lineBytes(0);
      const f = await evidenceFixture({
        node: true,
        script:
          `const line = 'x'.repeat(100) + ` +
          `'\\n';\nprocess.stdout.write(line.repeat(${whole}) + ` +
          `'y'.repeat(${last}) + '\\n');\n`,
      });
      const envelope = refusedUnderLimit(f.scope, f.job, limit);
      assert.equal(envelope.error.code, "audit-unavailable", envelope.error.message);
      assert.equal(envelope.error.details.reason, "seal-failed");
      assert.equal(envelope.error.details.errno, "EFBIG");
      assert.deepEqual(envelope.error.details.exit, { code: 0, signal: null });
      assert.equal(envelope.error.details.result, "OK");
      const handle = String(envelope.error.details.handle);
      const log = readFileSync(join(runDir(f.scope, handle), "log"));
      assert.equal(log.length, limit, "the log is full to the limit");
      assert.equal(
        log.subarray(footerOffset(log)).toString(),
        "# exit: code 0\n# RES",
        "the footer's first line is whole, its second torn",
      );
      assert.equal(existsSync(join(runDir(f.scope, handle), "record.json")), false, "no record over a torn footer");
      assert.equal(listRuns(f.scope).find((row) => row.handle === handle)?.state, "unsealed");

      const sealed = runJson(["--scope", f.scope, "run", "seal", handle]);
      assert.equal(sealed.status, 0, sealed.stderr);
      const parsed = parseLog(logText(f.scope, handle));
      assert.equal(parsed.lines.length, whole + 1, "every captured line is kept");
      assert.equal(parsed.lines.at(-1)!.text, "y".repeat(last));
      assert.equal(parsed.result, "INTERRUPTED");
      assert.ok(
        parsed.footer.includes("# note: a torn last line (5 bytes without a newline) was cut off"),
        parsed.footer.join("\n"),
      );
      assert.ok(
        parsed.footer.includes("# note: the footer of a seal that did not finish was cut off; it said: exit: code 0"),
        parsed.footer.join("\n"),
      );
      assert.equal(verifyRun(f.scope, handle).result, "INTERRUPTED");
      assert.equal((await fsckScope(f.scope)).classes.runs.length, 0, "a sealed, verifying run is no finding");
    },
  );

  test(
    "Given a dispatcher killed (SIGKILL) after its footer is on the log and " +
      "before its record is linked, Then the run is unsealed with a whole " +
      "footer; `oats run seal` cuts it off, quotes the child's exit and result " +
      "in a note, keeps every line and seals INTERRUPTED, verifiable, with its " +
      "run-end entry",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho one\necho two >&2\nexit 3\n" });
      const child = spawnSync(
        process.execPath,
        [
          "--import",
          "tsx",
          join(REPO, "test/support/seal-crash-child.ts"),
          JSON.stringify({ scope: f.scope, job: f.job }),
        ],
        { cwd: REPO, encoding: "utf8" },
      );
      assert.equal(
        child.signal,
        "SIGKILL",
        `the dispatcher died at the record step (stdout: ${child.stdout}, stderr: ${child.stderr})`,
      );
      const [run] = listRuns(f.scope);
      assert.equal(run?.state, "unsealed");
      const handle = run!.handle;
      assert.equal(existsSync(join(runDir(f.scope, handle), "record.json")), false);
      assert.deepEqual(
        parseLog(logText(f.scope, handle)).footer,
        ["# exit: code 3", "# RESULT: FAILED"],
        "the footer was written before the crash",
      );
      const finding = (await fsckScope(f.scope)).classes.runs.find((row) => row.subject === handle);
      assert.equal(finding?.details["reason"], "run-unsealed");

      const sealed = runJson(["--scope", f.scope, "run", "seal", handle]);
      assert.equal(sealed.status, 0, sealed.stderr);
      const parsed = parseLog(logText(f.scope, handle));
      assert.deepEqual(
        parsed.lines.map((line) => `${line.stream} ${line.text}`),
        ["out one", "err two"],
      );
      assert.deepEqual(parsed.footer, [
        "# note: the footer of a seal that did not finish was cut off; it said: exit: code 3; RESULT: FAILED",
        "# note: interrupted: the dispatcher ended before the run was sealed; sealed by `oats run seal`",
        "# exit: unknown",
        "# RESULT: INTERRUPTED",
      ]);
      const verified = verifyRun(f.scope, handle);
      assert.equal(verified.result, "INTERRUPTED");
      assert.ok(
        readAudit(f.scope).entries.some(
          (entry) => entry.action === "run-end" && entry.details["runId"] === verified.runId,
        ),
      );
    },
  );
});

describe("run evidence: a log past the file size limit", () => {
  test(
    "Given a dispatcher whose file size limit (1 MiB) is smaller than its " +
      "child's output (2 MiB), Then it refuses as log-unwritable with the " +
      "limit's own errno, EFBIG (not a guessed ENOSPC); the log holds whole " +
      "lines only and is sealed CANCELLED with the cause in a note",
    async (t) => {
      if (!canLimit(t)) return;
      const limit = 1 << 20;
      const f = await evidenceFixture({
        node: true,
        script: "process.stdout.write(('x'.repeat(99) + '\\n').repeat(20000));\nsetTimeout(() => undefined, 120000);\n",
      });
      const envelope = refusedUnderLimit(f.scope, f.job, limit);
      assert.equal(envelope.error.details.reason, "log-unwritable", envelope.error.message);
      assert.equal(envelope.error.details.errno, "EFBIG");
      assert.equal(envelope.error.details.sealed, true, envelope.error.message);
      const handle = String(envelope.error.details.handle);
      const parsed = parseLog(logText(f.scope, handle));
      assert.ok(
        parsed.lines.length > 1000 && parsed.lines.every((line) => line.text === "x".repeat(99)),
        `${parsed.lines.length} whole lines`,
      );
      assert.equal(parsed.result, "CANCELLED");
      assert.ok(
        parsed.footer.some((line) => line.includes("the log could not be written: EFBIG")),
        parsed.footer.join("\n"),
      );
      assert.equal(verifyRun(f.scope, handle).result, "CANCELLED");
    },
  );
});

describe("run log: where the footer starts", () => {
  const line = "2026-12-01T04:00:00.000001Z out # not a footer\n";
  for (const [name, text, at] of [
    ["an empty log", "", 0],
    ["lines only (a `# ` inside a line is text)", line, line.length],
    ["a footer alone", "# exit: unknown\n# RESULT: INTERRUPTED\n", 0],
    ["lines, then a footer", `${line}# exit: code 0\n`, line.length],
    ["lines, then a torn footer", `${line}# RES`, line.length],
  ] as const) {
    test(`Given ${name}, Then the footer starts at byte ${at}`, () => {
      assert.equal(footerOffset(Buffer.from(text)), at);
    });
  }
});
