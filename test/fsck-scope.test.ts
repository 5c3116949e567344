/**
 * Whole-scope fsck (src/scope/fsck.ts, `oats fsck`): every class of finding
 * is produced by a real damaged scope built through the library (prepare,
 * capture prepare, approve, queue add), then damaged on disk the way a bad
 * disk, a hand edit or a crash would. Each test checks the class, the code,
 * the exit code of the most serious finding, and that fsck changed nothing.
 */
import assert from "node:assert/strict";
import {
  chmodSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  FINDING_CLASSES,
  addJob,
  approve,
  bytesDigest,
  fsckScope,
  mostSerious,
  prepare,
  prepareCapture,
  writeInstanceRef,
  type Finding,
  type ScopeFsckReport,
} from "../src/index.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, runOats, snapshotTree, tempDir } from "./helpers.js";
import { agents, fsckUnchanged } from "./support/scopes.js";

interface Scope {
  scope: string;
  instanceRecord: string;
  captureRecord: string;
  revisionDir: string;
  blobs: { config: string; spec: string; composition: string };
}

/** A scope holding one instance (record + ref + capability revision) and one capture (record, blobs, approval, job,
 * audit entries). */
async function populatedScope(): Promise<Scope> {
  const dir = tempDir("oats-fsck-");
  const scope = join(dir, "scope");
  mkdirSync(scope);
  const plan = {
    schemaVersion: 1,
    instance: "demo",
    capabilities: [{ id: "demo.hello", dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
    entrypoints: { hello: { capability: "demo.hello", path: "bin/hello.mjs", role: "command" } },
  };
  const prepared = await prepare(scope, plan);
  mkdirSync(join(dir, "tool/bin"), { recursive: true });
  writeFileSync(join(dir, "tool/bin/run"), "#!/bin/sh\nexit 0\n");
  chmodSync(join(dir, "tool/bin/run"), 0o755);
  writeFileSync(join(dir, "class.yaml"), `${JSON.stringify({ schemaVersion: 1, fallback: "internal" })}\n`);
  const spec = {
    name: "nightly",
    executable: { tree: "./tool", path: "bin/run" },
    classification: "internal",
    classificationConfig: "./class.yaml",
  };
  writeFileSync(join(dir, "spec.yaml"), `${JSON.stringify(spec)}\n`);
  const capture = await prepareCapture(scope, join(dir, "spec.yaml"));
  await approve(scope, capture.composition.subject, { reason: "reviewed" });
  await addJob(scope, { job: "nightly", resolution: capture.id });
  return {
    scope,
    instanceRecord: prepared.id,
    captureRecord: capture.id,
    revisionDir: capture.retained.dir,
    blobs: { config: capture.blobs.config, spec: capture.blobs.spec, composition: capture.blobs.composition },
  };
}

/** fsck, asserting it changed nothing at all. */
function flipByte(path: string, at = 20): void {
  const bytes = readFileSync(path);
  bytes[at] = bytes[at] === 0x61 ? 0x62 : 0x61;
  writeFileSync(path, bytes);
}

function only(report: ScopeFsckReport, cls: string): Finding[] {
  const others = Object.entries(report.classes).filter(([name, findings]) => name !== cls && findings.length > 0);
  assert.deepEqual(others, [], `no findings outside ${cls}`);
  return report.classes[cls as keyof ScopeFsckReport["classes"]];
}

describe("whole-scope fsck", () => {
  test(
    "Given a clean scope with every kind of content, When fsck runs, Then " +
      "everything is counted, nothing is found, exit 0",
    async () => {
      const { scope } = await populatedScope();
      const report = await fsckUnchanged(scope);
      assert.equal(report.ok, true);
      assert.equal(report.exitCode, 0);
      assert.equal(report.worst, null);
      assert.deepEqual(Object.keys(report.classes), [...FINDING_CLASSES]);
      for (const findings of Object.values(report.classes)) assert.deepEqual(findings, []);
      assert.equal(report.counts.records, 2);
      assert.equal(report.counts.instances, 1);
      assert.equal(report.counts.jobs, 1);
      assert.equal(report.counts.blobs, 3, "config, spec and composition");
      assert.equal(report.counts.approvals, 1);
      assert.ok(report.counts.audit >= 3, "prepare, approve and queue were audited");
      assert.ok(report.counts.revisions >= 2);
    },
  );

  test("Given a record with one byte edited, Then records reports integrity-mismatch and fsck exits 5", async () => {
    const { scope, instanceRecord } = await populatedScope();
    flipByte(agents(scope, "resolutions", `${instanceRecord}.json`));
    const report = await fsckUnchanged(scope);
    const [finding] = only(report, "records");
    assert.equal(finding!.code, "integrity-mismatch");
    assert.equal(finding!.subject, instanceRecord);
    assert.equal(report.exitCode, 5);
  });

  test(
    "Given a record that is not canonical but named by the digest of its " +
      "bytes, Then records reports invalid-resolution, exit 4",
    async () => {
      const { scope, instanceRecord } = await populatedScope();
      const pretty = Buffer.from(
        JSON.stringify(
          JSON.parse(readFileSync(agents(scope, "resolutions", `${instanceRecord}.json`), "utf8")),
          null,
          2,
        ) + "\n",
      );
      const id = bytesDigest(pretty);
      writeFileSync(agents(scope, "resolutions", `${id}.json`), pretty);
      const report = await fsckUnchanged(scope);
      const findings = only(report, "records");
      assert.deepEqual(
        findings.map((each) => [each.subject, each.code]),
        [[id, "invalid-resolution"]],
      );
      assert.match(findings[0]!.message, /not canonical/);
      assert.equal(report.exitCode, 4);
    },
  );

  test(
    "Given a record whose artifact revision was removed, Then records " +
      "reports artifact-not-found (exit 3) and the left manifest is a notice",
    async () => {
      const { scope, revisionDir, captureRecord } = await populatedScope();
      rmSync(revisionDir, { recursive: true });
      const report = await fsckUnchanged(scope);
      const records = report.classes.records;
      assert.deepEqual(
        records.map((each) => [each.subject, each.code]),
        [[captureRecord, "artifact-not-found"]],
      );
      assert.deepEqual(
        report.classes.manifests.map((each) => [each.kind, each.path]),
        [["notice", join(revisionDir, "..", `.manifest-${revisionDir.split("/").pop()}.json`)]],
      );
      assert.equal(report.exitCode, 3);
      assert.equal(report.worst?.code, "artifact-not-found");
    },
  );

  test(
    "Given a record whose pinned classification config blob is gone, Then " + "records reports blob-not-found, exit 3",
    async () => {
      const { scope, captureRecord, blobs } = await populatedScope();
      unlinkSync(agents(scope, "blobs", blobs.config));
      const report = await fsckUnchanged(scope);
      const findings = only(report, "records");
      assert.deepEqual(
        findings.map((each) => [each.subject, each.code, each.details["digest"]]),
        [[captureRecord, "blob-not-found", blobs.config]],
      );
      assert.equal(report.exitCode, 3);
    },
  );

  test("Given a blob with other bytes than its name says, Then blobs reports integrity-mismatch, exit 5", async () => {
    const { scope, blobs } = await populatedScope();
    flipByte(agents(scope, "blobs", blobs.spec), 5);
    const report = await fsckUnchanged(scope);
    const findings = only(report, "blobs");
    assert.deepEqual(
      findings.map((each) => [each.subject, each.code]),
      [[blobs.spec, "integrity-mismatch"]],
    );
    assert.equal(report.exitCode, 5);
  });

  test(
    "Given an instance ref to a record the scope does not hold, Then " +
      "instances reports resolution-not-found, exit 3",
    async () => {
      const { scope } = await populatedScope();
      const ghost = `sha256-${"e".repeat(64)}`;
      writeInstanceRef(scope, "ghost", ghost);
      const report = await fsckUnchanged(scope);
      const findings = only(report, "instances");
      assert.deepEqual(
        findings.map((each) => [each.subject, each.code, each.details["resolution"]]),
        [["ghost", "resolution-not-found", ghost]],
      );
      assert.equal(report.exitCode, 3);
    },
  );

  test(
    "Given an instance ref naming another instance's record (or a capture " +
      "record), Then instances reports invalid-resolution, exit 4",
    async () => {
      const { scope, captureRecord } = await populatedScope();
      writeInstanceRef(scope, "other", captureRecord);
      const report = await fsckUnchanged(scope);
      assert.deepEqual(
        only(report, "instances").map((each) => [each.subject, each.code]),
        [["other", "invalid-resolution"]],
      );
      assert.equal(report.exitCode, 4);
    },
  );

  test("Given a damaged queued job, Then jobs reports invalid-artifact-store, exit 4", async () => {
    const { scope } = await populatedScope();
    writeFileSync(agents(scope, "queue", "nightly.json"), '{"job": "nightly"}');
    const report = await fsckUnchanged(scope);
    assert.deepEqual(
      only(report, "jobs").map((each) => [each.subject, each.code]),
      [["nightly", "invalid-artifact-store"]],
    );
    assert.equal(report.exitCode, 4);
  });

  test("Given a queued job whose capture record is gone, Then jobs reports resolution-not-found, exit 3", async () => {
    const { scope, captureRecord } = await populatedScope();
    unlinkSync(agents(scope, "resolutions", `${captureRecord}.json`));
    const report = await fsckUnchanged(scope);
    assert.deepEqual(
      only(report, "jobs").map((each) => [each.subject, each.code, each.details["resolution"]]),
      [["nightly", "resolution-not-found", captureRecord]],
    );
    assert.equal(report.exitCode, 3);
  });

  test(
    "Given a broken approvals ledger line, Then approvals reports " + "integrity-mismatch naming the line, exit 5",
    async () => {
      const { scope } = await populatedScope();
      const ledger = agents(scope, "approvals", "ledger.jsonl");
      writeFileSync(ledger, readFileSync(ledger, "utf8").replace('"reason":"reviewed"', '"reason":"reviewes"'));
      const report = await fsckUnchanged(scope);
      const findings = only(report, "approvals");
      assert.deepEqual(
        findings.map((each) => [each.code, (each.details["brokenAt"] as { line: number }).line]),
        [["integrity-mismatch", 1]],
      );
      assert.equal(report.exitCode, 5);
    },
  );

  /** Run `body` with the operator's private chain state in a fresh private directory. */
  async function withStateDir<T>(usable: boolean, body: () => Promise<T>): Promise<T> {
    const saved = process.env["OATS_STATE_DIR"];
    const dir = join(tempDir("oats-fsck-state-"), "state");
    mkdirSync(dir, { mode: 0o700 });
    if (!usable) chmodSync(dir, 0o777);
    process.env["OATS_STATE_DIR"] = dir;
    try {
      return await body();
    } finally {
      if (saved === undefined) delete process.env["OATS_STATE_DIR"];
      else process.env["OATS_STATE_DIR"] = saved;
    }
  }

  test(
    "Given a ledger emptied by hand and no checkpoint (both chains intact), " +
      "Then the ledger vs audit cross-check reports the approval only the " +
      "audit log holds, exit 5",
    async () => {
      // Populated with this account's state (queue add keeps its job there), checked as another operator account
      // (a fresh state): no checkpoint of these logs.
      const { scope } = await populatedScope();
      await withStateDir(true, async () => {
        writeFileSync(agents(scope, "approvals", "ledger.jsonl"), "");
        const report = await fsckUnchanged(scope);
        assert.equal(report.checkpoint.approvals.reason, "no-checkpoint");
        assert.equal(report.checkpoint.audit.anchored, false);
        const findings = only(report, "approvals");
        assert.deepEqual(
          findings.map((each) => [each.code, each.details["crossCheck"]]),
          [["integrity-mismatch", "no-ledger-entry"]],
        );
        assert.equal(report.counts.approvals, 0);
        assert.equal(report.exitCode, 5);
      });
    },
  );

  test(
    "Given a ledger emptied by hand after oats checkpointed it, Then the " +
      "truncation against the operator's checkpoint is an approvals finding, " +
      "exit 5",
    async () => {
      await withStateDir(true, async () => {
        const { scope } = await populatedScope();
        assert.equal((await fsckScope(scope)).ok, true, "a clean fsck first (and the checkpoint is current)");
        writeFileSync(agents(scope, "approvals", "ledger.jsonl"), "");
        const report = await fsckUnchanged(scope);
        assert.equal(report.checkpoint.approvals.anchored, true, "the checkpoint anchored the check that refused");
        const findings = only(report, "approvals");
        assert.deepEqual(
          findings.map((each) => [each.code, each.details["reason"]]),
          [["integrity-mismatch", "truncated"]],
        );
        assert.equal(report.exitCode, 5);
      });
    },
  );

  test(
    "Given a broken audit line, Then audit reports integrity-mismatch naming " +
      "the line, and the entries before it are counted",
    async () => {
      const { scope } = await populatedScope();
      const log = agents(scope, "audit", "audit.jsonl");
      const lines = readFileSync(log, "utf8").split("\n");
      lines[1] = lines[1]!.replace('"outcome":"', '"outcome":"x');
      writeFileSync(log, lines.join("\n"));
      const report = await fsckUnchanged(scope);
      const findings = only(report, "audit");
      assert.deepEqual(
        findings.map((each) => [each.code, (each.details["brokenAt"] as { line: number }).line]),
        [["integrity-mismatch", 2]],
      );
      assert.equal(report.counts.audit, 1);
      assert.equal(report.exitCode, 5);
    },
  );

  test(
    "Given only leftovers (orphan manifest, staging, unknown entries), Then " +
      "each is a notice of its class and fsck exits 0",
    async () => {
      const { scope, revisionDir } = await populatedScope();
      const orphan = join(revisionDir, "..", `.manifest-sha256-${"c".repeat(64)}.json`);
      writeFileSync(orphan, "{}");
      const staging = join(revisionDir, "..", ".staging-0badc0de-1-aaaaaaaaaaaa");
      mkdirSync(staging);
      const strays = [
        agents(scope, "resolutions", "notes.txt"),
        agents(scope, "blobs", "stray"),
        agents(scope, "refs", "instances", "Bad Name.json"),
        agents(scope, "queue", "README"),
      ];
      for (const path of strays) writeFileSync(path, "x");
      const report = await fsckUnchanged(scope);
      assert.deepEqual(
        report.classes.manifests.map((each) => each.path),
        [orphan],
      );
      assert.deepEqual(
        report.classes.staging.map((each) => each.path),
        [staging],
      );
      assert.deepEqual(report.classes.unknown.map((each) => each.path).sort(), [...strays].sort());
      for (const finding of [...report.classes.manifests, ...report.classes.staging, ...report.classes.unknown])
        assert.equal(finding.kind, "notice");
      assert.equal(report.ok, true);
      assert.equal(report.exitCode, 0);
    },
  );

  test(
    "Given a store directory replaced by a symlink, Then that store is one " +
      "finding of its class and the rest of the scope is still checked",
    async () => {
      const { scope } = await populatedScope();
      const elsewhere = tempDir("oats-fsck-elsewhere-");
      renameSync(agents(scope, "queue"), join(elsewhere, "queue"));
      symlinkSync(join(elsewhere, "queue"), agents(scope, "queue"));
      const report = await fsckUnchanged(scope);
      assert.deepEqual(
        report.classes.jobs.map((each) => [each.subject, each.code]),
        [[".agents/queue", "invalid-artifact-store"]],
      );
      assert.equal(report.counts.records, 2, "records were still checked");
      assert.ok(report.counts.audit > 0, "the audit log was still checked");
      assert.equal(report.exitCode, 4);
    },
  );

  test(
    "Given damage of several kinds, Then the exit code is that of the most " +
      "serious: mismatch over invalid over missing",
    async () => {
      const { scope, captureRecord } = await populatedScope();
      writeInstanceRef(scope, "ghost", `sha256-${"e".repeat(64)}`); // missing
      writeFileSync(agents(scope, "queue", "broken.json"), "{"); // invalid
      let report = await fsckUnchanged(scope);
      assert.equal(report.exitCode, 4);
      assert.equal(report.worst?.class, "jobs");
      flipByte(agents(scope, "resolutions", `${captureRecord}.json`)); // mismatch
      report = await fsckUnchanged(scope);
      assert.equal(report.exitCode, 5);
      assert.equal(report.worst?.code, "integrity-mismatch");
      assert.equal(report.classes.instances.length, 1);
    },
  );

  test("mostSerious: mismatch > invalid > missing > refused; notices never count", () => {
    const at = (kind: Finding["kind"]): Finding => ({
      class: "records",
      subject: kind,
      path: null,
      code: null,
      kind,
      message: "",
      details: {},
    });
    assert.equal(mostSerious([at("missing"), at("refused"), at("invalid"), at("notice")])?.kind, "invalid");
    assert.equal(mostSerious([at("refused"), at("missing")])?.kind, "missing");
    assert.equal(mostSerious([at("refused"), at("mismatch"), at("invalid")])?.kind, "mismatch");
    assert.equal(mostSerious([at("notice")]), null);
  });
});

describe("oats fsck (CLI)", () => {
  test(
    "Given a clean scope, When `oats --json fsck` runs, Then exit 0 and the " + "result is the whole report",
    async () => {
      const { scope } = await populatedScope();
      const run = runOats(["--json", "--scope", scope, "fsck"]);
      assert.equal(run.status, 0, run.stderr);
      const envelope = JSON.parse(run.stdout);
      assert.equal(envelope.ok, true);
      assert.equal(envelope.result.ok, true);
      assert.deepEqual(Object.keys(envelope.result.classes), [...FINDING_CLASSES]);
      assert.equal(envelope.result.counts.records, 2);
    },
  );

  test(
    "Given damage in several classes, Then --json carries the most serious " +
      "finding's code and the whole report; human output groups by class",
    async () => {
      const { scope, blobs } = await populatedScope();
      writeInstanceRef(scope, "ghost", `sha256-${"e".repeat(64)}`);
      flipByte(agents(scope, "blobs", blobs.config), 3);
      writeFileSync(agents(scope, "resolutions", "notes.txt"), "x");
      const before = snapshotTree(scope);
      const run = runOats(["--json", "--scope", scope, "fsck"]);
      assert.equal(run.status, 5);
      const envelope = JSON.parse(run.stdout);
      assert.equal(envelope.error.code, "integrity-mismatch");
      assert.equal(envelope.error.kind, "mismatch");
      const report = envelope.error.details.report;
      assert.deepEqual(
        report.classes.blobs.map((each: Finding) => each.subject),
        [blobs.config],
      );
      assert.deepEqual(
        report.classes.instances.map((each: Finding) => each.code),
        ["resolution-not-found"],
      );
      assert.equal(report.classes.unknown.length, 1);
      assert.equal(envelope.error.details.first.class, "blobs");

      const human = runOats(["--scope", scope, "fsck"]);
      assert.equal(human.status, 5);
      assert.match(human.stdout, /^blobs: 1 finding\n {2}integrity-mismatch {2}sha256-/m);
      assert.match(human.stdout, /^instances: 1 finding\n {2}resolution-not-found {2}ghost: /m);
      assert.match(human.stdout, /^unknown: 1 finding\n {2}notice {2}\/.*notes\.txt: /m);
      assert.match(human.stdout, /^checked .*2 records.*3 findings \(most serious: integrity-mismatch\)$/m);
      assert.match(human.stderr, /^oats: integrity-mismatch: .*\nfsck repaired nothing\. /);
      assert.deepEqual(snapshotTree(scope), before, "nothing repaired");
      assert.ok(readdirSync(agents(scope, "blobs")).includes(blobs.config));
    },
  );
});
