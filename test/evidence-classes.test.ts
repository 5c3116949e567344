/**
 * Capture profile, enforced: the profile names the required
 * evidence classes and the redaction patterns; dispatch takes them from the
 * pinned profile blob, never from disk or from the caller; a sealed record's
 * evidence section lists what was captured and a gap for each required class
 * that was not.
 */
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import { approve } from "../src/captures/approvals.js";
import { readAudit } from "../src/ledger/audit.js";
import { currentPrincipal } from "../src/captures/classification.js";
import { resolveQueuedCapture, runDispatchPlan } from "../src/captures/dispatch.js";
import { planQueuedRun } from "../src/evidence/posture-check.js";
import { prepareCapture } from "../src/captures/prepare-capture.js";
import { addJob } from "../src/captures/queue.js";
import { evidencePolicy, profileSchema } from "../src/captures/spec.js";
import { OatsError } from "../src/core/errors.js";
import {
  EVIDENCE_CLASSES,
  capturedClasses,
  evidenceFromFacts,
  evidenceSection,
  type RunEvidenceFacts,
} from "../src/captures/evidence-classes.js";
import { blobPath } from "../src/retention/store/blobs.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

const FULL: RunEvidenceFacts = {
  log: { digest: `oats.bytes.v1:sha256-${"a".repeat(64)}`, lines: 3 },
  exit: { code: 42, signal: null },
  environmentNames: ["PATH"],
  approval: { seq: 1, hash: "h" },
  classification: "internal",
  redactions: [],
};

describe("evidence classes (pure)", () => {
  test("Given every fact, When judged against every class, Then complete with no gaps", () => {
    assert.deepEqual(evidenceFromFacts(EVIDENCE_CLASSES, FULL), {
      required: [...EVIDENCE_CLASSES],
      captured: [...EVIDENCE_CLASSES],
      gaps: [],
      status: "complete",
    });
  });

  test(
    "Given a run without a log, When log is required, Then failed-evidence " +
      "with a gap naming log; when it is not required, complete and log not " +
      "listed as captured",
    () => {
      const facts = { ...FULL, log: null };
      const failed = evidenceFromFacts(EVIDENCE_CLASSES, facts);
      assert.equal(failed.status, "failed-evidence");
      assert.deepEqual(failed.gaps, [{ class: "log", reason: "no complete log was written" }]);
      assert.ok(!failed.captured.includes("log"));
      const lenient = evidenceFromFacts(["exit-status"], facts);
      assert.deepEqual(lenient.gaps, []);
      assert.equal(lenient.status, "complete");
    },
  );

  test("An exit status counts when a code or a signal is known; neither, or none, is a gap", () => {
    assert.ok(capturedClasses({ ...FULL, exit: { code: null, signal: "SIGKILL" } }).captured.includes("exit-status"));
    assert.ok(capturedClasses({ ...FULL, exit: { code: 0, signal: null } }).captured.includes("exit-status"));
    assert.deepEqual(evidenceFromFacts(["exit-status"], { ...FULL, exit: { code: null, signal: null } }).gaps, [
      { class: "exit-status", reason: "the child's exit status is unknown" },
    ]);
    assert.equal(evidenceFromFacts(["exit-status"], { ...FULL, exit: null }).status, "failed-evidence");
  });

  test("Each class has its own fact: removing one makes exactly that class a gap", () => {
    const keys: Array<[keyof RunEvidenceFacts, string]> = [
      ["log", "log"],
      ["exit", "exit-status"],
      ["environmentNames", "environment-names"],
      ["approval", "approval"],
      ["classification", "classification"],
      ["redactions", "redaction-statement"],
    ];
    for (const [fact, name] of keys) {
      const section = evidenceFromFacts(EVIDENCE_CLASSES, { ...FULL, [fact]: null });
      assert.deepEqual(
        section.gaps.map((gap) => gap.class),
        [name],
        fact,
      );
    }
  });

  test("Classes come out in canonical order, once; a caller's reason replaces the default", () => {
    const section = evidenceSection(
      ["approval", "log", "approval"],
      ["log"],
      new Map([["approval", "dispatcher interrupted"]]),
    );
    assert.deepEqual(section.required, ["log", "approval"]);
    assert.deepEqual(section.gaps, [{ class: "approval", reason: "dispatcher interrupted" }]);
  });
});

