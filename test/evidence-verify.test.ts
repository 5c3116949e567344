/**
 * Checking runs after the fact: `verifyRun` and `oats run verify` catch a
 * one-byte edit of the log or of the record, fsck reports a sealed run that
 * does not verify, lookups refuse what they cannot name exactly, nothing is
 * read through a symlink, and gc keeps the resolution a run names.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  OatsError,
  fsckScope,
  gc,
  listRuns,
  readResolution,
  readRun,
  runDispatchPlanWithEvidence,
  verifyRun,
} from "../src/index.js";
import { REPO, runJson, runOats, snapshotTree } from "./helpers.js";
import { evidenceFixture } from "./support/evidence-fixture.js";
import { runDir } from "./support/evidence-run.js";
import { refusal } from "./support/refusals.js";

async function sealedRun(script = "#!/bin/sh\necho one\necho two >&2\nexit 7\n") {
  const f = await evidenceFixture({ script });
  const outcome = await runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet" });
  return { f, outcome, dir: runDir(f.scope, outcome.handle) };
}

/** Flip one byte of a file (the same length, another value). */
function flipByte(path: string, at: (bytes: Buffer) => number): void {
  const bytes = readFileSync(path);
  const index = at(bytes);
  bytes[index] = bytes[index] === 0x30 ? 0x31 : 0x30;
  writeFileSync(path, bytes);
}

describe("run verify: tampering", () => {
  test(
    "Given a one-byte edit anywhere in the log (a captured line, a stamp, " +
      "the footer), Then verifyRun refuses with integrity-mismatch on the log, " +
      "and fsck reports it as a mismatch",
    async () => {
      const { f, outcome, dir } = await sealedRun();
      const original = readFileSync(join(dir, "log"));
      const places = [original.indexOf("one"), original.indexOf("Z out") - 1, original.indexOf("code 7") + 5];
      for (const place of places) {
        writeFileSync(join(dir, "log"), original);
        assert.equal(verifyRun(f.scope, outcome.handle).runId, outcome.runId);
        flipByte(join(dir, "log"), () => place);
        assert.throws(() => verifyRun(f.scope, outcome.runId), refusal("integrity-mismatch", "run-log-mismatch"));
      }
      const report = await fsckScope(f.scope);
      assert.equal(report.classes.runs[0]?.code, "integrity-mismatch");
      assert.equal(report.exitCode, 5);
    },
  );

  test(
    "Given a one-byte edit of record.json that keeps it valid and canonical, " +
      "Then the record no longer hashes to the run id the audit log names: " +
      "verify by handle refuses (audit), and the old id finds no run",
    async () => {
      const { f, outcome, dir } = await sealedRun();
      const path = join(dir, "record.json");
      flipByte(path, (bytes) => bytes.indexOf('"startedAt":"') + '"startedAt":"'.length + 22);
      assert.throws(() => verifyRun(f.scope, outcome.handle), refusal("integrity-mismatch", "run-audit-mismatch"));
      assert.throws(() => verifyRun(f.scope, outcome.runId), refusal("run-not-found"));
      assert.equal((await fsckScope(f.scope)).classes.runs[0]?.code, "integrity-mismatch");
    },
  );

  test(
    "Given a record.json edited into another shape (not canonical, not the " +
      "schema), Then reading it refuses with invalid-artifact",
    async () => {
      const { f, outcome, dir } = await sealedRun();
      const path = join(dir, "record.json");
      const record = JSON.parse(readFileSync(path, "utf8"));
      writeFileSync(path, `${JSON.stringify(record, null, 2)}\n`);
      assert.throws(() => verifyRun(f.scope, outcome.handle), refusal("invalid-artifact", "run-record-not-canonical"));
      writeFileSync(path, `${JSON.stringify({ ...record, secret: "x" })}\n`);
      assert.throws(() => verifyRun(f.scope, outcome.handle), refusal("invalid-artifact", "run-record-malformed"));
    },
  );

  test(
    "Given the run-end audit entry is missing (the audit log's last entry " +
      "cut off), Then verify refuses: the log no longer extends what this " +
      "account verified (truncated); once the operator accepts the log as it " +
      "is (the checkpoint removed), on the audit cross-reference",
    async () => {
      const { f, outcome } = await sealedRun();
      const auditPath = join(f.scope, ".agents/audit/audit.jsonl");
      const lines = readFileSync(auditPath, "utf8").trimEnd().split("\n");
      assert.match(lines.at(-1)!, /"run-end"/);
      writeFileSync(auditPath, `${lines.slice(0, -1).join("\n")}\n`);
      let stateDir = "";
      assert.throws(
        () => verifyRun(f.scope, outcome.handle),
        (error: unknown) => {
          assert.ok(refusal("integrity-mismatch", "truncated")(error));
          stateDir = (error as OatsError).details["stateDir"] as string;
          return true;
        },
      );
      for (const name of readdirSync(stateDir))
        if (name.endsWith("audit.jsonl.checkpoint.json")) rmSync(join(stateDir, name));
      assert.throws(() => verifyRun(f.scope, outcome.handle), refusal("integrity-mismatch", "run-audit-mismatch"));
    },
  );
});

