/**
 * A writer of the scope that is not oats (`nobody`, uid 65534, spawned as
 * that user: test/support/scope-writer.ts) against a root operator. Files in
 * `.agents/` that such a writer can write are never taken on their own word
 * (docs/design/captures.md, the threat table; docs/design/evidence.md, "The
 * private start record" and "What delivery trusts"):
 *
 * - a planted run directory whose control.json names a process group
 *   leader of the host: `oats run ls` shows it foreign, `oats run seal` and
 *   `oats run cancel` refuse it, the victim (a real group leader owned by
 *   nobody) survives and the operator's audit log gains no run-end line;
 * - a `cancel` file planted in a running run: the dispatcher does not cancel;
 * - a forged outbox entry in place of a FAILED run's (an OK log, a new
 *   record and run-end line, every digest recomputed): `oats push` refuses
 *   it and delivers the real run, which is what the far side's `pull --run`
 *   and `run verify` receive; planted among the far side's received runs by
 *   a writer of that scope, it is not taken as received (no run-receive
 *   entry of that scope's audit log names it);
 * - a delivered mark planted in the outbox: the run is still pushed;
 * - a job planted in the queue, or a queued job re-pointed in place: dispatch
 *   refuses it (job-unrecorded) before anything runs, and audits the
 *   refusal; the operator's `queue add` of the same job makes it theirs.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { chmodSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import {
  OatsError,
  cancelRun,
  listReceivedRuns,
  listRuns,
  planQueuedRun,
  pushEvidence,
  readAudit,
  readDelivered,
  receiveRun,
  runDispatchPlanWithEvidence,
} from "../src/index.js";
import { REPO, runJson, runOats, tempDir } from "./helpers.js";
import { evidenceFixture } from "./support/evidence-fixture.js";
import { alive, runDir, runningRun, waitFor } from "./support/evidence-run.js";
import { refusal } from "./support/refusals.js";
import { makeShare } from "./support/shares.js";

const NOBODY = { uid: 65534, gid: 65534 } as const;
const TICKER = 'i=0\nwhile true; do echo "tick $i"; i=$((i+1)); sleep 0.05; done';
const victims: ChildProcess[] = [];

after(() => {
  for (const victim of victims) if (victim.pid !== undefined && alive(victim.pid)) process.kill(-victim.pid, "SIGKILL");
});

/** Run one attack as nobody; what it printed. */
function asScopeWriter(request: Record<string, unknown>): string {
  const run = spawnSync(
    process.execPath,
    ["--import", "tsx", join(REPO, "test/support/scope-writer.ts"), JSON.stringify(request)],
    { ...NOBODY, cwd: REPO, encoding: "utf8" },
  );
  assert.equal(run.status, 0, `the scope writer failed: ${run.stderr}`);
  return run.stdout.trim();
}

/** Give part of the scope to the scope writer: nobody owns it, as a writer that is not oats would. */
function handOver(scope: string, part: string): void {
  chmodSync(scope, 0o755);
  chmodSync(join(scope, ".agents"), 0o755);
  const chowned = spawnSync("chown", ["-R", `${NOBODY.uid}:${NOBODY.gid}`, join(scope, part)], { encoding: "utf8" });
  assert.equal(chowned.status, 0, chowned.stderr);
}

/** A real process group leader of the host, owned by nobody: what a planted control.json names. */
async function victim(): Promise<number> {
  const child = spawn("sleep", ["600"], { ...NOBODY, detached: true, stdio: "ignore" });
  child.unref();
  victims.push(child);
  const pid = child.pid!;
  await waitFor("the victim to run", () => alive(pid));
  return pid;
}

function auditLength(scope: string): number {
  return readAudit(scope).entries.length;
}

