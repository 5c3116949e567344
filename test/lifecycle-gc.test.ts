/**
 * gc: roots, closure, grace, damage, deletion and its audit, and the race
 * with publishers (real processes). Fixtures are built through the library;
 * the commands run through the built CLI (dist/; `npm run build` first).
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  addJob,
  gc,
  listResolutionIds,
  pin,
  prepare,
  prepareCapture,
  putBlob,
  readAudit,
  readResolution,
  pinSourceIdentity,
  readSourceIdentity,
  retainTree,
  retainedTreeDir,
  sourceIdentityKey,
  unpin,
  verifyTree,
  writeResolution,
  type GcReport,
} from "../src/index.js";
import { compositionBlob } from "../src/lifecycle/index.js";
import { readRecordBytes } from "../src/resolution/index.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, REPO, runOats, snapshotTree, tempDir } from "./helpers.js";
import { runTogether } from "./support/go.js";
import { hostTag } from "../src/retention/store/layout.js";
import { withGcLock } from "../src/retention/store/lease.js";

const HELLO = "demo.hello";
const CHILD = join(REPO, "test/support/lifecycle-child.ts");

function plan(value = "hello", instance = "demo") {
  return {
    schemaVersion: 1,
    instance,
    capabilities: [{ id: HELLO, dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
    config: [{ pointer: "/settings/greeting", value, origin: { kind: "operator", ref: "plan.yaml" } }],
    entrypoints: { hello: { capability: HELLO, path: "bin/hello.mjs", role: "command" } },
  };
}

/** A tree of `files` files that no fixture shares. */
function tree(label: string, files = 3): string {
  const dir = join(tempDir("oats-gc-tree-"), label);
  mkdirSync(join(dir, "bin"), { recursive: true });
  for (let index = 0; index < files; index++) writeFileSync(join(dir, `file-${index}.txt`), `${label} ${index}\n`);
  writeFileSync(join(dir, "bin/run"), "#!/bin/sh\necho run\n", { mode: 0o755 });
  return dir;
}

function sizeOf(path: string): number {
  const stats = lstatSync(path);
  if (!stats.isDirectory()) return stats.size;
  return readdirSync(path).reduce((sum, name) => sum + sizeOf(join(path, name)), 0);
}

function manifestOf(dir: string): string {
  return join(dir, "..", `.manifest-${dir.slice(dir.lastIndexOf("/") + 1)}.json`);
}

function refs(report: GcReport, list: "collect" | "young" | "damaged" = "collect"): string[] {
  return report[list].map((item) => item.ref).sort();
}

/** Make a path's mtime two days old (older than the default grace). */
function age(path: string): void {
  const old = new Date(Date.now() - 2 * 24 * 3600 * 1000);
  utimesSync(path, old, old);
}

interface Scene {
  scope: string;
  /** The record the instance points at now, and the one it pointed at before. */
  current: string;
  previous: string;
  /** An unreferenced capture revision, and its ref text. */
  orphanDir: string;
  orphanRef: string;
  orphanBlob: string;
}

/** An instance prepared twice (the first record is now unreferenced), a retained tree nothing names, and a blob
 * nothing names. */
async function scene(): Promise<Scene> {
  const scope = tempDir("oats-gc-scope-");
  const previous = (await prepare(scope, plan("hello"))).id;
  const current = (await prepare(scope, plan("bonjour"))).id;
  const orphan = await retainTree(scope, { kind: "capture", key: "orphan", source: tree("orphan") });
  const orphanBlob = putBlob(scope, Buffer.from("nobody pins me\n")).digest;
  return {
    scope,
    current,
    previous,
    orphanDir: orphan.dir,
    orphanRef: `capture:orphan@oats.tree-exec.v1:${orphan.execIntegrity.value}`,
    orphanBlob,
  };
}

function gcJson(scope: string, ...args: string[]) {
  const run = runOats(["--json", "--scope", scope, "gc", ...args]);
  const envelope = JSON.parse(run.stdout);
  return { run, envelope, report: envelope.result as GcReport };
}