describe("run lookup and the run directory", () => {
  test(
    "Given refs that name no run, several runs, or are not refs at all, Then " +
      "typed refusals (run-not-found, ambiguous-run, invalid-run-ref) and " +
      "nothing changes",
    async () => {
      const { f, outcome } = await sealedRun();
      await runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet" });
      const before = snapshotTree(f.scope);
      assert.throws(() => readRun(f.scope, "20991231T000000Z-00000000"), refusal("run-not-found"));
      assert.throws(() => readRun(f.scope, `sha256-${"0".repeat(64)}`), refusal("run-not-found"));
      assert.throws(() => readRun(f.scope, outcome.handle.slice(0, 4)), refusal("invalid-input", "ambiguous-run"));
      assert.throws(() => readRun(f.scope, "../../etc"), refusal("invalid-input", "invalid-run-ref"));
      assert.throws(() => readRun(f.scope, ""), refusal("invalid-input", "invalid-run-ref"));
      assert.equal(readRun(f.scope, `oats.json.v1:${outcome.runId}`).handle, outcome.handle);
      assert.deepEqual(snapshotTree(f.scope), before);
    },
  );

  test(
    "Given a run directory replaced by a symlink to another run, Then it is " +
      "never followed: show refuses, fsck reports it, ls marks it damaged",
    async () => {
      const { f, outcome, dir } = await sealedRun();
      const other = `${dir}-moved`;
      renameSync(dir, other);
      symlinkSync(other, dir);
      assert.throws(() => readRun(f.scope, outcome.handle), refusal("invalid-artifact-store", "run-damaged"));
      assert.ok(listRuns(f.scope)[0]!.error?.includes("symlink"));
      const report = await fsckScope(f.scope);
      assert.ok(
        report.classes.runs.some((row) => row.code === "invalid-artifact-store"),
        JSON.stringify(report.classes.runs),
      );
    },
  );

  test("Given a log replaced by a symlink to a file elsewhere, Then it is not read through the link", async () => {
    const { f, outcome, dir } = await sealedRun();
    const elsewhere = join(f.home, "elsewhere.log");
    renameSync(join(dir, "log"), elsewhere);
    symlinkSync(elsewhere, join(dir, "log"));
    assert.throws(() => readRun(f.scope, outcome.handle), refusal("invalid-artifact-store", "run-damaged"));
    assert.throws(() => verifyRun(f.scope, outcome.handle), refusal("invalid-artifact-store", "run-damaged"));
  });
});