describe("a writer of the scope plants a run directory (control.json)", () => {
  test(
    "Given a copy of a real run, its record deleted and its footer cut, whose control.json names a dead " +
      "dispatcher and a process group leader owned by nobody as its child, When the root operator runs `oats " +
      "run ls` and `oats run seal`, Then the run is FOREIGN, the seal is refused (run-foreign), the victim " +
      "survives, and no run-end line is appended; a copy naming a live process as its dispatcher is refused by " +
      "`oats run cancel` without a cancel file",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho working\n" });
      const real = await runDispatchPlanWithEvidence(f.scope, await f.plan(), {
        output: "quiet",
        onSealed: () => undefined,
      });
      const leader = await victim();
      handOver(f.scope, ".agents/runs");
      const runs = join(f.scope, ".agents/runs");
      const planted = asScopeWriter({
        attack: "plant-run",
        runs,
        from: real.handle,
        suffix: "0badc0de",
        child: leader,
      });
      const audited = auditLength(f.scope);

      const row = listRuns(f.scope).find((run) => run.handle === planted);
      assert.equal(row?.state, "foreign", JSON.stringify(row));
      assert.equal(row?.foreign?.reason, "run-start-mismatch");
      const ls = runOats(["--scope", f.scope, "run", "ls"]);
      assert.equal(ls.status, 0, ls.stderr);
      assert.match(ls.stdout, new RegExp(`${planted}  FOREIGN .*not started by this account's oats`));

      const sealed = runJson(["--scope", f.scope, "run", "seal", planted]);
      assert.equal(sealed.envelope.ok, false, JSON.stringify(sealed.envelope));
      assert.equal(sealed.envelope.error?.code, "integrity-mismatch");
      assert.equal(sealed.envelope.error?.details["reason"], "run-foreign");
      await new Promise((done) => setTimeout(done, 200));
      assert.equal(alive(leader), true, "the process group leader named by the planted control.json survives");
      assert.equal(existsSync(join(runs, planted, "record.json")), false, "nothing was sealed");
      assert.equal(auditLength(f.scope), audited, "no run-end line in the operator's audit log");

      // A live "dispatcher" (the victim again): the planted run would look running, and cancel would act on it.
      const running = asScopeWriter({
        attack: "plant-run",
        runs,
        from: real.handle,
        suffix: "0badf00d",
        child: leader,
        dispatcher: leader,
      });
      await assert.rejects(cancelRun(f.scope, running, { waitMs: 300 }), (error: unknown) => {
        assert.ok(error instanceof OatsError, String(error));
        assert.equal(error.details["reason"], "run-foreign", error.message);
        return true;
      });
      assert.equal(existsSync(join(runs, running, "cancel")), false, "no cancel request was written");
      assert.equal(alive(leader), true);
      assert.equal(auditLength(f.scope), audited);
    },
  );
});

describe("a writer of the scope plants a cancel file", () => {
  test(
    "Given a running run whose directory nobody can write, When nobody creates its `cancel` file, Then the " +
      "dispatcher does not cancel the run; it ends when its own dispatcher is interrupted",
    async () => {
      const f = await evidenceFixture({ script: `#!/bin/sh\n${TICKER}\n` });
      const controller = new AbortController();
      const outcome = runDispatchPlanWithEvidence(f.scope, await f.plan(), {
        output: "quiet",
        signal: controller.signal,
        graceMs: 300,
        onSealed: () => undefined,
      });
      const handle = await runningRun(f.scope, 2);
      handOver(f.scope, ".agents/runs");
      asScopeWriter({ attack: "cancel-file", dir: runDir(f.scope, handle) });
      // The dispatcher looks for the file at least every 250 ms.
      await new Promise((done) => setTimeout(done, 1200));
      assert.equal(listRuns(f.scope).find((run) => run.handle === handle)?.state, "running");
      controller.abort();
      const ended = await outcome;
      assert.equal(ended.result, "CANCELLED");
      const log = readFileSync(join(runDir(f.scope, handle), "log"), "utf8");
      assert.match(log, /# note: cancelled: the dispatcher was interrupted/);
      assert.doesNotMatch(log, /oats run cancel/);
    },
  );
});

describe("a writer of the scope forges an outbox entry", () => {
  test(
    "Given a FAILED run queued in the outbox, When nobody replaces its entry with a fabricated OK one (same " +
      "handle, job, composition and approval; a new record and run-end line; every digest recomputed) and the " +
      "operator runs `oats push`, Then the forged entry is refused, the real FAILED run is delivered, and the " +
      "far side's `pull --run` and `run verify` see only the real run; the forged run planted among the far " +
      "side's received runs by a writer of that scope is refused by `run verify`, marked by `run ls` and fsck",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho 'step 1 failed' >&2\nexit 3\n" });
      const real = await runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet" });
      assert.equal(real.result, "FAILED");
      handOver(f.scope, ".agents/outbox");
      const forged = asScopeWriter({ attack: "forge-entry", entries: join(f.scope, ".agents/outbox/entries") });
      assert.notEqual(forged, real.runId);

      const { share, mounted } = makeShare();
      const to = `dir:${share}`;
      const pushed = runJson(["--scope", f.scope, "push", "--to", to, ...(mounted ? [] : ["--allow-same-filesystem"])]);
      assert.equal(pushed.envelope.ok, false, "a refused entry fails the push");
      const details = pushed.envelope.error!.details;
      assert.deepEqual(
        (details["refused"] as { runId: string; reason: string }[]).map((entry) => [entry.runId, entry.reason]),
        [[forged, "evidence-foreign"]],
      );
      assert.deepEqual(
        (details["delivered"] as { runId: string }[]).map((entry) => entry.runId),
        [real.runId],
      );
      // The sweep before the push keys entries by run id: the forged entry, though it names the real run's
      // handle, does not hold the real run, which the sweep queues again before anything is delivered.
      assert.deepEqual(details["queuedNow"], [`${real.handle} ${real.runId.slice("sha256-".length)}`]);

      assert.equal(await readDelivered(to, forged), null, "the forged run never reached the far side");
      const far = tempDir("oats-far-");
      const received = await receiveRun(far, to, real.runId);
      assert.equal(received.result, "FAILED");
      const verified = runJson(["--scope", far, "run", "verify", real.runId]);
      assert.equal(verified.envelope.ok, true, JSON.stringify(verified.envelope));
      assert.equal(verified.envelope.result!["result"], "FAILED");
      await assert.rejects(receiveRun(far, to, forged), (error: unknown) => {
        assert.ok(error instanceof OatsError, String(error));
        assert.equal(error.code, "run-not-found");
        return true;
      });

      // On the far side, a writer of that scope puts the forged run among the received runs itself.
      handOver(far, ".agents/received-runs");
      const entry = join(f.scope, ".agents/outbox/entries", `000000000001-${forged.slice("sha256-".length)}`);
      asScopeWriter({ attack: "plant-received", from: entry, to: join(far, ".agents/received-runs", forged) });
      const planted = runJson(["--scope", far, "run", "verify", forged]);
      assert.equal(planted.envelope.ok, false, JSON.stringify(planted.envelope));
      assert.equal(planted.envelope.error?.details["reason"], "received-unrecorded");
      const listed = listReceivedRuns(far);
      assert.match(listed.find((run) => run.runId === forged)?.error ?? "", /not brought into this scope/);
      assert.equal(listed.find((run) => run.runId === real.runId)?.error, null);
      const fsck = runJson(["--scope", far, "fsck"]);
      assert.equal(fsck.envelope.ok, false);
      assert.ok(fsck.stdout.includes("received-unrecorded"), fsck.stdout);
    },
  );
});