describe("gc: a dry run lists exactly what no root reaches", () => {
  test(
    "Given an instance, an old record, an orphan tree and an orphan blob, " +
      "When gc runs with no grace, Then exactly those three are listed with " +
      "their bytes and nothing changes",
    async () => {
      const s = await scene();
      const before = snapshotTree(s.scope);
      const { run, report } = gcJson(s.scope, "--grace", "0");
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.deepEqual(refs(report), [s.orphanRef, s.orphanBlob, s.previous].sort());
      const bytes =
        sizeOf(s.orphanDir) +
        sizeOf(manifestOf(s.orphanDir)) +
        sizeOf(join(s.scope, ".agents/resolutions", `${s.previous}.json`)) +
        sizeOf(join(s.scope, ".agents/blobs", s.orphanBlob));
      assert.equal(report.bytes, bytes);
      assert.equal(report.dryRun, true);
      assert.equal(report.deleted, false);
      // The fixture capability is kept under both its legacy and its exec name: two revisions, one tree.
      assert.equal(report.kept.revisions, 2);
      assert.equal(report.kept.trees, 1);
      assert.equal(report.kept.records, 1);
      assert.deepEqual(snapshotTree(s.scope), before, "a dry run changes nothing");
      const human = runOats(["--scope", s.scope, "gc", "--grace", "0"]);
      assert.match(human.stdout, /would delete +record +sha256-/);
      assert.match(human.stdout, /would free .* in 3 items \(dry run: --delete deletes\)/);
    },
  );

  test(
    "Given the legacy- and exec-named copies of one capability both " +
      "unreachable, When gc lists them, Then they are two revisions and one tree",
    async () => {
      const scope = tempDir("oats-gc-scope-");
      await prepare(scope, plan());
      unlinkSync(join(scope, ".agents/refs/instances/demo.json"));
      const report = await gc(scope, { graceMs: 0 });
      assert.equal(report.collect.filter((item) => item.type === "revision").length, 2);
      assert.equal(report.collectTrees, 1);
    },
  );
});

describe("gc --delete", () => {
  test(
    "Given the scene, When gc --delete runs with no grace, Then exactly the " +
      "unreachable items are gone, the rest verifies, and one audit entry " +
      "lists them",
    async () => {
      const s = await scene();
      const { run, report } = gcJson(s.scope, "--grace", "0", "--delete");
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.equal(report.deleted, true);
      assert.ok(!existsSync(s.orphanDir));
      assert.ok(!existsSync(manifestOf(s.orphanDir)));
      assert.ok(!existsSync(join(s.scope, ".agents/blobs", s.orphanBlob)));
      assert.deepEqual(listResolutionIds(s.scope), [s.current]);
      const current = await readResolution(s.scope, s.current, { verify: true });
      assert.equal(current.verified, true);
      // No staging or lock left behind, and the audit names every deletion.
      const fsck = runOats(["--json", "--scope", s.scope, "fsck"]);
      assert.equal(fsck.status, 0, fsck.stdout);
      assert.deepEqual(JSON.parse(fsck.stdout).result.classes.staging, []);
      assert.ok(!existsSync(join(s.scope, ".agents/gc.lock")));
      const entries = readAudit(s.scope).entries.filter((entry) => entry.action === "gc");
      assert.equal(entries.length, 1);
      assert.deepEqual(
        (entries[0]!.details["delete"] as { ref: string }[]).map((item) => item.ref).sort(),
        [s.orphanRef, s.orphanBlob, s.previous].sort(),
      );
      assert.deepEqual(report.audit, { seq: entries[0]!.seq, hash: entries[0]!.hash });
      // A second run finds nothing.
      assert.deepEqual(gcJson(s.scope, "--grace", "0", "--delete").report.collect, []);
    },
  );

  test("Given a read-only retained revision, When gc deletes it, Then it is gone", async () => {
    const s = await scene();
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) if (lstatSync(join(dir, name)).isDirectory()) walk(join(dir, name));
      chmodSync(dir, 0o555);
    };
    walk(s.orphanDir);
    const report = await gc(s.scope, { graceMs: 0, delete: true });
    assert.ok(refs(report).includes(s.orphanRef));
    assert.ok(!existsSync(s.orphanDir));
  });

  test(
    "Given the audit log cannot be written, When gc --delete runs, Then it " + "is refused and nothing is deleted",
    async () => {
      const s = await scene();
      rmSync(join(s.scope, ".agents/audit"), { recursive: true, force: true });
      writeFileSync(join(s.scope, ".agents/audit"), "not a directory\n");
      const before = snapshotTree(s.scope);
      const { run, envelope } = gcJson(s.scope, "--grace", "0", "--delete");
      assert.notEqual(run.status, 0);
      assert.equal(envelope.ok, false);
      assert.deepEqual(snapshotTree(s.scope), before);
    },
  );

  test(
    "Given --delete and --dry-run together, or a malformed --grace, When gc " + "runs, Then it is a usage error",
    async () => {
      const s = await scene();
      assert.equal(gcJson(s.scope, "--delete", "--dry-run").envelope.error.code, "usage");
      for (const grace of ["1", "-1h", "1.5h", "h", "24 h"]) {
        const { run, envelope } = gcJson(s.scope, "--grace", grace);
        assert.equal(run.status, 2, grace);
        assert.equal(envelope.error.code, "usage", grace);
      }
    },
  );
});