describe("gc and runs", () => {
  test(
    "Given a sealed run whose job was removed, When gc --delete runs, Then " +
      "the resolution the run names (and its tree) stays; a run whose record " +
      "is damaged refuses gc and nothing is deleted",
    async () => {
      const { f, dir } = await sealedRun();
      const jobs = join(f.scope, ".agents/queue");
      for (const name of existsSync(jobs) ? readdirSync(jobs) : [])
        if (!name.startsWith(".")) renameSync(join(jobs, name), join(f.home, name));
      assert.deepEqual(
        readdirSync(jobs).filter((name) => !name.startsWith(".")),
        [],
        "no job keeps the record any more",
      );
      const report = await gc(f.scope, { graceMs: 0 });
      assert.equal(report.roots.runFiles, 1);
      assert.ok(report.roots.records >= 1);
      assert.ok(!JSON.stringify(report.collect).includes(f.resolution), "the run's resolution is not collected");
      assert.ok(report.collect.length === 0, `nothing else to collect either: ${JSON.stringify(report.collect)}`);
      await gc(f.scope, { graceMs: 0, delete: true });
      assert.equal(
        (await readResolution(f.scope, f.resolution, { verify: true })).id,
        f.resolution,
        "the run's resolution and its tree stayed",
      );
      writeFileSync(join(dir, "record.json"), "{}\n");
      const before = snapshotTree(f.scope);
      await assert.rejects(
        gc(f.scope, { graceMs: 0, delete: true }),
        (error: unknown) => error instanceof OatsError && error.kind === "invalid",
      );
      assert.deepEqual(snapshotTree(f.scope), before);
    },
  );
});

