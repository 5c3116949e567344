/**
 * Cancel and interruption with real process groups: `cancelRun` and
 * SIGINT/SIGTERM to a real dispatcher (the built CLI as a child process)
 * take the whole group, grandchildren started after the cancel included
 * (checked in /proc); the log stops growing (its size is watched); a
 * dispatcher killed with SIGKILL leaves an unsealed run that fsck reports
 * and sealInterruptedRun closes as INTERRUPTED with every line kept.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { appendFileSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  cancelRun,
  fsckScope,
  listRuns,
  parseLog,
  readAudit,
  readRun,
  runDispatchPlanWithEvidence,
  sealInterruptedRun,
  verifyRun,
} from "../src/index.js";
import { groupMembers, processStart } from "../src/evidence/index.js";
import { startRecordPath } from "../src/evidence/index.js";
import { REPO, runJson, tempDir } from "./helpers.js";
import { evidenceFixture } from "./support/evidence-fixture.js";
import { alive, logSize, logText, runDir, runningRun, waitFor } from "./support/evidence-run.js";
import { refusal } from "./support/refusals.js";

const TICKER = 'i=0\nwhile true; do echo "tick $i"; i=$((i+1)); sleep 0.05; done';

function childOf(scope: string, handle: string): number {
  const control = JSON.parse(readFileSync(join(runDir(scope, handle), "control.json"), "utf8"));
  return control.child.pid as number;
}

/** The log stops growing: its size, watched for a while, does not change. */
async function assertStopped(scope: string, handle: string): Promise<void> {
  const size = logSize(scope, handle);
  await new Promise((done) => setTimeout(done, 600));
  assert.equal(logSize(scope, handle), size, "the log did not grow after the run ended");
}

function dispatcher(scope: string, job: string) {
  const child = spawn(
    process.execPath,
    [join(REPO, "dist/cli/bin.js"), "--scope", scope, "--quiet", "dispatch", job, "--exec"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) =>
    child.on("exit", (code, signal) => done({ code, signal })),
  );
  return { child, exited, stderr: () => stderr };
}

describe("run evidence: cancel", () => {
  test(
    "Given a running run whose child traps SIGTERM and starts a grandchild " +
      "when asked to stop, When cancelRun is called, Then the whole group dies " +
      "(the grandchild too, found in /proc), the log keeps its lines, ends " +
      "CANCELLED and stops growing",
    async () => {
      const files = tempDir("oats-cancel-");
      const script = `trap 'sleep 300 & echo "$!" > ${files}/gpid' TERM\n${TICKER}`;
      const f = await evidenceFixture({ script: `#!/bin/sh\n${script}\n` });
      const running = runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet", graceMs: 700 });
      const handle = await runningRun(f.scope, 3);
      const pgid = childOf(f.scope, handle);
      // Refusals while it runs: it cannot be sealed as interrupted or verified.
      await assert.rejects(sealInterruptedRun(f.scope, handle), refusal("busy", "run-running"));
      assert.throws(() => verifyRun(f.scope, handle), refusal("invalid-input", "run-running"));

      const cancelled = await cancelRun(f.scope, handle);
      const outcome = await running;
      assert.equal(outcome.result, "CANCELLED");
      assert.equal(cancelled.record?.result, "CANCELLED");
      assert.deepEqual(
        outcome.exit,
        { code: null, signal: "SIGKILL" },
        "the child ignored SIGTERM and was killed after the grace",
      );
      const grandchild = Number(readFileSync(join(files, "gpid"), "utf8"));
      assert.ok(grandchild > 0, "the trap started a grandchild after the cancel was requested");
      assert.equal(alive(grandchild), false, "the grandchild is gone");
      assert.deepEqual(groupMembers(pgid), [], "nobody is left in the run's process group");
      const parsed = parseLog(logText(f.scope, handle));
      // The shell reports its sleep's SIGTERM on stderr and goes on ticking until the SIGKILL.
      const ticks = parsed.lines.filter((line) => line.stream === "out");
      assert.ok(
        ticks.length >= 3 && ticks.every((line, i) => line.text === `tick ${i}`),
        `the captured lines are kept: ${JSON.stringify(parsed.lines.slice(0, 5))}`,
      );
      assert.equal(parsed.footer.at(-1), "# RESULT: CANCELLED");
      await assertStopped(f.scope, handle);
      assert.equal(verifyRun(f.scope, handle).result, "CANCELLED");
      await assert.rejects(cancelRun(f.scope, handle), refusal("invalid-input", "run-sealed"));
    },
  );

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    test(
      `Given a real dispatcher (the CLI) running a child with a grandchild, ` +
        `When the dispatcher gets ${signal}, Then the group is killed, the run ` +
        `is sealed CANCELLED and the dispatcher exits with the child's 128 + signal`,
      async () => {
        const files = tempDir("oats-sig-");
        const f = await evidenceFixture({ script: `#!/bin/sh\nsleep 300 &\necho "$!" > ${files}/gpid\n${TICKER}\n` });
        const cli = dispatcher(f.scope, f.job);
        const handle = await runningRun(f.scope, 3);
        const grandchild = Number(readFileSync(join(files, "gpid"), "utf8"));
        assert.equal(alive(grandchild), true);
        cli.child.kill(signal);
        const exit = await cli.exited;
        assert.equal(
          exit.code,
          143,
          `the child died of the SIGTERM the dispatcher sent its group (stderr: ${cli.stderr()})`,
        );
        const run = readRun(f.scope, handle);
        assert.equal(run.record?.result, "CANCELLED");
        assert.deepEqual(run.record?.exit, { code: null, signal: "SIGTERM" });
        assert.equal(alive(grandchild), false, "the grandchild went with the group");
        await assertStopped(f.scope, handle);
        assert.equal(verifyRun(f.scope, handle).result, "CANCELLED");
      },
    );
  }
});