describe("a writer of the scope plants a delivered mark", () => {
  test(
    "Given a run queued in the outbox, When nobody marks its entry delivered to the far side and the operator " +
      "pushes there, Then the mark does not count and the run is delivered",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho 'step 1 failed' >&2\nexit 3\n" });
      const real = await runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet" });
      const { share, mounted } = makeShare();
      const to = `dir:${share}`;
      handOver(f.scope, ".agents/outbox");
      asScopeWriter({ attack: "plant-mark", outbox: join(f.scope, ".agents/outbox"), to });
      const pushed = await pushEvidence(f.scope, { to, allowSameFilesystem: !mounted });
      assert.deepEqual(
        pushed.delivered.map((entry) => entry.runId),
        [real.runId],
      );
      assert.equal(pushed.alreadyDelivered, 0);
      assert.notEqual(await readDelivered(to, real.runId), null, "the far side holds the run");
      const again = await pushEvidence(f.scope, { to, allowSameFilesystem: !mounted });
      assert.deepEqual(again.delivered, [], "oats' own mark counts");
      assert.equal(again.alreadyDelivered, 1);
    },
  );
});

describe("a writer of the scope plants or re-points a queued job", () => {
  test(
    "Given a job the operator queued and dispatched, When nobody plants a copy of it under another job id, or " +
      "re-points the job itself (its recurrence set to prepare-on-tick), Then dispatching either is refused " +
      "(integrity-mismatch, job-unrecorded) before anything runs, and the refusal is audited; the operator's " +
      "`oats queue add` of the planted job keeps it and makes it dispatchable",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho working\n" });
      const first = await runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet" });
      assert.equal(first.result, "OK");
      handOver(f.scope, ".agents/queue");
      const queue = join(f.scope, ".agents/queue");
      asScopeWriter({ attack: "plant-job", queue, from: f.job, job: "planted" });
      const refusedDispatch = () => {
        const last = readAudit(f.scope).entries.at(-1)!;
        assert.equal(last.action, "dispatch");
        assert.equal(last.outcome, "refused");
        return last;
      };
      await assert.rejects(planQueuedRun(f.scope, "planted"), refusal("integrity-mismatch", "job-unrecorded"));
      assert.equal(refusedDispatch().subject?.["job"], "planted");

      asScopeWriter({ attack: "plant-job", queue, from: f.job, job: f.job, policy: "prepare-on-tick" });
      const runs = listRuns(f.scope).length;
      await assert.rejects(planQueuedRun(f.scope, f.job), refusal("integrity-mismatch", "job-unrecorded"));
      assert.equal(refusedDispatch().subject?.["job"], f.job);
      assert.equal(listRuns(f.scope).length, runs, "nothing ran");

      const kept = runJson(["--scope", f.scope, "queue", "add", f.resolution, "--job", "planted"]);
      assert.equal(kept.envelope.ok, true, JSON.stringify(kept.envelope));
      assert.equal(kept.envelope.result!["status"], "kept");
      const again = await runDispatchPlanWithEvidence(f.scope, await planQueuedRun(f.scope, "planted"), {
        output: "quiet",
      });
      assert.equal(again.result, "OK");
    },
  );
});
