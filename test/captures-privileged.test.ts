/**
 * Privileged account (the conformance property `privileged-account`): a capture runs as root only if
 * its approved composition says so (`privileged: true`); otherwise dispatch
 * as uid 0 is refused before the child starts, and the marker the child
 * would write is absent.
 *
 * How uid 0 is entered: tests run as root, so root is real; the ordinary
 * account is real too (the whole flow runs through the CLI as `nobody`).
 * The library's `euid` option is checked on its own as well.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import { approve } from "../src/captures/approvals.js";
import { readAudit } from "../src/ledger/audit.js";
import { currentPrincipal } from "../src/captures/classification.js";
import {
  compositionChanges,
  compositionOf,
  compositionSubject,
  parseComposition,
} from "../src/captures/composition.js";
import { resolveQueuedCapture, runDispatchPlan, type DispatchOptions } from "../src/captures/dispatch.js";
import { planQueuedRun } from "../src/evidence/posture-check.js";
import { runDispatchPlanWithEvidence } from "../src/evidence/run-exec.js";
import { prepareCapture } from "../src/captures/prepare-capture.js";
import { addJob } from "../src/captures/queue.js";
import { resolutionRecordSchema } from "../src/resolution/record.js";
import { jsonDigest } from "../src/core/canonical-json.js";
import { REPO, runJson, runOats, tempDir } from "./helpers.js";
import { asOperator } from "./support/operator.js";
import { refusal } from "./support/refusals.js";

const IS_ROOT = process.geteuid?.() === 0;
const NOBODY = 65534;

interface Fixture {
  scope: string;
  home: string;
  marker: string;
  specPath: string;
  spec: Record<string, unknown>;
}

async function capture(options: { privileged?: boolean; job?: string } = {}): Promise<Fixture & { integrity: string }> {
  const home = tempDir("oats-priv-");
  const scope = join(home, "scope");
  mkdirSync(scope);
  mkdirSync(join(home, "tool", "bin"), { recursive: true });
  const marker = join(home, "marker");
  writeFileSync(join(home, "tool", "bin", "run"), `#!/bin/sh\nid -u > '${marker}'\necho ran\nexit 5\n`);
  chmodSync(join(home, "tool", "bin", "run"), 0o755);
  writeFileSync(
    join(home, "class.yaml"),
    stringify({
      schemaVersion: 1,
      wings: { ops: "internal" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    }),
  );
  const spec: Record<string, unknown> = {
    name: "nightly",
    executable: { tree: "./tool", path: "bin/run" },
    target: { wing: "ops" },
    classification: "internal",
    classificationConfig: "./class.yaml",
    env: { PATH: "/usr/bin:/bin" },
    ...(options.privileged === undefined ? {} : { privileged: options.privileged }),
  };
  const specPath = join(home, "spec.yaml");
  writeFileSync(specPath, stringify(spec));
  const prepared = await prepareCapture(scope, specPath);
  await approve(scope, prepared.composition.subject, { reason: "reviewed" });
  await addJob(scope, { job: options.job ?? "nightly", resolution: prepared.id });
  return { scope, home, marker, specPath, spec, integrity: prepared.composition.subject.integrity };
}

/** Refused because the dispatcher runs as root. */
const refusedPrivileged = refusal("classification-refused", { reason: "privileged-account", euid: 0 });

function runCopies(scope: string): string[] {
  const area = join(scope, ".agents", "run-copies");
  return existsSync(area) ? readdirSync(area).filter((name) => name !== ".gitignore") : [];
}

async function dispatchAndRun(scope: string, options: DispatchOptions) {
  const plan = await planQueuedRun(scope, "nightly", { ...options });
  return runDispatchPlan(plan, { stdio: "pipe", ...(options.euid === undefined ? {} : { euid: options.euid }) });
}