describe("gc: every root keeps its closure", () => {
  async function captureScene(policy: "capture" | "prepare-on-tick") {
    const scope = tempDir("oats-gc-cap-");
    const dir = tempDir("oats-gc-spec-");
    writeFileSync(
      join(dir, "class.yaml"),
      JSON.stringify({ schemaVersion: 1, wings: {}, repos: {}, defaults: [], fallback: "internal", principals: {} }) +
        "\n",
    );
    writeFileSync(join(dir, "profile.yaml"), "schemaVersion: 1\n");
    const spec = {
      name: "nightly",
      executable: { tree: tree("tool"), path: "bin/run", args: [] },
      target: { wing: "x" },
      classification: "internal",
      classificationConfig: join(dir, "class.yaml"),
      env: { PATH: "/usr/bin:/bin" },
      credentials: [],
    };
    writeFileSync(join(dir, "spec.yaml"), `${JSON.stringify(spec)}\n`);
    const prepared = await prepareCapture(scope, join(dir, "spec.yaml"));
    await addJob(scope, { job: "nightly", resolution: prepared.id, recurrence: { policy } });
    return { scope, prepared };
  }

  for (const policy of ["capture", "prepare-on-tick"] as const) {
    test(
      `Given a queued ${policy} job, When gc --delete runs with no grace, Then ` +
        `its record, tree and every blob it pins (config, spec, composition) stay`,
      async () => {
        const { scope, prepared } = await captureScene(policy);
        const report = await gc(scope, { graceMs: 0, delete: true });
        assert.deepEqual(report.collect, []);
        assert.equal(report.roots.jobs, 1);
        const { record } = readRecordBytes(scope, prepared.id);
        assert.ok(existsSync(prepared.retained.dir));
        for (const digest of [prepared.blobs.config, prepared.blobs.spec, prepared.blobs.composition])
          assert.ok(existsSync(join(scope, ".agents/blobs", digest)), digest);
        assert.equal(compositionBlob(record), prepared.blobs.composition);
        assert.equal(report.kept.blobs, 3);
      },
    );
  }

  test(
    "Given a capture record no job names, When gc runs with no grace, Then " +
      "its record, tree and blobs are all listed",
    async () => {
      const { scope, prepared } = await captureScene("capture");
      unlinkSync(join(scope, ".agents/queue/nightly.json"));
      const report = await gc(scope, { graceMs: 0 });
      assert.deepEqual(
        refs(report),
        [
          prepared.id,
          prepared.blobs.config,
          prepared.blobs.spec,
          prepared.blobs.composition,
          `capture:nightly@oats.tree-exec.v1:${prepared.retained.execIntegrity.value}`,
        ].sort(),
      );
    },
  );

  test(
    "Given a pinned revision and a pinned record, When gc --delete runs, " +
      "Then both (and the record's closure) stay until unpinned",
    async () => {
      const s = await scene();
      assert.equal((await pin(s.scope, s.orphanRef)).status, "pinned");
      assert.equal((await pin(s.scope, s.orphanRef)).status, "kept");
      await pin(s.scope, s.previous);
      const kept = await gc(s.scope, { graceMs: 0, delete: true });
      assert.deepEqual(refs(kept), [s.orphanBlob]);
      assert.equal(kept.roots.pins, 2);
      assert.ok(existsSync(s.orphanDir));
      assert.ok(listResolutionIds(s.scope).includes(s.previous));
      await unpin(s.scope, s.orphanRef);
      await unpin(s.scope, s.previous);
      const gone = await gc(s.scope, { graceMs: 0, delete: true });
      assert.deepEqual(refs(gone), [s.orphanRef, s.previous].sort());
      const actions = readAudit(s.scope).entries.map((entry) => entry.action);
      assert.deepEqual(
        actions.filter((action) => action === "pin" || action === "unpin"),
        ["pin", "pin", "pin", "unpin", "unpin"],
      );
    },
  );

  test(
    "Given something in the runs store that is not a run but names a record, " +
      "When gc runs, Then that record stays (reading too much is safe)",
    async () => {
      const s = await scene();
      mkdirSync(join(s.scope, ".agents/runs/run-1"), { recursive: true });
      writeFileSync(join(s.scope, ".agents/runs/run-1/log.jsonl"), `${JSON.stringify({ resolution: s.previous })}\n`);
      const report = await gc(s.scope, { graceMs: 0 });
      assert.deepEqual(refs(report), [s.orphanRef, s.orphanBlob].sort());
      // Not a run (a run is a <handle> directory, src/evidence/run-store.ts): kept safe, not counted.
      assert.equal(report.roots.runFiles, 0);
    },
  );

  test(
    "Given a pinned source identity, When gc --delete runs, Then its blob " +
      "stays while a revision of that source stays, and goes with the last one",
    async () => {
      const scope = tempDir("oats-gc-source-");
      const identity = "git:https://example.org/org/souls#souls/a";
      const key = sourceIdentityKey(identity);
      const source = await retainTree(scope, { kind: "source", key, source: tree("soul") });
      pinSourceIdentity(scope, identity);
      await pin(scope, `source:${key}@oats.tree-exec.v1:${source.execIntegrity.value}`);
      const kept = await gc(scope, { graceMs: 0, delete: true });
      assert.deepEqual(refs(kept), []);
      assert.equal(readSourceIdentity(scope, key), identity);
      await unpin(scope, `source:${key}@oats.tree-exec.v1:${source.execIntegrity.value}`);
      const gone = await gc(scope, { graceMs: 0, delete: true });
      assert.deepEqual(
        refs(gone),
        [`sha256-${key}`, `source:${key}@oats.tree-exec.v1:${source.execIntegrity.value}`].sort(),
      );
    },
  );

  test(
    "Given a damaged queued job, When gc --delete runs, Then it refuses (it " +
      "cannot know what the job needs) and nothing is deleted",
    async () => {
      const s = await scene();
      mkdirSync(join(s.scope, ".agents/queue"), { recursive: true });
      writeFileSync(join(s.scope, ".agents/queue/broken.json"), "{not json");
      const before = snapshotTree(s.scope);
      const { run, envelope } = gcJson(s.scope, "--grace", "0", "--delete");
      assert.equal(run.status, 4, run.stdout);
      assert.equal(envelope.error.code, "invalid-artifact-store");
      assert.deepEqual(snapshotTree(s.scope), before);
    },
  );

  test("Given a pin file whose name is not the digest of what it pins, When gc runs, Then it refuses", async () => {
    const s = await scene();
    const pinned = await pin(s.scope, s.orphanRef);
    const other = join(s.scope, ".agents/pins", `${"0".repeat(64)}.json`);
    writeFileSync(other, readFileSync(pinned.path));
    await assert.rejects(
      gc(s.scope, { graceMs: 0 }),
      (error: any) => error.code === "invalid-artifact-store" && /name is not the digest/.test(error.message),
    );
  });

  test("Given a damaged root record, When gc runs, Then it refuses with the record's own error", async () => {
    const s = await scene();
    const path = join(s.scope, ".agents/resolutions", `${s.current}.json`);
    chmodSync(path, 0o644);
    writeFileSync(path, readFileSync(path, "utf8").replace("bonjour", "bonsoir"));
    await assert.rejects(
      gc(s.scope, { graceMs: 0, delete: true }),
      (error: any) => error.code === "integrity-mismatch",
    );
    assert.ok(existsSync(s.orphanDir));
  });

  test("Given refusals of pin and unpin, Then each is typed and changes nothing", async () => {
    const s = await scene();
    const before = snapshotTree(s.scope);
    await assert.rejects(
      pin(s.scope, `capture:orphan@oats.tree-exec.v1:sha256-${"1".repeat(64)}`),
      (error: any) => error.code === "artifact-not-found",
    );
    await assert.rejects(
      pin(s.scope, `sha256-${"2".repeat(64)}`),
      (error: any) => error.code === "resolution-not-found",
    );
    await assert.rejects(
      pin(s.scope, `capture:../x@oats.tree-exec.v1:sha256-${"1".repeat(64)}`),
      (error: any) => error.kind === "invalid",
    );
    await assert.rejects(
      pin(s.scope, "capture:constructor"),
      (error: any) => error.code === "invalid-artifact-reference",
    );
    await assert.rejects(unpin(s.scope, s.orphanRef), (error: any) => error.code === "artifact-not-found");
    assert.deepEqual(snapshotTree(s.scope), before);
    const cli = runOats(["--json", "--scope", s.scope, "unpin", s.previous]);
    assert.equal(cli.status, 3);
    assert.equal(JSON.parse(cli.stdout).error.code, "resolution-not-found");
  });
});