describe("run evidence: oats run cancel", () => {
  test(
    "Given a real dispatcher (the CLI) running a child, When another process " +
      "runs `oats run cancel <handle>`, Then it reports CANCELLED, the " +
      "dispatcher exits with the child's 143 and the log stops growing",
    async () => {
      const f = await evidenceFixture({ script: `#!/bin/sh\n${TICKER}\n` });
      const cli = dispatcher(f.scope, f.job);
      const handle = await runningRun(f.scope, 3);
      const cancelled = runJson(["--scope", f.scope, "run", "cancel", handle]);
      assert.equal(cancelled.status, 0, cancelled.stderr);
      assert.equal(cancelled.envelope.result!["result"], "CANCELLED");
      assert.equal((await cli.exited).code, 143);
      assert.equal(readRun(f.scope, handle).footer.at(-1), "# RESULT: CANCELLED");
      await assertStopped(f.scope, handle);
    },
  );
});

describe("run evidence: a dispatcher killed mid-run", () => {
  test(
    "Given the dispatcher is SIGKILLed, Then the run is unsealed, fsck " +
      "reports it, cancel is refused; sealInterruptedRun kills what is left of " +
      "the group, cuts a torn tail, keeps every whole line and seals " +
      "INTERRUPTED, verifiable",
    async () => {
      const files = tempDir("oats-int-");
      const f = await evidenceFixture({ script: `#!/bin/sh\nsleep 300 &\necho "$!" > ${files}/gpid\n${TICKER}\n` });
      const cli = dispatcher(f.scope, f.job);
      const handle = await runningRun(f.scope, 4);
      cli.child.kill("SIGKILL");
      await cli.exited;
      const grandchild = Number(readFileSync(join(files, "gpid"), "utf8"));
      // The child dies of SIGPIPE on its next write; the background sleep stays in the group.
      await waitFor("the child to die of SIGPIPE", () => !alive(childOf(f.scope, handle)));
      assert.equal(alive(grandchild), true, "a group member outlived the dispatcher");

      assert.equal(listRuns(f.scope).find((row) => row.handle === handle)?.state, "unsealed");
      const report = await fsckScope(f.scope);
      const finding = report.classes.runs.find((row) => row.subject === handle);
      assert.equal(finding?.details["reason"], "run-unsealed", JSON.stringify(report.classes.runs));
      await assert.rejects(cancelRun(f.scope, handle), refusal("invalid-input", "run-unsealed"));
      assert.throws(() => verifyRun(f.scope, handle), refusal("invalid-input", "run-unsealed"));

      const before = readRun(f.scope, handle).lines;
      assert.ok(before.length >= 4);
      appendFileSync(join(runDir(f.scope, handle), "log"), "2026-12-01T04:00:00.0000");
      const sealed = await sealInterruptedRun(f.scope, handle);
      assert.equal(sealed.record?.result, "INTERRUPTED");
      assert.deepEqual(sealed.record?.exit, { code: null, signal: null });
      assert.deepEqual(sealed.lines, before, "every captured line is kept");
      assert.equal(sealed.footer.at(-2), "# exit: unknown");
      assert.equal(sealed.footer.at(-1), "# RESULT: INTERRUPTED");
      assert.ok(
        sealed.footer.some((line) => line.includes("torn last line")),
        sealed.footer.join("\n"),
      );
      assert.ok(
        sealed.footer.some((line) => line.includes("outlived the dispatcher")),
        sealed.footer.join("\n"),
      );
      await waitFor("the grandchild to be gone", () => !alive(grandchild));
      assert.equal(verifyRun(f.scope, handle).result, "INTERRUPTED");
      assert.ok(
        readAudit(f.scope).entries.some(
          (entry) =>
            entry.action === "run-end" &&
            entry.details["runId"] === sealed.runId &&
            entry.details["result"] === "INTERRUPTED",
        ),
      );
      assert.equal((await fsckScope(f.scope)).classes.runs.length, 0, "a sealed, verifying run is no finding");
      await assert.rejects(sealInterruptedRun(f.scope, handle), refusal("invalid-input", "run-sealed"));
    },
  );

  test(
    "Given the dispatcher's start record names a live process whose start time differs (a reused pid), Then " +
      "the run is not taken as running: cancel is refused without signalling it and seal proceeds; the same " +
      "pid with its real start time is running and seal is refused; a control.json that names a live " +
      "dispatcher on its own word makes the run foreign, never running",
    async () => {
      const f = await evidenceFixture({ script: `#!/bin/sh\n${TICKER}\n` });
      const cli = dispatcher(f.scope, f.job);
      const handle = await runningRun(f.scope, 2);
      cli.child.kill("SIGKILL");
      await cli.exited;
      await waitFor("the child to die of SIGPIPE", () => !alive(childOf(f.scope, handle)));
      const stateOfRun = () => listRuns(f.scope).find((row) => row.handle === handle)?.state;
      const controlPath = join(runDir(f.scope, handle), "control.json");
      const control = JSON.parse(readFileSync(controlPath, "utf8"));
      const recordPath = startRecordPath(realpathSync(f.scope), handle)!;
      const record = JSON.parse(readFileSync(recordPath, "utf8"));
      const live = { pid: process.pid, start: processStart(process.pid) };

      // control.json alone is never believed: it contradicts the start record, so the run is foreign.
      writeFileSync(controlPath, JSON.stringify({ ...control, dispatcher: live }));
      assert.equal(stateOfRun(), "foreign");
      await assert.rejects(sealInterruptedRun(f.scope, handle), refusal("integrity-mismatch", "run-foreign"));
      await assert.rejects(cancelRun(f.scope, handle), refusal("integrity-mismatch", "run-foreign"));

      // The dispatcher's own record (as written by the operator's account) decides.
      const both = (dispatcherRef: { pid: number; start: string | null }) => {
        writeFileSync(recordPath, JSON.stringify({ ...record, dispatcher: dispatcherRef }));
        writeFileSync(controlPath, JSON.stringify({ ...control, dispatcher: dispatcherRef }));
      };
      both(live);
      assert.equal(stateOfRun(), "running");
      await assert.rejects(sealInterruptedRun(f.scope, handle), refusal("busy", "run-running"));
      both({ pid: process.pid, start: "1" });
      assert.equal(stateOfRun(), "unsealed");
      await assert.rejects(cancelRun(f.scope, handle), refusal("invalid-input", "run-unsealed"));
      assert.equal((await sealInterruptedRun(f.scope, handle)).record?.result, "INTERRUPTED");
    },
  );
});