describe("privileged: the composition field", () => {
  // A capture record and its composition digest as computed before the field existed (commit 874284c).
  const FIXED_RECORD = {
    schemaVersion: 1,
    kind: "capture",
    status: "complete",
    subject: { capture: "nightly" },
    source: null,
    artifacts: {},
    config: {},
    bindings: {},
    messaging: null,
    entrypoints: {
      nightly: {
        artifact: {
          kind: "capture",
          key: "nightly",
          integrity: { format: "oats.tree-exec.v1", value: `sha256-${"1".repeat(64)}` },
        },
        path: "bin/run",
        args: ["--fast"],
        role: "command",
      },
    },
    capture: {
      name: "nightly",
      entrypoint: "nightly",
      target: { wing: "ops" },
      classification: {
        declared: "internal",
        derived: "internal",
        effective: "internal",
        config: `sha256-${"2".repeat(64)}`,
        configPath: "/etc/oats/class.yaml",
      },
      profile: `sha256-${"3".repeat(64)}`,
      env: { PATH: "/usr/bin:/bin" },
      credentials: [{ kind: "env", name: "API_TOKEN" }],
      spec: { path: "/etc/oats/spec.yaml", blob: `sha256-${"4".repeat(64)}` },
    },
    evidence: [],
    unresolved: [],
  };
  const OLD_COMPOSITION = "oats.json.v1:sha256-c078d7f4490f0082ffe2a16d3d3b6446bb66f0fe122205820488549732535e55";
  const OLD_RECORD = "sha256-81d7c7b45b8c323c517897274187bf6b997fee8fe38ccefde0c8dd0446bbe77c";

  test(
    "Given a capture record without privileged, When its composition is " +
      "computed, Then the record and composition digests are the ones from " +
      "before the field existed, and the composition has no privileged key",
    () => {
      const record = resolutionRecordSchema.parse(FIXED_RECORD);
      assert.equal(jsonDigest(record), OLD_RECORD);
      const composition = compositionOf(record);
      assert.equal(Object.hasOwn(composition, "privileged"), false);
      assert.equal(compositionSubject(composition).integrity, OLD_COMPOSITION);
    },
  );

  test(
    "Given the same record with privileged: true, When its composition is " +
      "computed, Then it says so, its digest differs, the change is named " +
      "privileged, and it reads back",
    () => {
      const record = resolutionRecordSchema.parse({
        ...FIXED_RECORD,
        capture: { ...FIXED_RECORD.capture, privileged: true },
      });
      const composition = compositionOf(record);
      assert.equal(composition.privileged, true);
      assert.notEqual(compositionSubject(composition).integrity, OLD_COMPOSITION);
      const plain = compositionOf(resolutionRecordSchema.parse(FIXED_RECORD));
      assert.deepEqual(compositionChanges(plain, composition), ["privileged"]);
      assert.deepEqual(compositionChanges(composition, plain), ["privileged"]);
      assert.deepEqual(parseComposition(JSON.parse(JSON.stringify(composition)), "test"), composition);
      // Only true is written: false would be a second spelling of "absent".
      assert.equal(
        resolutionRecordSchema.safeParse({ ...FIXED_RECORD, capture: { ...FIXED_RECORD.capture, privileged: false } })
          .success,
        false,
      );
    },
  );

  test(
    "Given a spec with privileged: false, When prepared, Then the record has " +
      "no privileged key and the composition is the one without the field; " +
      "with true both differ",
    async () => {
      const off = await capture({ privileged: false });
      const { privileged: _, ...absentSpec } = off.spec;
      writeFileSync(off.specPath, stringify(absentSpec));
      const absent = await prepareCapture(off.scope, off.specPath);
      // The spec's own bytes differ (they are pinned), the composition does not.
      assert.equal(Object.hasOwn(absent.record.capture!, "privileged"), false);
      assert.equal(absent.composition.subject.integrity, off.integrity);
      writeFileSync(off.specPath, stringify({ ...absentSpec, privileged: true }));
      const on = await prepareCapture(off.scope, off.specPath);
      assert.equal(on.status, "written");
      assert.equal(on.record.capture!.privileged, true);
      assert.notEqual(on.composition.subject.integrity, off.integrity);
    },
  );
});