describe("the CLI", () => {
  test(
    "Given dispatch --exec --json, Then the envelope carries runId, handle, " +
      "exit and result, the exit code passes through, the child's output goes " +
      "to stderr; run ls/show/verify read the same run; an edited log makes " +
      "run verify exit 5",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho to-stdout\necho to-stderr >&2\nexit 42\n" });
      const dispatched = runJson(["--scope", f.scope, "dispatch", f.job, "--exec"]);
      assert.equal(dispatched.status, 42);
      const result = dispatched.envelope.result!;
      assert.match(result["runId"], /^sha256-[0-9a-f]{64}$/);
      assert.deepEqual(result["exit"], { code: 42, signal: null });
      assert.equal(result["result"], "FAILED");
      assert.equal(result["exitCode"], 42);
      assert.match(dispatched.stderr, /to-stdout\n/);
      const listed = runJson(["--scope", f.scope, "run", "ls"]);
      assert.deepEqual(
        listed.envelope.result!["runs"].map((row: any) => row.runId),
        [result["runId"]],
      );
      const shown = runJson(["--scope", f.scope, "run", "show", result["handle"]]);
      assert.deepEqual(
        shown.envelope.result!["lines"].map((line: any) => `${line.stream} ${line.text}`),
        ["out to-stdout", "err to-stderr"],
      );
      assert.deepEqual(shown.envelope.result!["footer"], ["# exit: code 42", "# RESULT: FAILED"]);
      const human = runOats(["--scope", f.scope, "run", "show", result["runId"].slice(0, 15)]);
      assert.equal(human.status, 0, human.stderr);
      assert.match(human.stdout, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z out to-stdout$/m);
      assert.equal(runJson(["--scope", f.scope, "run", "verify", result["runId"]]).envelope.ok, true);
      const log = join(runDir(f.scope, result["handle"]), "log");
      writeFileSync(log, readFileSync(log, "utf8").replace("to-stdout", "to-stdouT"));
      const tampered = runOats(["--scope", f.scope, "run", "verify", result["runId"]]);
      assert.equal(tampered.status, 5);
      assert.match(tampered.stderr, /^oats: integrity-mismatch: .*\n.*record's digest is the evidence/);
      assert.equal(runOats(["--scope", f.scope, "fsck"]).status, 5);
    },
  );

  test(
    "Given a run sealed failed-evidence (its dispatcher died before the seal; `oats run seal` closed it without " +
      "an exit status), Then run verify exits 8 evidence-incomplete (kind incomplete) naming the gaps, not 5; " +
      "an edited log of the same run is still integrity-mismatch, exit 5",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho one\nexit 0\n" });
      const crashed = spawnSync(
        process.execPath,
        [
          "--import",
          "tsx",
          join(REPO, "test/support/seal-crash-child.ts"),
          JSON.stringify({ scope: f.scope, job: f.job }),
        ],
        { cwd: REPO, encoding: "utf8" },
      );
      assert.equal(crashed.signal, "SIGKILL", crashed.stdout + crashed.stderr);
      const [run] = listRuns(f.scope);
      assert.equal(runJson(["--scope", f.scope, "run", "seal", run!.handle]).status, 0);
      assert.equal(verifyRun(f.scope, run!.handle).status, "failed-evidence");

      const verified = runJson(["--scope", f.scope, "run", "verify", run!.handle]);
      assert.equal(verified.status, 8, verified.stdout);
      const error = verified.envelope.error!;
      assert.equal(error.code, "evidence-incomplete");
      assert.equal(error.kind, "incomplete");
      assert.equal(error.details["reason"], "run-failed-evidence");
      assert.ok(
        (error.details["gaps"] as { class: string }[]).some((gap) => gap.class === "exit-status"),
        JSON.stringify(error.details["gaps"]),
      );
      const human = runOats(["--scope", f.scope, "run", "verify", run!.handle]);
      assert.equal(human.status, 8);
      assert.match(human.stderr, /^oats: evidence-incomplete: .*\n.*nothing was edited/);
      assert.equal(runOats(["--scope", f.scope, "fsck"]).status, 0, "an intact run is no fsck finding");

      const log = join(runDir(f.scope, run!.handle), "log");
      writeFileSync(log, readFileSync(log, "utf8").replace("one", "onE"));
      const tampered = runJson(["--scope", f.scope, "run", "verify", run!.handle]);
      assert.equal(tampered.status, 5);
      assert.equal(tampered.envelope.error!.code, "integrity-mismatch");
    },
  );

  test(
    "Given --quiet, Then the child's output is not shown and stdout is the " +
      "run id; given a refused dispatch (not approved), Then no run is started",
    async () => {
      const f = await evidenceFixture({ script: "#!/bin/sh\necho visible-only-in-the-log\n" });
      const quiet = runOats(["--scope", f.scope, "--quiet", "dispatch", f.job, "--exec"]);
      assert.equal(quiet.status, 0, quiet.stderr);
      assert.match(quiet.stdout, /^sha256-[0-9a-f]{64}\n$/);
      assert.equal(quiet.stderr, "");
      assert.deepEqual(
        readRun(f.scope, quiet.stdout.trim()).lines.map((line) => line.text),
        ["visible-only-in-the-log"],
      );
      const loud = runOats(["--scope", f.scope, "dispatch", f.job, "--exec"]);
      assert.match(loud.stdout, /^visible-only-in-the-log\n/);
      assert.match(loud.stdout, /\n {2}run {12}\d{8}T\d{6}Z-[0-9a-f]{8} OK \(complete\) sha256-/);

      const marker = join(f.home, "never-ran");
      const g = await evidenceFixture({ script: `#!/bin/sh\ntouch '${marker}'\n`, approve: false });
      const refused = runJson(["--scope", g.scope, "dispatch", g.job, "--exec"]);
      assert.equal(refused.status, 6);
      assert.equal(refused.envelope.error?.code, "approval-required");
      assert.equal(existsSync(marker), false);
      assert.deepEqual(listRuns(g.scope), []);
      assert.equal(existsSync(join(g.scope, ".agents/runs")), false, "no run directory, no run record");
    },
  );

  test(
    "Given a run that is not there, a sealed run to cancel or seal, Then " + "typed refusals with their remedies",
    async () => {
      const { f, outcome } = await sealedRun();
      const missing = runOats(["--scope", f.scope, "run", "show", "20991231T000000Z-00000000"]);
      assert.equal(missing.status, 3);
      assert.match(missing.stderr, /^oats: run-not-found: .*\n.*`oats run ls` lists the runs/);
      for (const command of ["cancel", "seal"]) {
        const refused = runOats(["--scope", f.scope, "run", command, outcome.handle]);
        assert.equal(refused.status, 4, refused.stderr);
        assert.match(refused.stderr, /already sealed/);
      }
    },
  );
});
