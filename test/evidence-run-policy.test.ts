/**
 * Redaction and evidence classes wired into the run path (the
 * conformance property `redaction`, and the capture profile, enforced): a real child prints
 * credential values and profile-pattern matches; the log on disk holds the
 * masks and never the values, the sealed record states the redactions and
 * judges the evidence against the pinned profile's required classes.
 */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import {
  addJob,
  approve,
  currentPrincipal,
  prepareCapture,
  planQueuedRun,
  runDispatchPlanWithEvidence,
} from "../src/index.js";
import { EVIDENCE_CLASSES } from "../src/captures/evidence-classes.js";
import { judgeRunEvidence, runRedactor } from "../src/evidence/run-policy.js";
import { tempDir } from "./helpers.js";

const TOKEN = "s3cr3t-T0ken-value";
const GHP = `ghp_${"Ab3".repeat(12)}`;
const SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

async function run(profile: string | null, script: string) {
  const home = tempDir("oats-runpol-");
  const scope = join(home, "scope");
  mkdirSync(scope);
  mkdirSync(join(home, "tool", "bin"), { recursive: true });
  writeFileSync(join(home, "tool", "bin", "run"), script);
  chmodSync(join(home, "tool", "bin", "run"), 0o755);
  writeFileSync(
    join(home, "class.yaml"),
    stringify({
      schemaVersion: 1,
      wings: {},
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    }),
  );
  if (profile !== null) writeFileSync(join(home, "profile.yaml"), profile);
  writeFileSync(
    join(home, "spec.yaml"),
    stringify({
      name: "redacted",
      executable: { tree: "./tool", path: "bin/run" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      ...(profile === null ? {} : { profile: "./profile.yaml" }),
      env: { PATH: "/usr/bin:/bin" },
      credentials: ["API_TOKEN"],
      // Tests run as root: only a privileged composition may run there.
      privileged: true,
    }),
  );
  const prepared = await prepareCapture(scope, join(home, "spec.yaml"));
  await approve(scope, prepared.composition.subject, { reason: "reviewed" });
  await addJob(scope, { job: "nightly", resolution: prepared.id });
  const plan = await planQueuedRun(scope, "nightly", { env: { API_TOKEN: TOKEN } });
  const outcome = await runDispatchPlanWithEvidence(scope, plan, { output: "quiet" });
  return {
    outcome,
    log: readFileSync(join(outcome.dir, "log"), "utf8"),
    record: readFileSync(join(outcome.dir, "record.json"), "utf8"),
  };
}

const SCRIPT = [
  "#!/bin/sh",
  `echo "Authorization: Bearer $API_TOKEN"`,
  // The value split by an escape sequence on the wire is whole once the escape is stripped.
  `printf 's3cr3t-\\033[1mT0ken\\033[0m-value in bold\\n'`,
  `echo "clone with ${GHP}" >&2`,
  `echo "digest ${SHA} and the token word stay"`,
  "exit 3",
  "",
].join("\n");

describe("redaction and evidence classes in a real run", () => {
  test(
    "Given a credential and a profile pattern, When the child prints them " +
      "(one split by an escape, one on stderr), Then the log holds masks and " +
      "never the values, ordinary text stays, and the record states the counts",
    async () => {
      const profile = "schemaVersion: 1\nredact:\n  - {name: github-token, pattern: 'ghp_[A-Za-z0-9]{36}'}\n";
      const { outcome, log, record } = await run(profile, SCRIPT);
      assert.equal(outcome.result, "FAILED");
      assert.ok(!log.includes(TOKEN), log);
      assert.ok(!log.includes(GHP), log);
      assert.ok(!record.includes(TOKEN) && !record.includes(GHP));
      assert.match(log, / out Authorization: Bearer \[REDACTED:credential:API_TOKEN\]\n/);
      assert.match(log, / out \[REDACTED:credential:API_TOKEN\] in bold\n/);
      assert.match(log, / err clone with \[REDACTED:profile:github-token\]\n/);
      assert.match(log, new RegExp(` out digest ${SHA} and the token word stay\n`));
      assert.deepEqual(outcome.record.redactions, [
        { rule: "credential:API_TOKEN", count: 2 },
        { rule: "profile:github-token", count: 1 },
      ]);
      assert.deepEqual(outcome.record.evidence, {
        required: [...EVIDENCE_CLASSES],
        captured: [...EVIDENCE_CLASSES],
        gaps: [],
        status: "complete",
      });
    },
  );

  test(
    "Given a profile that requires only log and exit-status, When the " +
      "capture runs, Then the record requires exactly those (from the pinned " +
      "profile, not from the runner's caller)",
    async () => {
      const { outcome } = await run(
        "schemaVersion: 1\nevidence: {required: [exit-status, log]}\n",
        "#!/bin/sh\necho hi\n",
      );
      assert.deepEqual(outcome.record.evidence.required, ["log", "exit-status"]);
      assert.equal(outcome.record.evidence.status, "complete");
      assert.deepEqual(outcome.record.redactions, [{ rule: "credential:API_TOKEN", count: 0 }]);
    },
  );
});

describe("run policy (pure)", () => {
  const facts = {
    required: [...EVIDENCE_CLASSES],
    result: "OK",
    exit: { code: 0, signal: null },
    lines: 2,
    redactions: [],
    environment: ["PATH"],
  };

  test(
    "An interrupted run misses its exit status and its redaction statement: " +
      "failed-evidence with both gaps; a profile that requires neither is complete",
    () => {
      const interrupted = judgeRunEvidence({ ...facts, result: "INTERRUPTED", exit: { code: null, signal: null } });
      assert.equal(interrupted.status, "failed-evidence");
      assert.deepEqual(
        interrupted.gaps.map((gap) => gap.class),
        ["exit-status", "redaction-statement"],
      );
      assert.match(interrupted.gaps[1]!.reason, /interrupted/);
      assert.equal(
        judgeRunEvidence({
          ...facts,
          required: ["log", "approval"],
          result: "INTERRUPTED",
          exit: { code: null, signal: null },
        }).status,
        "complete",
      );
      assert.equal(judgeRunEvidence(facts).status, "complete");
    },
  );

  test("A required name that is not a known class is a gap, never dropped", () => {
    const judged = judgeRunEvidence({ ...facts, required: ["log", "screenshots"] });
    assert.equal(judged.status, "failed-evidence");
    assert.deepEqual(judged.required, ["log", "screenshots"]);
    assert.deepEqual(
      judged.gaps.map((gap) => gap.class),
      ["screenshots"],
    );
  });

  test("runRedactor takes only the credentials the plan provides, by value from the plan's env", () => {
    const redactor = runRedactor({
      env: { PATH: "/usr/bin:/bin", API_TOKEN: "abcd-1234", OTHER: "other-value" },
      credentials: { provided: ["API_TOKEN"], missing: ["GONE"] },
      evidence: { required: [], redact: [] },
    });
    assert.equal(
      redactor.apply("abcd-1234 /usr/bin:/bin other-value"),
      "[REDACTED:credential:API_TOKEN] /usr/bin:/bin other-value",
    );
    assert.deepEqual(redactor.statement(), [{ rule: "credential:API_TOKEN", count: 1 }]);
  });
});