describe("gc: grace and damage", () => {
  test(
    "Given the default grace of 24 h, When gc runs, Then young unreachable " +
      "items are kept and listed as young; aged ones go",
    async () => {
      const s = await scene();
      const young = await gc(s.scope);
      assert.deepEqual(young.collect, []);
      assert.deepEqual(refs(young, "young"), [s.orphanRef, s.orphanBlob, s.previous].sort());
      age(s.orphanDir);
      const report = await gc(s.scope, { delete: true });
      assert.deepEqual(refs(report), [s.orphanRef]);
      assert.ok(!existsSync(s.orphanDir));
      assert.ok(listResolutionIds(s.scope).includes(s.previous));
    },
  );

  test("Given an aged revision retained again, When gc runs, Then retaining restarted its grace period", async () => {
    const s = await scene();
    age(s.orphanDir);
    // The same tree, retained again: kept, and young again.
    const again = await retainTree(s.scope, { kind: "capture", key: "orphan", source: tree("orphan") });
    assert.equal(again.status, "kept");
    assert.deepEqual(
      refs(await gc(s.scope), "young").filter((ref) => ref.startsWith("capture:")),
      [s.orphanRef],
    );
  });

  test(
    "Given a damaged unreachable revision, When gc --delete runs, Then it is " +
      "reported and kept; with --include-damaged it is deleted",
    async () => {
      const s = await scene();
      const file = join(s.orphanDir, "file-0.txt");
      chmodSync(file, 0o644);
      writeFileSync(file, "changed\n");
      const kept = gcJson(s.scope, "--grace", "0", "--delete").report;
      assert.deepEqual(refs(kept, "damaged"), [s.orphanRef]);
      assert.equal(kept.damaged[0]!.damaged!.code, "integrity-mismatch");
      assert.ok(existsSync(file));
      assert.ok(!refs(kept).includes(s.orphanRef));
      const human = runOats(["--scope", s.scope, "gc", "--grace", "0"]);
      assert.match(human.stdout, /^damaged +revision +capture:orphan@.*integrity-mismatch/m);
      const gone = gcJson(s.scope, "--grace", "0", "--delete", "--include-damaged").report;
      assert.deepEqual(refs(gone), [s.orphanRef]);
      assert.equal(gone.collect[0]!.damaged!.code, "integrity-mismatch");
      assert.ok(!existsSync(s.orphanDir));
    },
  );

  test(
    "Given --grace 0 and an item written in the same millisecond gc starts " +
      "(an mtime a fraction ahead of Date.now()), When gc runs, Then it is not young",
    async () => {
      const s = await scene();
      const blob = join(s.scope, ".agents/blobs", s.orphanBlob);
      const ahead = (Date.now() + 0.9) / 1000;
      utimesSync(blob, ahead, ahead);
      const report = await gc(s.scope, { graceMs: 0 });
      assert.deepEqual(refs(report, "young"), []);
      assert.ok(refs(report).includes(s.orphanBlob));
    },
  );

  test("Given a damaged unreachable record, When gc --delete runs, Then it is reported and kept", async () => {
    const s = await scene();
    const path = join(s.scope, ".agents/resolutions", `${s.previous}.json`);
    writeFileSync(path, readFileSync(path, "utf8").replace("hello", "HELLO"));
    const report = await gc(s.scope, { graceMs: 0, delete: true });
    assert.deepEqual(refs(report, "damaged"), [s.previous]);
    assert.ok(existsSync(path));
  });
});

