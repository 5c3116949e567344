import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { runJson, runOats, tempDir } from "./helpers.js";
import {
  listOutbox,
  pushEvidence,
  readAudit,
  readDelivered,
  readRun,
  planQueuedRun,
  runDispatchPlanWithEvidence,
} from "../src/index.js";
import { deliveryCapture } from "./support/delivery-capture.js";
import { MOUNT_SKIP, makeShare } from "./support/shares.js";

/**
 * Real runs (`oats dispatch --exec`, the run path of src/evidence) through
 * the outbox to a share, and the posture at dispatch with real captures of
 * each tier: the child either runs (its marker appears) or never starts.
 */

function hexOf(runId: string): string {
  return runId.replace(/^sha256-/, "");
}

describe("real runs reach the far side", () => {
  test(
    "Given OATS_EVIDENCE_TO names a reachable share (tmpfs), When `oats " +
      "dispatch --exec` runs a capture, Then the sealed run is queued, " +
      "delivered at once, and the share holds its exact record and log",
    async (t) => {
      const capture = await deliveryCapture("public");
      const { share, mounted } = makeShare();
      if (!mounted) return t.skip(`needs a share on another filesystem for dispatch's posture: ${MOUNT_SKIP}`);
      const run = runJson(["--scope", capture.scope, "dispatch", capture.job, "--exec"], {
        env: { OATS_EVIDENCE_TO: `dir:${share}` },
      });
      assert.equal(run.status, 0, run.stderr);
      const result = run.envelope.result!;
      assert.deepEqual(result["warnings"], []);
      assert.equal(result["delivery"]["posture"], "delivered-later");
      const local = readRun(capture.scope, result["runId"]);
      assert.equal(local.record!.delivery.posture, "delivered-later");
      assert.equal(local.record!.delivery.to, `dir:${share}`);
      const dir = join(share, "runs", hexOf(result["runId"]));
      assert.ok(readFileSync(join(dir, "log")).equals(readFileSync(join(local.dir, "log"))));
      assert.ok(readFileSync(join(dir, "record.json")).equals(readFileSync(join(local.dir, "record.json"))));
      const audit = readFileSync(join(dir, "audit.jsonl"), "utf8")
        .split("\n")
        .filter(Boolean)
        .map((line) => JSON.parse(line));
      assert.deepEqual(
        audit.map((entry) => entry.action),
        ["dispatch", "run-start", "run-end"],
      );
      assert.match(readFileSync(join(dir, "log"), "utf8"), / out hello from the public probe\n/);
      assert.deepEqual(
        listOutbox(capture.scope).map((entry) => entry.delivered.map((mark) => mark.to)),
        [[`dir:${share}`]],
      );
    },
  );

  test(
    "Given an internal capture and a far side that is missing, When " +
      "dispatched with --exec, Then it runs, the receipt and the record say " +
      "buffered, and a later `oats push` delivers it, read back from the share",
    async () => {
      const capture = await deliveryCapture("internal");
      const far = join(tempDir("oats-far-"), "gone");
      const run = runJson(["--scope", capture.scope, "dispatch", capture.job, "--exec", "--evidence-to", `dir:${far}`]);
      assert.equal(run.status, 0, run.stderr);
      assert.ok(existsSync(capture.marker), "the child ran");
      const runId = run.envelope.result!["runId"];
      assert.equal(readRun(capture.scope, runId).record!.delivery.posture, "buffered");
      assert.equal(run.envelope.result!["delivery"]["buffered"], true);
      assert.deepEqual(
        listOutbox(capture.scope).map((entry) => [entry.runId, entry.delivered.length]),
        [[runId, 0]],
      );
      const listed = runJson(["--scope", capture.scope, "outbox", "ls"]);
      assert.equal(listed.envelope.result!["queued"], 1);
      // The human receipt says so too (a second run of the same job).
      const human = runOats([
        "--scope",
        capture.scope,
        "dispatch",
        capture.job,
        "--exec",
        "--evidence-to",
        `dir:${far}`,
      ]);
      assert.equal(human.status, 0, human.stderr);
      assert.match(
        human.stdout,
        new RegExp(`\n  evidence: buffered locally, dir:${far} cannot be reached \\(missing\\)`),
      );
      const second = listOutbox(capture.scope).at(-1)!.runId;

      const { share, mounted } = makeShare();
      const pushed = await pushEvidence(capture.scope, { to: `dir:${share}`, allowSameFilesystem: !mounted });
      assert.deepEqual(
        pushed.delivered.map((entry) => entry.runId),
        [runId, second],
      );
      assert.ok(
        (await readDelivered(`dir:${share}`, runId))!
          .get("log")!
          .equals(readFileSync(join(readRun(capture.scope, runId).dir, "log"))),
      );
    },
  );

  test(
    "Given a run sealed without being queued (its dispatcher went before the " +
      "enqueue), When pushed, Then the push queues it first and delivers it",
    async () => {
      const capture = await deliveryCapture("public");
      const plan = await planQueuedRun(capture.scope, capture.job);
      const outcome = await runDispatchPlanWithEvidence(capture.scope, plan, {
        output: "quiet",
        onSealed: () => undefined,
      });
      assert.deepEqual(listOutbox(capture.scope), []);
      const { share, mounted } = makeShare();
      const pushed = await pushEvidence(capture.scope, { to: `dir:${share}`, allowSameFilesystem: !mounted });
      assert.equal(pushed.queuedNow.length, 1);
      assert.deepEqual(
        pushed.delivered.map((entry) => entry.runId),
        [outcome.runId],
      );
    },
  );
});

