/**
 * The captures scenarios, end to end through the library: real
 * files, real retained trees, a real executable (a `#!/bin/sh` script that
 * creates a marker file when it runs) and, for concurrent dispatch, real child
 * processes. "Nothing run" means: the marker is absent after the refusal.
 */
import assert from "node:assert/strict";
import { makeUnwritable } from "./support/unwritable.js";
import { runTogether } from "./support/go.js";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import {
  type OatsError,
  addJob,
  approve,
  currentPrincipal,
  prepareCapture,
  readAudit,
  resolveQueuedCapture,
  revoke,
  runDispatchPlan,
  verifyAudit,
  writeResolution,
  type AuditEntry,
  type DispatchOptions,
  type DispatchPlan,
  type Level,
  type PrepareCaptureResult,
  type PrincipalKind,
  type RecurrencePolicy,
  type ResolutionRecord,
} from "../src/index.js";
import { nodeOptionsWithGuard } from "../src/captures/node-guard.js";
import { REPO, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

const PINNED_PATH = "/usr/bin:/bin";

// ------------------------------------------------------------------ fixture

interface ConfigOptions {
  /** The level of the target wing "vault". */
  readonly vault: Level;
  /** What the config names the current principal; null: not named at all. */
  readonly principal: PrincipalKind | null;
}

function configText({ vault, principal }: ConfigOptions): string {
  return stringify({
    schemaVersion: 1,
    wings: { vault, lobby: "public" },
    repos: {},
    defaults: [{ match: "archive-*", level: "internal" }],
    fallback: "internal",
    principals: {
      "someone-else@elsewhere": "sovereign",
      ...(principal === null ? {} : { [currentPrincipal()]: principal }),
    },
  });
}

interface FixtureOptions extends Partial<ConfigOptions> {
  readonly declared?: Level;
  readonly job?: string;
  readonly policy?: RecurrencePolicy;
}

interface Fixture {
  readonly scope: string;
  /** Everything outside the store: the source tree, the spec and the config (home/conf/class.yaml). */
  readonly home: string;
  readonly tool: string;
  readonly specPath: string;
  readonly configPath: string;
  readonly marker: string;
  readonly prepared: PrepareCaptureResult;
  readonly job: string;
}

/**
 * scope/home/tool/bin/run (sh, 0755) and tool/lib/helper.sh (0644), a
 * classification config at home/conf/class.yaml, a spec at home/spec.yaml;
 * prepared, approved and queued. The script writes its environment and
 * arguments to the marker path it gets as its first argument.
 */
async function fixture(options: FixtureOptions = {}): Promise<Fixture> {
  const scope = tempDir("oats-scenario-");
  const home = join(scope, "home");
  const tool = join(home, "tool");
  mkdirSync(join(tool, "bin"), { recursive: true });
  mkdirSync(join(tool, "lib"), { recursive: true });
  mkdirSync(join(home, "conf"), { recursive: true });
  const run = join(tool, "bin", "run");
  writeFileSync(run, '#!/bin/sh\n{ echo "args: $*"; env; } > "$1"\n');
  chmodSync(run, 0o755);
  writeFileSync(join(tool, "lib", "helper.sh"), "echo helper\n");
  chmodSync(join(tool, "lib", "helper.sh"), 0o644);
  const configPath = join(home, "conf", "class.yaml");
  writeFileSync(
    configPath,
    configText({
      vault: options.vault ?? "confidential",
      principal: options.principal === undefined ? "sovereign" : options.principal,
    }),
  );
  const marker = join(scope, "marker.txt");
  const specPath = join(home, "spec.yaml");
  writeFileSync(
    specPath,
    stringify({
      name: "nightly-report",
      executable: { tree: "./tool", path: "bin/run", args: [marker, "--fast"] },
      target: { wing: "vault" },
      classification: options.declared ?? options.vault ?? "confidential",
      classificationConfig: "./conf/class.yaml",
      env: { PATH: PINNED_PATH, LOG_LEVEL: "info" },
      credentials: ["API_TOKEN"],
      // Tests run as root: only a privileged composition may run there (privilege.ts).
      privileged: true,
    }),
  );
  const prepared = await prepareCapture(scope, specPath);
  await approve(scope, prepared.composition.subject, { reason: "reviewed the tree" });
  const job = options.job ?? "nightly";
  await addJob(scope, {
    job,
    resolution: prepared.id,
    ...(options.policy ? { recurrence: { policy: options.policy } } : {}),
  });
  return { scope, home, tool, specPath, configPath, marker, prepared, job };
}

/** Dispatch exactly as a caller does: resolve the plan, then run it. */
async function dispatchAndRun(
  scope: string,
  job: string,
  options?: DispatchOptions,
): Promise<{ plan: DispatchPlan; run: { code: number; stdout: string; stderr: string } }> {
  const plan = await resolveQueuedCapture(scope, job, options);
  const run = await runDispatchPlan(plan, { stdio: "pipe" });
  return { plan, run };
}

function auditEntries(scope: string): AuditEntry[] {
  return readAudit(scope).entries;
}

function lastAudit(scope: string): AuditEntry {
  const entries = auditEntries(scope);
  const last = entries[entries.length - 1];
  assert.ok(last, "the audit log has entries");
  return last;
}

/** The last audit entry records the refusal of the dispatch of `job` with `code`. */
function assertRefusalAudited(scope: string, job: string, code: string): void {
  const last = lastAudit(scope);
  assert.equal(last.action, "dispatch");
  assert.equal(last.outcome, "refused");
  assert.deepEqual(last.subject, { job });
  assert.equal((last.details["refusal"] as { code: string }).code, code);
  assert.equal(last.principal, currentPrincipal());
  const verdict = verifyAudit(scope);
  assert.equal(verdict.ok, true, JSON.stringify(verdict));
}

/** Dispatch is refused with `code`, the executable never ran, and (unless the log is the fault) the refusal is
 * audited. */
async function assertRefused(
  f: Pick<Fixture, "scope" | "marker">,
  job: string,
  code: string,
  options: { audited?: boolean; options?: DispatchOptions } = {},
): Promise<OatsError> {
  let caught: OatsError | null = null;
  await assert.rejects(dispatchAndRun(f.scope, job, options.options), (error: unknown) => {
    refusal(code)(error);
    caught = error as OatsError;
    return true;
  });
  assert.equal(existsSync(f.marker), false, "nothing ran: the marker is absent");
  if (options.audited !== false) assertRefusalAudited(f.scope, job, code);
  return caught!;
}

async function assertRuns(
  f: Pick<Fixture, "scope" | "marker">,
  job: string,
  options?: DispatchOptions,
): Promise<DispatchPlan> {
  rmSync(f.marker, { force: true });
  const { plan, run } = await dispatchAndRun(f.scope, job, options);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(existsSync(f.marker), true, "the executable ran: the marker is present");
  return plan;
}

/** Change a file inside a retained revision directory (stored read-only, perhaps). */
function writeRetained(path: string, change: (path: string) => void): void {
  const dir = join(path, "..");
  const dirMode = statSync(dir).mode & 0o7777;
  const mode = statSync(path).mode & 0o7777;
  chmodSync(dir, dirMode | 0o200);
  chmodSync(path, mode | 0o200);
  change(path);
  if ((statSync(path).mode & 0o7777) === (mode | 0o200)) chmodSync(path, mode);
  chmodSync(dir, dirMode);
}

// ---------------------------------------------------------------- scenarios

describe("captures scenarios", () => {
  test(
    "Given a prepared, approved and queued capture, When it is dispatched, " +
      "Then the plan pins the retained executable, the pinned env plus the " +
      "named credential only, the classification and the approval; it runs; " +
      "and the audit log holds retain, prepare, approve, queue, dispatch in order",
    async () => {
      const f = await fixture();
      const approval = auditEntries(f.scope).find((entry) => entry.action === "approve")!;
      const plan = await assertRuns(f, f.job, {
        env: { API_TOKEN: "tok-123", OTHER_SECRET: "do-not-leak", HOME: "/root", PATH: "/evil/bin" },
      });

      assert.equal(plan.job, f.job);
      assert.equal(plan.resolution, f.prepared.id);
      assert.equal(plan.preparedFrom, null);
      // It runs from its private verified copy, never from the store or the source tree.
      assert.equal(plan.executable.path, join(plan.run.root, "bin", "run"));
      assert.ok(plan.run.root.startsWith(`${join(f.scope, ".agents", "run-copies")}/`), plan.run.root);
      assert.equal(plan.run.cwd, plan.run.root);
      assert.ok(!plan.executable.path.startsWith(`${f.home}/`), "never the source tree");
      assert.equal(existsSync(plan.run.dir), false, "the run copy is removed when the run ends");
      assert.deepEqual(plan.executable.args, [f.marker, "--fast"]);
      assert.equal(plan.executable.command, plan.executable.path);
      assert.deepEqual(plan.executable.argv, [f.marker, "--fast"]);
      assert.deepEqual(plan.executable.subject, f.prepared.subject);
      assert.deepEqual(plan.env, {
        PATH: PINNED_PATH,
        LOG_LEVEL: "info",
        API_TOKEN: "tok-123",
        NODE_OPTIONS: nodeOptionsWithGuard(undefined, plan.run.guard),
      });
      assert.deepEqual(plan.credentials, { provided: ["API_TOKEN"], missing: [] });
      assert.deepEqual(plan.classification, {
        declared: "confidential",
        pinned: "confidential",
        current: "confidential",
        effective: "confidential",
      });
      assert.equal(plan.approval.seq, 1);
      assert.equal(plan.approval.hash, (approval.details["ledger"] as { hash: string }).hash);
      assert.equal(plan.approval.operator, currentPrincipal());
      assert.equal(plan.approval.reason, "reviewed the tree");
      assert.deepEqual(plan.verified, [f.prepared.subject]);
      assert.equal(plan.principal, currentPrincipal());

      // What the executable really saw.
      const seen = readFileSync(f.marker, "utf8");
      assert.match(seen, new RegExp(`^args: ${f.marker} --fast$`, "m"));
      assert.match(seen, /^API_TOKEN=tok-123$/m);
      assert.match(seen, /^LOG_LEVEL=info$/m);
      assert.match(seen, new RegExp(`^PATH=${PINNED_PATH}$`, "m"));
      assert.doesNotMatch(seen, /OTHER_SECRET|do-not-leak|\/evil\/bin|^HOME=/m);
      assert.match(seen, new RegExp(`^PWD=${plan.run.root}$`, "m"), "the child runs in its copy");

      const entries = auditEntries(f.scope);
      assert.deepEqual(
        entries.map((entry) => [entry.action, entry.outcome]),
        [
          ["retain", "ok"],
          ["prepare", "ok"],
          ["approve", "ok"],
          ["queue", "ok"],
          ["dispatch", "ok"],
        ],
      );
      const dispatch = entries[4]!;
      assert.deepEqual(dispatch.subject, { job: f.job, resolution: f.prepared.id });
      assert.deepEqual(plan.audit, { seq: dispatch.seq, hash: dispatch.hash });
      assert.deepEqual(dispatch.details["credentials"], { provided: ["API_TOKEN"], missing: [] });
      assert.doesNotMatch(
        readFileSync(join(f.scope, ".agents", "audit", "audit.jsonl"), "utf8"),
        /tok-123|do-not-leak/,
      );
      const verdict = verifyAudit(f.scope);
      assert.deepEqual(verdict, { ok: true, entries: 5, head: dispatch.hash });
    },
  );

  test(
    "Given an approved capture, When a byte of its retained executable is " +
      "changed after approval, Then dispatch is refused with " +
      "integrity-mismatch, nothing runs, and the refusal is audited",
    async () => {
      const f = await fixture();
      writeRetained(join(f.prepared.retained.dir, "bin", "run"), (path) =>
        writeFileSync(path, readFileSync(path, "utf8").replace("args:", "ARGS:")),
      );
      await assertRefused(f, f.job, "integrity-mismatch");
    },
  );

  test(
    "Given an approved capture, When an exec bit is flipped in the source " +
      "and the capture re-prepared, Then the new digest is not approved " +
      "(approval-required, nothing run); and When the bit is flipped inside " +
      "the approved retained revision, Then integrity-mismatch",
    async () => {
      const f = await fixture();
      chmodSync(join(f.tool, "lib", "helper.sh"), 0o755);
      const again = await prepareCapture(f.scope, f.specPath);
      assert.notEqual(again.id, f.prepared.id);
      assert.equal(again.subject.kind, f.prepared.subject.kind);
      assert.equal(again.subject.key, f.prepared.subject.key);
      assert.notEqual(again.subject.integrity, f.prepared.subject.integrity, "an exec bit is part of the digest");
      await addJob(f.scope, { job: "nightly-new", resolution: again.id });
      const error = await assertRefused(f, "nightly-new", "approval-required");
      assert.deepEqual(error.details["subject"], again.composition.subject);
      assert.equal(error.details["lastDecision"], null);
      assert.deepEqual(
        error.details["changes"],
        ["executable.integrity"],
        "the refusal names what changed since the approved composition",
      );

      // The approved revision itself, with an exec bit flipped in the store.
      writeRetained(join(f.prepared.retained.dir, "lib", "helper.sh"), (path) => chmodSync(path, 0o755));
      assert.equal(statSync(join(f.prepared.retained.dir, "lib", "helper.sh")).mode & 0o111, 0o111);
      await assertRefused(f, f.job, "integrity-mismatch");
    },
  );

  test(
    "Given a queued capture, When its approval is revoked after queueing, " +
      "Then dispatch is refused with approval-required and nothing runs",
    async () => {
      const f = await fixture();
      const revocation = await revoke(f.scope, f.prepared.composition.subject, { reason: "compromised upstream" });
      const error = await assertRefused(f, f.job, "approval-required");
      assert.equal((error.details["lastDecision"] as { seq: number; action: string }).seq, revocation.seq);
      assert.equal((error.details["lastDecision"] as { seq: number; action: string }).action, "revoke");
    },
  );

  test(
    "Given a capture pinned with a confidential wing, When the config file " +
      "is loosened after approval, Then the pinned level still applies " +
      "(effective confidential) and a principal the pinned config does not " +
      "name sovereign is refused",
    async () => {
      // Declared internal, so only the pinned config makes it confidential.
      const f = await fixture({ declared: "internal", vault: "confidential", principal: "sovereign" });
      writeFileSync(f.configPath, configText({ vault: "public", principal: "sovereign" }));
      const plan = await assertRuns(f, f.job);
      assert.deepEqual(plan.classification, {
        declared: "internal",
        pinned: "confidential",
        current: "public",
        effective: "confidential",
      });

      // The pinned config does not name this principal sovereign; the loosened one (which would) cannot override it.
      const g = await fixture({ declared: "internal", vault: "confidential", principal: "non-sovereign" });
      writeFileSync(g.configPath, configText({ vault: "public", principal: "sovereign" }));
      await assertRefused(g, g.job, "classification-refused");
    },
  );

  test(
    "Given a capture pinned with a public wing, When the config file is " +
      "tightened to confidential after approval, Then the stricter level " +
      "applies and a principal it does not name sovereign is refused",
    async () => {
      const f = await fixture({ declared: "public", vault: "public", principal: "sovereign" });
      const before = await assertRuns(f, f.job);
      assert.deepEqual(before.classification, {
        declared: "public",
        pinned: "public",
        current: "public",
        effective: "public",
      });

      writeFileSync(f.configPath, configText({ vault: "confidential", principal: "sovereign" }));
      const tightened = await assertRuns(f, f.job);
      assert.deepEqual(tightened.classification, {
        declared: "public",
        pinned: "public",
        current: "confidential",
        effective: "confidential",
      });

      rmSync(f.marker, { force: true });
      writeFileSync(f.configPath, configText({ vault: "confidential", principal: "non-sovereign" }));
      await assertRefused(f, f.job, "classification-refused");

      // A principal the config never decided on, and one the (unchanged) pinned config never named: refused too.
      const g = await fixture({ declared: "public", vault: "public", principal: null });
      writeFileSync(g.configPath, configText({ vault: "confidential", principal: null }));
      await assertRefused(g, g.job, "classification-refused");
    },
  );

  test(
    "Given a confidential capture, When a principal the config names " +
      "non-sovereign dispatches it, Then classification-refused, nothing runs, " +
      "and the refusal is audited",
    async () => {
      const f = await fixture({ vault: "confidential", principal: "non-sovereign" });
      const error = await assertRefused(f, f.job, "classification-refused");
      assert.equal(error.details["principal"], currentPrincipal());
      assert.equal(error.details["principalKind"], "non-sovereign");

      const g = await fixture({ vault: "confidential", principal: null });
      await assertRefused(g, g.job, "classification-refused");
    },
  );

  // A lock wait of ten minutes: a permanent failure (EROFS, EACCES, EISDIR) must refuse at once rather than be retried
  // for the whole wait, so the test's own timeout only trips if it is retried.
  test("Given a queued capture, When the audit directory cannot be written, " +
    "Then dispatch is refused with audit-unavailable and nothing runs", {
    timeout: 120_000,
  }, async (t) => {
    const f = await fixture();
    const auditDir = join(f.scope, ".agents", "audit");
    const auditLog = join(auditDir, "audit.jsonl");
    const before = readFileSync(auditLog);
    const { setup, probe, restore } = makeUnwritable(auditDir, auditLog);
    t.diagnostic(`unwritable audit log by: ${setup}`);
    try {
      assert.throws(probe, "the audit directory really refuses writes");
      const error = await assertRefused(f, f.job, "audit-unavailable", {
        audited: false,
        options: { lockWaitMs: 600_000 },
      });
      assert.ok(
        error.details["audit"] && typeof (error.details["audit"] as { unavailable?: string }).unavailable === "string",
        "the refusal says it could not be audited",
      );
    } finally {
      restore();
    }
    assert.deepEqual(readFileSync(auditLog), before, "nothing was appended");
    assert.equal(verifyAudit(f.scope).ok, true);
  });

  test(
    "Given a job whose capture resolution is partial, When it is dispatched, " +
      "Then resolution-incomplete and nothing runs",
    async () => {
      const f = await fixture();
      const partial: ResolutionRecord = {
        ...structuredClone(f.prepared.record),
        status: "partial",
        unresolved: [{ pointer: "/capture/env/API_TOKEN", reason: "no credential source chosen yet" }],
      };
      const written = writeResolution(f.scope, partial);
      assert.notEqual(written.id, f.prepared.id);
      await addJob(f.scope, { job: "nightly-partial", resolution: written.id });
      const error = await assertRefused(f, "nightly-partial", "resolution-incomplete");
      assert.equal(error.details["status"], "partial");
    },
  );

  test(
    "Given one queued job, When two dispatcher processes resolve it at the " +
      "same moment, Then both get the same plan, both dispatches are audited " +
      "and the chain is intact",
    async () => {
      const f = await fixture();
      const child = join(REPO, "test/support/dispatch-child.ts");
      const input = { scope: f.scope, job: f.job, lockWaitMs: 60_000 };
      const results = await runTogether(child, [input, input], {
        cwd: REPO,
        env: { ...process.env, API_TOKEN: "tok-shared" },
      });
      const plans = results.map((result) => {
        assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
        const outcome = JSON.parse(result.stdout) as { ok: boolean; plan: DispatchPlan };
        assert.equal(outcome.ok, true);
        return outcome.plan;
      });
      const [a, b] = plans as [DispatchPlan, DispatchPlan];
      // Each dispatcher runs from its own private copy: paths differ, nothing else.
      assert.notEqual(a.run.dir, b.run.dir);
      const same = (plan: DispatchPlan) => ({
        job: plan.job,
        resolution: plan.resolution,
        executable: {
          ...plan.executable,
          path: relative(plan.run.root, plan.executable.path),
          command: relative(plan.run.root, plan.executable.command),
        },
        env: { ...plan.env, NODE_OPTIONS: null },
        credentials: plan.credentials,
        classification: plan.classification,
        approval: plan.approval,
        verified: plan.verified,
        principal: plan.principal,
        preparedFrom: plan.preparedFrom,
      });
      assert.deepEqual(same(a), same(b));
      assert.equal(a.resolution, f.prepared.id);
      assert.deepEqual(a.env, {
        PATH: PINNED_PATH,
        LOG_LEVEL: "info",
        API_TOKEN: "tok-shared",
        NODE_OPTIONS: nodeOptionsWithGuard(undefined, a.run.guard),
      });
      assert.equal(
        existsSync(a.run.dir) || existsSync(b.run.dir),
        false,
        "a plan that is not run leaves no copy (the child discards it)",
      );
      assert.notEqual(a.audit.seq, b.audit.seq, "each dispatch has its own audit entry");

      const dispatches = auditEntries(f.scope).filter((entry) => entry.action === "dispatch");
      assert.equal(dispatches.length, 2);
      assert.ok(
        dispatches.every(
          (entry) =>
            entry.outcome === "ok" &&
            entry.subject?.["job"] === f.job &&
            entry.subject?.["resolution"] === f.prepared.id,
        ),
      );
      assert.deepEqual(dispatches.map((entry) => entry.seq).sort(), [a.audit.seq, b.audit.seq].sort());
      assert.deepEqual(dispatches.map((entry) => entry.hash).sort(), [a.audit.hash, b.audit.hash].sort());
      const verdict = verifyAudit(f.scope);
      assert.equal(verdict.ok, true, JSON.stringify(verdict));
      assert.equal(existsSync(f.marker), false, "resolving a plan never runs it");
    },
  );

  test(
    "Given a queued capture, When its source tree, spec, config, lock and " +
      "instance home are deleted, Then dispatch still works from the store alone",
    async () => {
      const f = await fixture();
      writeFileSync(join(f.scope, "oats-lock.json"), "{}\n");
      rmSync(f.home, { recursive: true, force: true });
      rmSync(join(f.scope, "oats-lock.json"));
      assert.equal(existsSync(f.tool), false);
      assert.equal(existsSync(f.configPath), false);
      const plan = await assertRuns(f, f.job);
      assert.equal(plan.resolution, f.prepared.id);
      assert.deepEqual(plan.classification, {
        declared: "confidential",
        pinned: "confidential",
        current: null,
        effective: "confidential",
      });
      assert.equal(lastAudit(f.scope).action, "dispatch");
      assert.equal(lastAudit(f.scope).outcome, "ok");
    },
  );

  test(
    "Given an audit log with one character edited inside a value on line 3, " +
      "When it is verified, Then verification fails naming line 3 and reading " +
      "it is refused with integrity-mismatch",
    async () => {
      const f = await fixture();
      await assertRuns(f, f.job);
      const log = join(f.scope, ".agents", "audit", "audit.jsonl");
      const lines = readFileSync(log, "utf8").split("\n");
      assert.equal(lines.length, 6, "five entries and the final LF");
      const N = 3;
      const original = lines[N - 1]!;
      assert.match(original, /"action":"approve"/);
      const edited = original.replace('"reason":"reviewed the tree"', '"reason":"reviewed the tref"');
      assert.notEqual(edited, original);
      assert.equal(edited.length, original.length);
      lines[N - 1] = edited;
      writeFileSync(log, lines.join("\n"));

      const verdict = verifyAudit(f.scope);
      assert.equal(verdict.ok, false);
      assert.ok(!verdict.ok);
      assert.equal(verdict.brokenAt.line, N);
      assert.equal(verdict.brokenAt.seq, N);
      assert.ok(["wrong-hash", "non-canonical"].includes(verdict.brokenAt.reason), verdict.brokenAt.reason);
      assert.throws(
        () => readAudit(f.scope),
        (error: unknown) =>
          refusal("integrity-mismatch")(error) &&
          (error as OatsError).details["brokenAt"] !== undefined &&
          ((error as OatsError).details["brokenAt"] as { line: number }).line === N,
      );
    },
  );

  test(
    "Given a prepare-on-tick job, When the source tree changes, Then " +
      "dispatch re-prepares (audited as the tick), the new digest is refused " +
      "with approval-required until approved, and then it dispatches the new resolution",
    async () => {
      const f = await fixture({ policy: "prepare-on-tick", job: "ticker" });
      writeFileSync(join(f.tool, "lib", "helper.sh"), "echo helper v2\n");
      await assertRefused(f, f.job, "approval-required");

      const tick = auditEntries(f.scope).filter(
        (entry) => entry.action === "prepare" && entry.details["tick"] === f.job,
      );
      assert.equal(tick.length, 1, "the re-prepare is recorded as the tick");
      const newResolution = tick[0]!.subject?.["resolution"];
      const newSubject = tick[0]!.details["executable"] as PrepareCaptureResult["subject"];
      const newComposition = tick[0]!.details["composition"] as PrepareCaptureResult["composition"]["subject"];
      assert.equal(tick[0]!.details["from"], f.prepared.id);
      assert.ok(newResolution);
      assert.notEqual(newResolution, f.prepared.id);
      assert.notEqual(newSubject.integrity, f.prepared.subject.integrity);

      assert.notEqual(newComposition.integrity, f.prepared.composition.subject.integrity);
      await approve(f.scope, newComposition, { reason: "reviewed v2" });
      const plan = await assertRuns(f, f.job);
      assert.equal(plan.preparedFrom, f.prepared.id);
      assert.equal(plan.resolution, newResolution);
      assert.notEqual(plan.resolution, f.prepared.id);
      assert.deepEqual(plan.executable.subject, newSubject);
      const entries = auditEntries(f.scope);
      assert.equal(
        entries.filter((entry) => entry.action === "prepare" && entry.details["tick"] === f.job).length,
        2,
        "every tick prepares, audited",
      );
      const last = entries[entries.length - 1]!;
      assert.equal(last.action, "dispatch");
      assert.equal(last.details["preparedFrom"], f.prepared.id);
      assert.equal(verifyAudit(f.scope).ok, true);
    },
  );
});