describe("privileged: dispatch as root", {
  skip: IS_ROOT ? false : "these tests enter uid 0 for real and need to run as root",
}, () => {
  test(
    "Given a non-privileged composition, When dispatched with exec as root, " +
      "Then classification-refused (privileged-account), audited as a refusal, " +
      "no dispatch allowed, no run copy, and the child's marker is absent",
    async () => {
      const f = await capture();
      const before = readAudit(f.scope).entries.length;
      await assert.rejects(dispatchAndRun(f.scope, {}), refusedPrivileged);
      assert.equal(existsSync(f.marker), false);
      assert.deepEqual(runCopies(f.scope), []);
      const added = readAudit(f.scope).entries.slice(before);
      assert.deepEqual(
        added.map((entry) => [entry.action, entry.outcome]),
        [["dispatch", "refused"]],
      );
      const refusal = added[0]!.details["refusal"] as { code: string; message: string };
      assert.equal(refusal.code, "classification-refused");
      assert.match(refusal.message, /would run as root \(euid 0\), but its approved composition is not privileged/);
    },
  );

  test(
    "Given the same composition, When dispatched with an injected non-root " +
      "euid, Then it runs (the gate is the euid, nothing else)",
    async () => {
      const f = await capture();
      const run = await dispatchAndRun(f.scope, { euid: NOBODY });
      assert.equal(run.code, 5);
      assert.equal(run.stdout, "ran\n");
      assert.ok(existsSync(f.marker));
    },
  );

  test("Given a privileged composition, When dispatched as root, Then it runs, as root", async () => {
    const f = await capture({ privileged: true });
    const run = await dispatchAndRun(f.scope, {});
    assert.equal(run.code, 5);
    assert.equal(spawnSync("cat", [f.marker], { encoding: "utf8" }).stdout, "0\n");
  });

  test(
    "Given a plan resolved without exec for a non-privileged composition, " +
      "When handed to runDispatchPlan as root, Then it is refused before the " +
      "child starts and the run copy is removed",
    async () => {
      const f = await capture();
      const plan = await resolveQueuedCapture(f.scope, "nightly", {});
      assert.equal(plan.privileged, false);
      await assert.rejects(runDispatchPlan(plan, { stdio: "pipe" }), refusedPrivileged);
      assert.equal(existsSync(f.marker), false);
      assert.deepEqual(runCopies(f.scope), []);
    },
  );

  test(
    "Given a plan resolved without exec for a non-privileged composition, " +
      "When handed to runDispatchPlanWithEvidence as root, Then it is refused " +
      "before the run starts (no run directory, a refused run-start entry), " +
      "and the marker is absent; with an injected non-root euid it runs as a " +
      "recorded run",
    async () => {
      const f = await capture();
      const plan = await resolveQueuedCapture(f.scope, "nightly", {});
      await assert.rejects(runDispatchPlanWithEvidence(f.scope, plan, { output: "quiet" }), refusedPrivileged);
      assert.equal(existsSync(f.marker), false);
      assert.deepEqual(runCopies(f.scope), []);
      const runs = join(f.scope, ".agents", "runs");
      assert.deepEqual(existsSync(runs) ? readdirSync(runs).filter((name) => !name.startsWith(".")) : [], []);
      const last = readAudit(f.scope).entries.at(-1)!;
      assert.deepEqual([last.action, last.outcome], ["run-start", "refused"]);
      const again = await resolveQueuedCapture(f.scope, "nightly", {});
      const run = await runDispatchPlanWithEvidence(f.scope, again, { output: "quiet", euid: NOBODY });
      assert.equal(run.exitCode, 5);
      assert.ok(existsSync(f.marker));
    },
  );

  test(
    "Given an approved non-privileged composition, When the spec is " +
      "re-prepared as privileged, Then dispatch under the old approval is " +
      "approval-required naming privileged, and nothing ran",
    async () => {
      const f = await capture();
      writeFileSync(f.specPath, stringify({ ...f.spec, privileged: true }));
      const prepared = await prepareCapture(f.scope, f.specPath);
      await addJob(f.scope, { job: "escalated", resolution: prepared.id });
      await assert.rejects(
        planQueuedRun(f.scope, "escalated"),
        refusal("approval-required", { changes: ["privileged"] }),
      );
      assert.equal(existsSync(f.marker), false);
    },
  );

  test(
    "Given a non-privileged composition, When `oats dispatch --exec` runs as " +
      "root, Then exit 6 classification-refused naming privileged-account, and " +
      "the marker is absent; `oats dispatch` without --exec still shows the plan",
    async () => {
      const f = await capture();
      const refused = runJson(["--scope", f.scope, "dispatch", "nightly", "--exec"]);
      assert.equal(refused.status, 6, refused.stderr);
      assert.equal(refused.envelope.error!.code, "classification-refused");
      assert.equal(refused.envelope.error!.details["reason"], "privileged-account");
      assert.equal(existsSync(f.marker), false);
      const human = runOats(["--scope", f.scope, "dispatch", "nightly", "--exec"]);
      assert.equal(human.status, 6, human.stderr);
      assert.match(
        human.stderr,
        /only a composition approved as privileged runs/,
        "the remedy names the privileged fix, not the classification config",
      );
      assert.doesNotMatch(human.stderr, /sovereign/);
      const plan = runJson(["--scope", f.scope, "dispatch", "nightly"]);
      assert.equal(plan.status, 0, plan.stderr);
      assert.equal(existsSync(f.marker), false);
    },
  );
});