describe("the posture at dispatch, with real captures", () => {
  test(
    "Given a confidential capture and a configured far side that cannot be " +
      "reached, When dispatched with --exec, Then classification-refused (exit " +
      "6) before anything runs: no marker, no run directory, the refusal audited",
    async () => {
      const capture = await deliveryCapture("confidential");
      const far = join(tempDir("oats-far-"), "gone");
      const run = runJson(["--scope", capture.scope, "dispatch", capture.job, "--exec"], {
        env: { OATS_EVIDENCE_TO: `dir:${far}` },
      });
      assert.equal(run.status, 6, run.stderr);
      assert.equal(run.envelope.error!.code, "classification-refused");
      assert.equal(run.envelope.error!.details["reason"], "evidence-far-side-unreachable");
      assert.equal(existsSync(capture.marker), false, "the child never started");
      assert.deepEqual(
        existsSync(join(capture.scope, ".agents/runs"))
          ? readdirSync(join(capture.scope, ".agents/runs")).filter((name) => name !== ".gitignore")
          : [],
        [],
      );
      const last = readAudit(capture.scope).entries.at(-1)!;
      assert.deepEqual([last.action, last.outcome], ["dispatch", "refused"]);
    },
  );

  test(
    "Given a confidential capture and a reachable far side (tmpfs), When " +
      "dispatched with --exec, Then it runs and its evidence is delivered",
    async (t) => {
      const capture = await deliveryCapture("confidential");
      const { share, mounted } = makeShare();
      if (!mounted) return t.skip(`needs a share on another filesystem for dispatch's posture: ${MOUNT_SKIP}`);
      const run = runJson([
        "--scope",
        capture.scope,
        "dispatch",
        capture.job,
        "--exec",
        "--evidence-to",
        `dir:${share}`,
      ]);
      assert.equal(run.status, 0, run.stderr);
      assert.ok(existsSync(capture.marker));
      assert.deepEqual(readdirSync(join(share, "runs")), [hexOf(run.envelope.result!["runId"])]);
    },
  );

  test(
    "Given a confidential capture and a share on the scope's own filesystem (a one-disk host), When dispatched " +
      "with --exec --evidence-to dir:, Then it is refused as unreachable (same-filesystem); with " +
      "--allow-same-filesystem it runs and its evidence is delivered there; without --exec the flag is a usage error",
    async () => {
      const capture = await deliveryCapture("confidential");
      const share = tempDir("oats-same-fs-share-");
      const base = ["--scope", capture.scope, "dispatch", capture.job];
      const refused = runJson([...base, "--exec", "--evidence-to", `dir:${share}`]);
      assert.equal(refused.status, 6, refused.stdout);
      assert.deepEqual(
        [refused.envelope.error!.code, refused.envelope.error!.details["probe"]],
        ["classification-refused", "same-filesystem"],
      );
      assert.equal(existsSync(capture.marker), false);
      const usage = runJson([...base, "--allow-same-filesystem"]);
      assert.deepEqual([usage.status, usage.envelope.error!.code], [2, "usage"]);

      const run = runJson([...base, "--exec", "--evidence-to", `dir:${share}`, "--allow-same-filesystem"]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.ok(existsSync(capture.marker));
      assert.deepEqual(readdirSync(join(share, "runs")), [hexOf(run.envelope.result!["runId"])]);
      assert.deepEqual(run.envelope.result!["warnings"], []);
    },
  );

  test(
    "Given the outbox cannot be written (a symlink), When a public capture " +
      "is dispatched with --exec, Then audit-unavailable (outbox-unwritable) " +
      "and nothing runs",
    async () => {
      const capture = await deliveryCapture("public");
      mkdirSync(join(capture.scope, ".agents"), { recursive: true });
      symlinkSync(tempDir("oats-elsewhere-"), join(capture.scope, ".agents", "outbox"));
      const run = runJson(["--scope", capture.scope, "dispatch", capture.job, "--exec"], {
        env: { OATS_EVIDENCE_TO: "" },
      });
      assert.equal(run.status, 6, run.stderr);
      assert.deepEqual(
        [run.envelope.error!.code, run.envelope.error!.details["reason"]],
        ["audit-unavailable", "outbox-unwritable"],
      );
      assert.equal(existsSync(capture.marker), false);
    },
  );
});