describe("gc and publishers race (real processes)", () => {
  test("Given gc --delete and a prepare started together, many rounds, Then a " +
    "record that commits always has every artifact it names", {
    timeout: 300_000,
  }, async () => {
    const scope = tempDir("oats-gc-race-");
    const source = tree("soul", 400);
    const racePlan = {
      schemaVersion: 1,
      instance: "racer",
      source: { identity: "path:/srv/souls/racer", revision: "local", dir: source },
      capabilities: [{ id: HELLO, dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
      entrypoints: {
        run: { capability: "source", path: "bin/run", role: "command" },
        hello: { capability: HELLO, path: "bin/hello.mjs", role: "command" },
      },
    };
    const junk: Record<string, string> = { "junk-a": tree("junk-a", 1500), "junk-b": tree("junk-b", 1500) };
    const outcomes = { committed: 0, gcDeleted: 0, gcBusy: 0, preparedKept: 0 };
    for (let round = 0; round < 12; round++) {
      // Every round starts with the trees retained and nothing naming them: garbage, unless prepare claims them first.
      await prepare(scope, racePlan);
      unlinkSync(join(scope, ".agents/refs/instances/racer.json"));
      // Other garbage for gc to verify before it deletes, so its deletions land while prepare is at work.
      for (const name of ["junk-a", "junk-b"])
        await retainTree(scope, { kind: "capture", key: name, source: junk[name]! });
      const [gcRun, prepareRun] = await runTogether(
        CHILD,
        [
          { op: "gc", scope, delayMs: (round % 4) * 50 },
          { op: "prepare", scope, plan: racePlan },
        ],
        { cwd: REPO },
      );
      const gcOut = JSON.parse(gcRun!.stdout);
      const prepared = JSON.parse(prepareRun!.stdout);
      if (gcOut.ok && gcOut.deleted.length > 0) outcomes.gcDeleted += 1;
      if (!gcOut.ok) {
        assert.equal(gcOut.error.code, "busy", gcRun!.stdout + gcRun!.stderr);
        outcomes.gcBusy += 1;
      }
      assert.equal(prepared.ok, true, prepareRun!.stdout + prepareRun!.stderr);
      outcomes.committed += 1;
      if (gcOut.ok && !gcOut.deleted.some((ref: string) => ref.startsWith("source:"))) outcomes.preparedKept += 1;
      const read = await readResolution(scope, prepared.id, { verify: true });
      assert.equal(read.verified, true, `round ${round}: the committed record's artifacts verify`);
      for (const entry of Object.values(read.record.artifacts)) {
        assert.ok(
          existsSync(
            retainedTreeDir(scope, { kind: "capability", key: entry.artifact.key, integrity: entry.legacyIntegrity! }),
          ),
          `round ${round}: legacy copy present`,
        );
      }
      assert.deepEqual(
        readdirSync(join(scope, ".agents")).filter((name) => name === "leases" || name === "gc.lock"),
        [],
        "no lease or lock left behind",
      );
    }
    assert.equal(outcomes.committed, 12);
    console.log(`race outcomes: ${JSON.stringify(outcomes)}`);
  });
});

describe("gc --delete and retain race (real processes)", () => {
  test("Given gc --delete and a retain of the revision it is deleting, many rounds, Then the revision is either " +
    "whole or gone, never half-deleted, and a retain that says kept or retained leaves it whole", {
    timeout: 300_000,
  }, async () => {
    const scope = tempDir("oats-gc-retain-race-");
    const source = tree("contested", 1500);
    const outcomes = { retained: 0, kept: 0, gcBusy: 0, retainBusy: 0, gone: 0 };
    for (let round = 0; round < 10; round++) {
      // Every round starts with the revision retained and unrooted: garbage with no grace, unless the retain wins.
      const first = await retainTree(scope, { kind: "capture", key: "contested", source });
      const [gcRun, retainRun] = await runTogether(
        CHILD,
        [
          { op: "gc", scope, delayMs: (round % 3) * 40 },
          { op: "retain", scope, source, key: "contested", delayMs: ((round + 1) % 3) * 40 },
        ],
        { cwd: REPO },
      );
      const gcOut = JSON.parse(gcRun!.stdout);
      const retained = JSON.parse(retainRun!.stdout);
      if (!gcOut.ok) {
        assert.equal(gcOut.error.code, "busy", gcRun!.stdout + gcRun!.stderr);
        outcomes.gcBusy += 1;
      }
      if (!retained.ok) {
        assert.equal(retained.error.code, "busy", retainRun!.stdout + retainRun!.stderr);
        outcomes.retainBusy += 1;
      } else outcomes[retained.status as "retained" | "kept"] += 1;
      if (existsSync(first.dir)) {
        const verified = await verifyTree(scope, { kind: "capture", key: "contested", integrity: first.integrity });
        assert.equal(verified.status, "verified", `round ${round}: a revision left in place is whole`);
      } else {
        outcomes.gone += 1;
        assert.ok(gcOut.ok, `round ${round}: only a gc that succeeded removes it`);
      }
      const parent = join(first.dir, "..");
      const left = existsSync(parent) ? readdirSync(parent).filter((name) => name.startsWith(".staging")) : [];
      assert.deepEqual(left, [], `round ${round}: no staging left`);
      assert.deepEqual(
        readdirSync(join(scope, ".agents")).filter((name) => name === "leases" || name === "gc.lock"),
        [],
        "no lease or lock left behind",
      );
    }
    console.log(`gc/retain race outcomes: ${JSON.stringify(outcomes)}`);
  });
});

describe("leases", () => {
  test("Given gc holding its lock, When another process retains, Then the " +
    "publisher waits for it and gives up with busy (exit 7), having written nothing", {
    timeout: 120_000,
  }, async () => {
    const s = await scene();
    const source = tree("late");
    const before = snapshotTree(s.scope);
    const child = await withGcLock(
      s.scope,
      1000,
      async () =>
        new Promise<{ status: number | null; stdout: string }>((resolve) => {
          const proc = spawn(
            process.execPath,
            [
              join(REPO, "dist/cli/bin.js"),
              "--json",
              "--scope",
              s.scope,
              "retain",
              source,
              "--id",
              "late",
              "--kind",
              "capture",
            ],
            { stdio: ["ignore", "pipe", "pipe"] },
          );
          let stdout = "";
          proc.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
          proc.on("close", (status) => resolve({ status, stdout }));
        }),
    );
    assert.equal(child.status, 7, child.stdout);
    assert.equal(JSON.parse(child.stdout).error.code, "busy");
    assert.deepEqual(snapshotTree(s.scope), before);
  });

  test(
    "Given a live publisher's lease, When gc --delete runs, Then it waits " +
      "and ends in busy with nothing deleted; a dead publisher's lease is " +
      "ignored and removed",
    async () => {
      const s = await scene();
      const leases = join(s.scope, ".agents/leases");
      mkdirSync(leases, { recursive: true });
      writeFileSync(join(leases, ".gitignore"), "*\n");
      const sleeper = spawn(process.execPath, ["-e", "setTimeout(() => {}, 60000)"], { stdio: "ignore" });
      try {
        const live = join(leases, `${hostTag()}-${sleeper.pid}-${"a".repeat(12)}.lease`);
        writeFileSync(live, "{}\n");
        const before = snapshotTree(s.scope);
        await assert.rejects(
          gc(s.scope, { graceMs: 0, delete: true, lockWaitMs: 300 }),
          (error: any) => error.code === "busy" && error.details.leases.includes(live),
        );
        assert.deepEqual(snapshotTree(s.scope), before);
        unlinkSync(live);
      } finally {
        sleeper.kill();
      }
      const dead = join(leases, `${hostTag()}-${spawnSync(process.execPath, ["-e", "0"]).pid}-${"b".repeat(12)}.lease`);
      writeFileSync(dead, "{}\n");
      const report = await gc(s.scope, { graceMs: 0, delete: true, lockWaitMs: 300 });
      assert.ok(refs(report).includes(s.orphanRef));
      assert.ok(!existsSync(dead));
    },
  );

  test("Given a refused publication into an empty scope, Then no lease directory is left behind", async () => {
    const scope = tempDir("oats-gc-lease-");
    const before = snapshotTree(scope);
    await assert.rejects(retainTree(scope, { kind: "capture", key: "x", source: join(scope, "missing") }));
    assert.throws(() => writeResolution(scope, { not: "a record" }));
    assert.deepEqual(snapshotTree(scope), before);
  });
});

describe("gc --why: what keeps one item", () => {
  const why = (scope: string, ref: string, ...args: string[]) => {
    const run = runOats(["--json", "--scope", scope, "gc", "--why", ref, ...args]);
    return { run, envelope: JSON.parse(run.stdout) };
  };

  test("Given an instance's record, Then the instance is the root that keeps it and its revision", async () => {
    const s = await scene();
    const record = why(s.scope, s.current);
    assert.equal(record.run.status, 0, record.run.stderr);
    assert.equal(record.envelope.result.type, "record");
    assert.equal(record.envelope.result.verdict, "kept-by-roots");
    assert.deepEqual(record.envelope.result.keptBy, [{ root: "instance:demo", via: s.current }]);
    const human = runOats(["--scope", s.scope, "gc", "--why", s.current]);
    assert.match(
      human.stdout,
      /^record sha256-[0-9a-f]{64} is kept by 1 root:\n {2}instance:demo \(through resolution /,
    );
  });

  test("Given items nothing reaches, Then the grace period keeps them, and past it gc collects them", async () => {
    const s = await scene();
    for (const ref of [s.previous, s.orphanRef, s.orphanBlob]) {
      assert.equal(why(s.scope, ref).envelope.result.verdict, "kept-young", ref);
      assert.equal(why(s.scope, ref, "--grace", "0").envelope.result.verdict, "collectable", ref);
    }
    assert.equal(why(s.scope, s.orphanBlob).envelope.result.type, "blob");
    // A pin is a root of its own.
    assert.equal(runOats(["--scope", s.scope, "pin", s.orphanRef]).status, 0);
    assert.deepEqual(why(s.scope, s.orphanRef, "--grace", "0").envelope.result.keptBy, [{ root: "pin" }]);
  });

  test("Given an item the scope does not hold, Then artifact-not-found; with --delete, a usage error", async () => {
    const s = await scene();
    const missing = why(s.scope, `capture:orphan@oats.tree-exec.v1:sha256-${"1".repeat(64)}`);
    assert.equal(missing.run.status, 3, missing.run.stdout);
    assert.equal(missing.envelope.error.code, "artifact-not-found");
    const before = snapshotTree(s.scope);
    const both = runOats(["--json", "--scope", s.scope, "gc", "--why", s.orphanRef, "--delete", "--grace", "0"]);
    assert.equal(both.status, 2, both.stdout);
    assert.deepEqual(snapshotTree(s.scope), before);
  });
});