describe("the capture profile's evidence and redact keys", () => {
  test(
    "Given no profile, or a profile silent on evidence, When the policy is " +
      "read, Then every class is required and nothing is redacted by pattern",
    () => {
      assert.deepEqual(evidencePolicy(null), { required: [...EVIDENCE_CLASSES], redact: [] });
      assert.deepEqual(evidencePolicy(profileSchema.parse({ schemaVersion: 1 })), {
        required: [...EVIDENCE_CLASSES],
        redact: [],
      });
    },
  );

  test(
    "Given a profile naming classes and patterns, When the policy is read, " +
      "Then exactly those (classes canonically ordered)",
    () => {
      const profile = profileSchema.parse({
        schemaVersion: 1,
        evidence: { required: ["exit-status", "log"] },
        redact: [{ name: "github-token", pattern: "ghp_[A-Za-z0-9]{36}" }],
      });
      assert.deepEqual(evidencePolicy(profile), {
        required: ["log", "exit-status"],
        redact: [{ name: "github-token", pattern: "ghp_[A-Za-z0-9]{36}" }],
      });
    },
  );

  test("Given bad evidence or redact entries, When parsed, Then refused with the reason", () => {
    const issue = (value: unknown) => {
      const parsed = profileSchema.safeParse(value);
      assert.equal(parsed.success, false, JSON.stringify(value));
      return parsed.error!.issues.map((entry) => entry.message).join("; ");
    };
    issue({ schemaVersion: 1, evidence: { required: ["screenshots"] } });
    assert.match(issue({ schemaVersion: 1, evidence: { required: ["log", "log"] } }), /twice/);
    issue({ schemaVersion: 1, evidence: { required: ["log"], optional: ["approval"] } });
    issue({ schemaVersion: 1, evidence: {} });
    assert.match(issue({ schemaVersion: 1, redact: [{ name: "any", pattern: "a*" }] }), /empty string/);
    assert.match(issue({ schemaVersion: 1, redact: [{ name: "nested", pattern: "(a+)+" }] }), /repeats a group/);
    issue({ schemaVersion: 1, redact: [{ name: "g", pattern: "abc", flags: "g" }] });
    issue({ schemaVersion: 1, redact: [{ name: "long", pattern: "x".repeat(257) }] });
    assert.match(
      issue({
        schemaVersion: 1,
        redact: [
          { name: "a", pattern: "abc" },
          { name: "a", pattern: "def" },
        ],
      }),
      /named twice/,
    );
    issue({ schemaVersion: 1, redact: [{ name: "a", pattern: "abc", replace: "x" }] });
  });
});

interface Fx {
  home: string;
  scope: string;
  marker: string;
  profilePath: string;
  specPath: string;
}

