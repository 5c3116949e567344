/**
 * The queue: audit before effect. `queue add` (and
 * `--replace`) makes a job dispatchable only after its audit entry is
 * durable; when the audit log refuses writes (a real read-only bind mount
 * as root), the add is refused with audit-unavailable and the scope is
 * byte-for-byte as it was: no job file, no staged file. An identical
 * re-queue (`kept`) is audited too.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { readAudit } from "../src/ledger/audit.js";
import { prepareCapture, type PrepareCaptureResult } from "../src/captures/prepare-capture.js";
import { QUEUE_DIR, addJob, listJobs, readJob } from "../src/captures/queue.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { makeUnwritable } from "./support/unwritable.js";
import { refusal } from "./support/refusals.js";

const CONFIG = {
  schemaVersion: 1,
  wings: { reports: "internal" },
  repos: {},
  defaults: [],
  fallback: "internal",
  principals: {},
};

/** A scope holding two prepared capture records (so the audit log exists), and the work directory beside it. */
async function twoCaptures(): Promise<{ scope: string; a: PrepareCaptureResult; b: PrepareCaptureResult }> {
  const scope = tempDir("oats-queue-audit-scope-");
  const work = tempDir("oats-queue-audit-work-");
  mkdirSync(join(work, "tool", "bin"), { recursive: true });
  writeFileSync(join(work, "tool", "bin", "run"), "#!/bin/sh\necho queued\n");
  chmodSync(join(work, "tool", "bin", "run"), 0o755);
  writeFileSync(join(work, "classification.yaml"), `${JSON.stringify(CONFIG)}\n`);
  const spec = (name: string, level: string) => {
    const path = join(work, name);
    const body = {
      name: "nightly-report",
      executable: { tree: "./tool", path: "bin/run", args: [] },
      target: { wing: "reports" },
      classification: "internal",
      classificationConfig: "./classification.yaml",
      env: { PATH: "/usr/bin:/bin", LOG_LEVEL: level },
    };
    writeFileSync(path, `${JSON.stringify(body)}\n`);
    return path;
  };
  const a = await prepareCapture(scope, spec("a.yaml", "info"));
  const b = await prepareCapture(scope, spec("b.yaml", "debug"));
  return { scope, a, b };
}

/** Run `fn` with the scope's audit directory refusing writes; restored afterwards. */
async function withUnwritableAudit<T>(t: TestContext, scope: string, fn: () => Promise<T>): Promise<T> {
  const auditDir = join(scope, ".agents", "audit");
  const { setup, probe, restore } = makeUnwritable(auditDir, join(auditDir, "audit.jsonl"));
  t.diagnostic(`unwritable audit log by: ${setup}`);
  try {
    assert.throws(probe, "the audit directory really refuses writes");
    return await fn();
  } finally {
    restore();
  }
}

function queueEntries(scope: string) {
  return readAudit(scope).entries.filter((entry) => entry.action === "queue");
}

describe("queue add: audit before effect", () => {
  test("Given an audit log that refuses writes, When a job is queued, Then " +
    "audit-unavailable, no job file, no staged file: the scope is " +
    "byte-for-byte unchanged", {
    timeout: 120_000,
  }, async (t) => {
    const { scope, a } = await twoCaptures();
    const before = snapshotTree(scope);
    await withUnwritableAudit(t, scope, () =>
      assert.rejects(addJob(scope, { job: "nightly", resolution: a.id }), refusal("audit-unavailable")),
    );
    assert.deepEqual(snapshotTree(scope), before, "no job, no staged file, no queue directory");
    assert.deepEqual(listJobs(scope), []);
    assert.throws(() => readJob(scope, "nightly"), refusal("job-not-found"));
  });

  test("Given a queued job and an audit log that refuses writes, When it is " +
    "replaced, Then audit-unavailable and the job still names the old " +
    "resolution, nothing staged", {
    timeout: 120_000,
  }, async (t) => {
    const { scope, a, b } = await twoCaptures();
    await addJob(scope, { job: "nightly", resolution: a.id });
    const before = snapshotTree(scope);
    await withUnwritableAudit(t, scope, () =>
      assert.rejects(
        addJob(scope, { job: "nightly", resolution: b.id }, { replace: true }),
        refusal("audit-unavailable"),
      ),
    );
    assert.deepEqual(snapshotTree(scope), before);
    assert.equal(readJob(scope, "nightly").resolution, a.id);
  });

  test(
    "Given a queued job, When the identical job is queued again, Then it is " +
      "kept and the audit log has a kept entry for it",
    async () => {
      const { scope, a } = await twoCaptures();
      const first = await addJob(scope, { job: "nightly", resolution: a.id });
      const bytes = readFileSync(first.path);
      const again = await addJob(scope, { job: "nightly", resolution: a.id });
      assert.equal(again.status, "kept");
      assert.deepEqual(readFileSync(first.path), bytes);
      const entries = queueEntries(scope);
      assert.deepEqual(
        entries.map((entry) => entry.outcome),
        ["ok", "kept"],
      );
      assert.deepEqual(entries[1]!.subject, { job: "nightly", resolution: a.id });
    },
  );

  test("Given a queued job and an audit log that refuses writes, When the " +
    "identical job is queued again, Then audit-unavailable (kept is a " +
    "decision too) and the job is unchanged", {
    timeout: 120_000,
  }, async (t) => {
    const { scope, a } = await twoCaptures();
    await addJob(scope, { job: "nightly", resolution: a.id });
    const before = snapshotTree(scope);
    await withUnwritableAudit(t, scope, () =>
      assert.rejects(addJob(scope, { job: "nightly", resolution: a.id }), refusal("audit-unavailable")),
    );
    assert.deepEqual(snapshotTree(scope), before);
  });

  test(
    "Given a successful queue add, When the audit log is read, Then its ok " +
      "entry names the job, the resolution and the recurrence",
    async () => {
      const { scope, a } = await twoCaptures();
      await addJob(scope, { job: "nightly", resolution: a.id, recurrence: { every: "1h" } });
      const [entry] = queueEntries(scope);
      assert.equal(entry!.outcome, "ok");
      assert.deepEqual(entry!.subject, { job: "nightly", resolution: a.id });
      assert.deepEqual(entry!.details["recurrence"], { policy: "capture", every: "1h" });
      assert.ok(readFileSync(join(scope, ...QUEUE_DIR, "nightly.json")).length > 0);
    },
  );
});
