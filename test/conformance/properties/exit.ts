/**
 * Properties 3 and 4: the real exit status survives (42, 0, a signal); a
 * failed run still writes a complete log (footer, code, RESULT, the output
 * before the failure), and a passing run says OK. The log file is read here,
 * through the path the driver gives, and its digest computed here.
 */
import assert from "node:assert/strict";
import type { DriverScope, RunView, Script } from "../driver.js";
import { assertRan, captureName, digestHex, readLogFile, sh, sha256Hex, texts, type Property } from "./support.js";

async function dispatched(scope: DriverScope, prefix: string, script: Script) {
  const capture = await scope.queue({ name: captureName(prefix), script });
  const outcome = await scope.dispatch(capture).done;
  assertRan(outcome, prefix);
  return { outcome, run: await scope.readRun(outcome.runId) };
}

function lastFooter(run: RunView): string | undefined {
  return run.footer[run.footer.length - 1];
}

export const exitStatus: Property = {
  name: "exit-status",
  title: "3. the real exit status survives: 42 and 0 are both asserted, and death by signal is recorded as the signal",
  async run(context) {
    const scope = await context.scope();
    const [failed, passed, killed] = await Promise.all([
      dispatched(scope, "exit-42", sh("echo about to fail", "exit 42")),
      dispatched(scope, "exit-0", sh("echo fine", "exit 0")),
      dispatched(scope, "exit-signal", sh("echo about to die", "kill -KILL $$", "echo never")),
    ]);

    assert.deepEqual(failed.outcome.exit, { code: 42, signal: null }, "the dispatch reports code 42");
    assert.equal(failed.outcome.exitCode, 42, "the dispatcher exits 42");
    assert.deepEqual(failed.run.exit, { code: 42, signal: null }, "the run says code 42");
    assert.ok(
      failed.run.footer.includes("exit: code 42"),
      `the footer says exit: code 42: ${JSON.stringify(failed.run.footer)}`,
    );
    assert.deepEqual(failed.run.record?.["exit"], { code: 42, signal: null }, "the sealed record says code 42");

    assert.deepEqual(passed.outcome.exit, { code: 0, signal: null }, "the dispatch reports code 0");
    assert.equal(passed.outcome.exitCode, 0);
    assert.deepEqual(passed.run.exit, { code: 0, signal: null });
    assert.ok(passed.run.footer.includes("exit: code 0"), JSON.stringify(passed.run.footer));
    assert.deepEqual(passed.run.record?.["exit"], { code: 0, signal: null });

    assert.deepEqual(
      killed.outcome.exit,
      { code: null, signal: "SIGKILL" },
      "death by signal is the signal, not a code",
    );
    assert.notEqual(killed.outcome.exitCode, 0, "a dispatcher whose child was killed does not exit 0");
    assert.deepEqual(killed.run.exit, { code: null, signal: "SIGKILL" });
    assert.ok(killed.run.footer.includes("exit: signal SIGKILL"), JSON.stringify(killed.run.footer));
    assert.deepEqual(killed.run.record?.["exit"], { code: null, signal: "SIGKILL" });
    assert.equal(killed.run.result, "FAILED");
    assert.deepEqual(texts(killed.run.lines), ["about to die"], "nothing after the kill");
  },
};

export const failedRunComplete: Property = {
  name: "failed-run-complete",
  title:
    "4. a failed run still writes a complete log (footer, real exit code, " +
    "RESULT: FAILED, the output before the failure); a passing run says OK",
  async run(context) {
    const scope = await context.scope();
    const [failed, passed] = await Promise.all([
      dispatched(scope, "failed", sh("echo 'step one done'", "echo 'step two went wrong' >&2", "exit 3")),
      dispatched(scope, "passed", sh("echo 'all steps done'")),
    ]);

    for (const [what, { outcome, run }, code, result] of [
      ["failed run", failed, 3, "FAILED"],
      ["passing run", passed, 0, "OK"],
    ] as const) {
      assert.equal(outcome.result, result, `${what}: the dispatch says ${result}`);
      assert.equal(run.result, result, `${what}: the run says ${result}`);
      assert.deepEqual(
        run.footer.slice(-2),
        [`exit: code ${code}`, `RESULT: ${result}`],
        `${what}: the footer ends with the code and the RESULT`,
      );
      assert.equal(run.record?.["result"], result, `${what}: the sealed record says ${result}`);

      // The file itself, read here: the footer is its end, and its digest and line count are the record's.
      const file = readLogFile(run.logPath);
      assert.deepEqual(
        file.footer.slice(-2),
        [`exit: code ${code}`, `RESULT: ${result}`],
        `${what}: the log file ends with the footer`,
      );
      const log = run.record?.["log"] as { digest: string; lines: number; bytes?: number } | undefined;
      assert.ok(log, `${what}: the record describes the log`);
      assert.equal(
        digestHex(log.digest),
        sha256Hex(file.bytes),
        `${what}: the record's log digest is the digest of the whole file, footer included`,
      );
      assert.equal(log.lines, file.lines.length, `${what}: the record counts the captured lines`);
      const verdict = await scope.verifyRun(outcome.runId);
      assert.equal(verdict.ok, true, `${what}: run verify passes: ${verdict.detail}`);
      assert.equal(lastFooter(run), `RESULT: ${result}`);
    }

    assert.deepEqual(texts(failed.run.lines, "out"), ["step one done"], "the output before the failure is kept");
    assert.deepEqual(texts(failed.run.lines, "err"), ["step two went wrong"], "stderr before the failure is kept");
    assert.notEqual(failed.outcome.exitCode, 0, "the dispatcher of a failed run does not exit 0");
    assert.deepEqual(texts(passed.run.lines), ["all steps done"]);
  },
};