function setup(profile: string, spec: Record<string, unknown> = {}): Fx {
  const home = tempDir("oats-evclass-");
  const scope = join(home, "scope");
  mkdirSync(scope);
  mkdirSync(join(home, "tool", "bin"), { recursive: true });
  const marker = join(home, "marker");
  writeFileSync(join(home, "tool", "bin", "run"), `#!/bin/sh\ntouch '${marker}'\n`);
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
  const profilePath = join(home, "profile.yaml");
  writeFileSync(profilePath, profile);
  const specPath = join(home, "spec.yaml");
  writeFileSync(
    specPath,
    stringify({
      name: "nightly",
      executable: { tree: "./tool", path: "bin/run" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      profile: "./profile.yaml",
      env: { PATH: "/usr/bin:/bin" },
      privileged: true,
      ...spec,
    }),
  );
  return { home, scope, marker, profilePath, specPath };
}

async function approvedJob(fx: Fx, policy?: "prepare-on-tick") {
  const prepared = await prepareCapture(fx.scope, fx.specPath);
  await approve(fx.scope, prepared.composition.subject, { reason: "reviewed" });
  await addJob(fx.scope, { job: "nightly", resolution: prepared.id, ...(policy ? { recurrence: { policy } } : {}) });
  return prepared;
}

const PINNED =
  "schemaVersion: 1\nevidence:\n  required: [log, exit-status, " +
  "redaction-statement]\nredact:\n  - {name: github-token, pattern: " +
  "'ghp_[A-Za-z0-9]{36}'}\n";
const DOWNGRADED = "schemaVersion: 1\nevidence:\n  required: []\n";

describe("the pinned profile at dispatch: nothing at run time downgrades it", () => {
  test(
    "Given an approved capture, When the profile file on disk is edited to " +
      "require nothing, Then dispatch still carries the pinned required " +
      "classes and patterns",
    async () => {
      const fx = setup(PINNED);
      await approvedJob(fx);
      writeFileSync(fx.profilePath, DOWNGRADED);
      const plan = await planQueuedRun(fx.scope, "nightly");
      assert.deepEqual(plan.evidence, {
        required: ["log", "exit-status", "redaction-statement"],
        redact: [{ name: "github-token", pattern: "ghp_[A-Za-z0-9]{36}" }],
      });
      await runDispatchPlan(plan, { stdio: "pipe" });
    },
  );

  test(
    "Given a prepare-on-tick job, When the profile file on disk is edited " +
      "after approval, Then dispatch re-prepares, is refused with " +
      "approval-required naming profile, and nothing runs",
    async () => {
      const fx = setup(PINNED);
      await approvedJob(fx, "prepare-on-tick");
      writeFileSync(fx.profilePath, DOWNGRADED);
      await assert.rejects(planQueuedRun(fx.scope, "nightly"), refusal("approval-required", { changes: ["profile"] }));
      assert.equal(existsSync(fx.marker), false);
    },
  );

  test(
    "Given an approved capture, When its pinned profile blob is rewritten in " +
      "the store, Then dispatch is refused with integrity-mismatch and nothing runs",
    async () => {
      const fx = setup(PINNED);
      const prepared = await approvedJob(fx);
      const path = blobPath(fx.scope, prepared.blobs.profile!);
      chmodSync(path, 0o644);
      writeFileSync(path, DOWNGRADED);
      await assert.rejects(planQueuedRun(fx.scope, "nightly"), refusal("integrity-mismatch"));
      assert.equal(existsSync(fx.marker), false);
    },
  );

  test("Given a capture without a profile, When dispatched, Then every class is required", async () => {
    const fx = setup(PINNED, { profile: undefined });
    await approvedJob(fx);
    const plan = await resolveQueuedCapture(fx.scope, "nightly", {});
    assert.deepEqual(plan.evidence, { required: [...EVIDENCE_CLASSES], redact: [] });
    await runDispatchPlan(plan, { stdio: "pipe" });
  });

  test(
    "Given a profile with an unknown evidence class or a refused pattern, " +
      "When prepared, Then invalid-input and the store is as it was",
    async () => {
      for (const profile of [
        "schemaVersion: 1\nevidence: {required: [log, screenshots]}\n",
        "schemaVersion: 1\nredact: [{name: any, pattern: 'x*'}]\n",
      ]) {
        const fx = setup(profile);
        const before = snapshotTree(join(fx.scope, ".agents"));
        await assert.rejects(prepareCapture(fx.scope, fx.specPath), refusal("invalid-input"));
        const after = snapshotTree(join(fx.scope, ".agents")).filter((row) => !row.includes("audit"));
        assert.deepEqual(
          after,
          before.filter((row) => !row.includes("audit")),
        );
      }
    },
  );
});

describe("credential values a log cannot mask", () => {
  for (const [what, value] of [
    ["three characters", "q#Z"],
    ["empty", ""],
    ["a line break", "abcd\nefgh"],
  ] as const) {
    test(
      `Given a credential value with ${what}, When dispatched, Then ` +
        `invalid-input (credential-unmaskable) naming the variable, never the ` +
        `value, audited, and nothing runs`,
      async () => {
        const fx = setup(PINNED, { credentials: ["API_TOKEN"] });
        await approvedJob(fx);
        await assert.rejects(planQueuedRun(fx.scope, "nightly", { env: { API_TOKEN: value } }), (error: unknown) => {
          assert.ok(error instanceof OatsError);
          assert.equal(error.code, "invalid-input");
          assert.equal(error.details["reason"], "credential-unmaskable");
          assert.equal(error.details["credential"], "API_TOKEN");
          if (value !== "") assert.ok(!JSON.stringify(error.toJSON()).includes(value));
          return true;
        });
        const last = readAudit(fx.scope).entries.at(-1)!;
        assert.deepEqual([last.action, last.outcome], ["dispatch", "refused"]);
        if (value !== "") assert.ok(!JSON.stringify(last).includes(value));
        assert.equal(existsSync(fx.marker), false);
      },
    );
  }

  test("Given a four-character credential value, When dispatched, Then it is accepted", async () => {
    const fx = setup(PINNED, { credentials: ["API_TOKEN"] });
    await approvedJob(fx);
    const plan = await planQueuedRun(fx.scope, "nightly", { env: { API_TOKEN: "k9Z!" } });
    assert.deepEqual(plan.credentials.provided, ["API_TOKEN"]);
    await runDispatchPlan(plan, { stdio: "pipe" });
  });
});