describe("privileged: an ordinary account, for real", {
  skip: IS_ROOT ? false : "spawning the dispatcher as nobody needs root",
}, () => {
  test(
    "Given a non-privileged capture prepared, approved, queued and " +
      "dispatched --exec by nobody (uid 65534) through the CLI, Then it runs " +
      "as 65534",
    () => {
      const home = tempDir("oats-priv-nobody-");
      chmodSync(home, 0o755);
      mkdirSync(join(home, "tool", "bin"), { recursive: true });
      mkdirSync(join(home, "scope"));
      mkdirSync(join(home, "state"));
      const marker = join(home, "marker");
      writeFileSync(join(home, "tool", "bin", "run"), `#!/bin/sh\nid -u > '${marker}'\necho ran\n`);
      chmodSync(join(home, "tool", "bin", "run"), 0o755);
      writeFileSync(
        join(home, "class.yaml"),
        stringify({ schemaVersion: 1, wings: {}, repos: {}, defaults: [], fallback: "internal", principals: {} }),
      );
      writeFileSync(
        join(home, "spec.yaml"),
        stringify({
          name: "nightly",
          executable: { tree: "./tool", path: "bin/run" },
          classification: "internal",
          classificationConfig: "./class.yaml",
          env: { PATH: "/usr/bin:/bin" },
        }),
      );
      for (const path of ["", "tool", "tool/bin", "tool/bin/run", "scope", "state", "class.yaml", "spec.yaml"])
        chownSync(join(home, path), NOBODY, NOBODY);
      if ((statSync(REPO).mode & 0o005) !== 0o005) throw new Error(`${REPO} must be readable by nobody for this test`);
      const asNobody = (args: string[]) => asOperator(home, args);
      const prepared = asNobody(["capture", "prepare", "spec.yaml"]);
      assert.equal(prepared.status, 0, prepared.stderr);
      assert.equal(Object.hasOwn(prepared.envelope.result["composition"]["value"], "privileged"), false);
      const { kind, key, integrity } = prepared.envelope.result["composition"]["subject"];
      assert.equal(asNobody(["approve", kind, key, integrity, "--reason", "reviewed"]).status, 0);
      assert.equal(asNobody(["queue", "add", prepared.envelope.result["id"], "--job", "nightly"]).status, 0);
      const run = asNobody(["dispatch", "nightly", "--exec"]);
      assert.equal(run.status, 0, run.stderr);
      assert.equal(spawnSync("cat", [marker], { encoding: "utf8" }).stdout, `${NOBODY}\n`);
      assert.equal(statSync(marker).uid, NOBODY);
    },
  );
});
