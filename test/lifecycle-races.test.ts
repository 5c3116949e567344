/**
 * gc against every publisher and dispatcher, as real concurrent processes
 * (test/support/race-child.ts), for many rounds: whatever a publisher
 * commits, and whatever a dispatch runs and seals, has everything it names.
 * The prepare-on-tick dispatch is the sharpest case: its tick's record and
 * spec blob are reachable from no root until the run names them.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { appendFileSync, chmodSync, cpSync, existsSync, mkdirSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import {
  addJob,
  approve,
  currentPrincipal,
  exportBundle,
  fsckScope,
  prepare,
  prepareCapture,
  readJob,
  unpin,
  readResolution,
  readRun,
  referencedArtifacts,
  resolutionPath,
  runDispatchPlanWithEvidence,
  gc,
  pin,
  retainTree,
  retainedTreeDir,
  verifyTree,
  type ResolutionRecord,
} from "../src/index.js";
import { pinnedBlobs } from "../src/acquisition/index.js";
import { compositionBlob } from "../src/lifecycle/index.js";
import { readRecordBytes } from "../src/resolution/index.js";
import { holdPublishLease } from "../src/retention/index.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, REPO, tempDir } from "./helpers.js";
import { startWorkers } from "./support/workers.js";
import { evidenceFixture, type ScriptOptions } from "./support/evidence-fixture.js";
import { runDir } from "./support/evidence-run.js";
import type { IntegrityInput } from "../src/retention/index.js";

const CHILD = join(REPO, "test/support/race-child.ts");

const sh = (body: string, extra: Partial<ScriptOptions> = {}): ScriptOptions => ({
  script: `#!/bin/sh\n${body}\n`,
  ...extra,
});

/** A tree of `files` files that no other tree shares. */
function tree(label: string, files = 3): string {
  const dir = join(tempDir("oats-race-tree-"), label);
  mkdirSync(join(dir, "bin"), { recursive: true });
  for (let index = 0; index < files; index++) writeFileSync(join(dir, `file-${index}.txt`), `${label} ${index}\n`);
  writeFileSync(join(dir, "bin/run"), "#!/bin/sh\necho run\n", { mode: 0o755 });
  return dir;
}

/** Everything a record needs is in the scope: its artifacts, its pinned blobs, its composition blob. */
function assertWhole(scope: string, id: string, what: string): ResolutionRecord {
  const { record } = readRecordBytes(scope, id);
  for (const ref of referencedArtifacts(record))
    assert.ok(existsSync(retainedTreeDir(scope, ref)), `${what}: ${ref.kind} ${ref.key} is present`);
  const composition = compositionBlob(record);
  for (const digest of [...pinnedBlobs(record), ...(composition === null ? [] : [composition])])
    assert.ok(existsSync(join(scope, ".agents/blobs", digest)), `${what}: blob ${digest} is present`);
  return record;
}

/** fsck finds nothing beyond notices (leftover run copies and the like). */
async function assertFsckClean(scope: string, what: string): Promise<void> {
  const report = await fsckScope(scope);
  const serious = Object.values(report.classes)
    .flat()
    .filter((finding) => finding.kind !== "notice");
  assert.deepEqual(
    serious.map((finding) => `${finding.class} ${finding.code} ${finding.message}`),
    [],
    `${what}: fsck is clean`,
  );
}

/** A capture prepared from a spec in `home`, approved, and queued as `job` with `policy`. */
async function approvedCapture(scope: string, job: string, policy: "capture" | "prepare-on-tick") {
  const home = tempDir("oats-race-home-");
  const tool = join(home, "tool");
  mkdirSync(join(tool, "bin"), { recursive: true });
  writeFileSync(join(tool, "bin/run"), "#!/bin/sh\necho ran\n");
  chmodSync(join(tool, "bin/run"), 0o755);
  writeFileSync(
    join(home, "class.yaml"),
    stringify({
      schemaVersion: 1,
      wings: { lobby: "public" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    }),
  );
  writeFileSync(join(home, "profile.yaml"), "schemaVersion: 1\n");
  const specPath = join(home, "spec.yaml");
  writeFileSync(
    specPath,
    stringify({
      name: job,
      executable: { tree: "./tool", path: "bin/run", args: [] },
      target: { wing: "lobby" },
      classification: "public",
      classificationConfig: "./class.yaml",
      profile: "./profile.yaml",
      env: { PATH: "/usr/bin:/bin" },
      credentials: [],
      // Tests run as root: only a privileged composition may run there.
      privileged: true,
    }),
  );
  const prepared = await prepareCapture(scope, specPath);
  await approve(scope, prepared.composition.subject, { reason: "race test" });
  await addJob(scope, { job, resolution: prepared.id, recurrence: { policy } });
  return { specPath, prepared };
}

describe("gc and a prepare-on-tick dispatch --exec race (real processes)", () => {
  test("Given a prepare-on-tick job whose spec gains a comment line every round, " +
    "When gc --delete --grace 0 and dispatch --exec start together, many rounds, " +
    "Then every run is sealed with its resolution and everything it names present", {
    timeout: 600_000,
  }, async (t) => {
    const scope = tempDir("oats-race-tick-");
    const { specPath } = await approvedCapture(scope, "ticker", "prepare-on-tick");
    const outcomes = { runs: 0, gcDeleted: 0, gcBusy: 0 };
    // Every round's loss, so that a failure says how often the race tripped.
    const trips: string[] = [];
    const rounds = Number(process.env["OATS_RACE_ROUNDS"] ?? 12);
    const pair = await startWorkers(CHILD, 2, REPO);
    t.after(() => pair.close());
    for (let round = 0; round < rounds; round++) {
      // The record changes (the spec's bytes are pinned), the composition does not: the tick stays approved.
      appendFileSync(specPath, `# round ${round}\n`);
      const [gcOut, dispatched] = await pair.round([
        { op: "gc", scope, delayMs: (round % 4) * 40 },
        { op: "dispatch-exec", scope, job: "ticker" },
      ]);
      if (gcOut.ok && gcOut.deleted.length > 0) outcomes.gcDeleted += 1;
      if (!gcOut.ok) {
        assert.equal(gcOut.error.code, "busy", JSON.stringify(gcOut));
        outcomes.gcBusy += 1;
      } else if (gcOut.missing.length > 0) trips.push(`round ${round}: gc missing ${JSON.stringify(gcOut.missing)}`);
      if (!dispatched.ok) {
        trips.push(`round ${round}: dispatch refused ${dispatched.error.code}: ${dispatched.error.message}`);
        continue;
      }
      outcomes.runs += 1;
      assert.equal(readRun(scope, dispatched.handle).state, "sealed");
      try {
        assertWhole(scope, dispatched.resolution, `round ${round}: the run's resolution`);
      } catch (error) {
        trips.push(`round ${round}: sealed run ${dispatched.handle}: ${(error as Error).message}`);
      }
    }
    const tripped = new Set(trips.map((trip) => trip.split(":")[0])).size;
    console.log(`tick race outcomes: ${JSON.stringify(outcomes)}; tripped in ${tripped} of ${rounds} rounds`);
    assert.deepEqual(trips, [], `the race tripped in ${tripped} of ${rounds} rounds`);
    await assertFsckClean(scope, "after the rounds");
  });
});

/** One race: what to set up before it, the request for the racing child, and what must hold after it. */
interface Side {
  readonly name: string;
  /** A refusal that is right when gc went first and took the garbage before this side looked (pin, queue add). */
  readonly goneFirst?: string;
  setup(round: number): Promise<Record<string, unknown>>;
  check(out: any, round: number): Promise<void>;
}

describe("gc against every publisher and dispatcher (real processes)", () => {
  test("Given garbage that each publisher or dispatcher is about to claim, When gc --delete --grace 0 starts " +
    "with it, many rounds of each, Then every operation succeeds and what it committed or ran has what it names", {
    timeout: 1_200_000,
  }, async (t) => {
    const scope = tempDir("oats-race-all-");
    const plain = await approvedCapture(scope, "plain", "capture");
    const tick = await approvedCapture(scope, "ticker", "prepare-on-tick");
    const source = tree("soul", 200);
    const racePlan = {
      schemaVersion: 1,
      instance: "racer",
      source: { identity: "path:/srv/souls/racer", revision: "local", dir: source },
      capabilities: [{ id: "demo.hello", dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
      entrypoints: {
        run: { capability: "source", path: "bin/run", role: "command" },
        hello: { capability: "demo.hello", path: "bin/hello.mjs", role: "command" },
      },
    };
    // A capture no job names (garbage), for capture prepare and queue add to claim.
    const spare = await approvedCapture(tempDir("oats-race-spare-"), "spare", "capture");
    const loose = tree("loose", 200);
    const tarballDir = tempDir("oats-race-tgz-");
    cpSync(tree("packed", 200), join(tarballDir, "package"), { recursive: true });
    const tarball = join(tarballDir, "packed.tgz");
    execFileSync("tar", ["-czf", tarball, "-C", tarballDir, "package"]);
    // A bundle of a prepared instance (a record and its trees), exported from another scope.
    const elsewhere = tempDir("oats-race-elsewhere-");
    const exported = await prepare(elsewhere, { ...racePlan, instance: "exported" });
    const bundle = join(tempDir("oats-race-bundle-"), "b.tar");
    await exportBundle(elsewhere, [exported.id], bundle);
    const mended = tree("mended", 50);
    let mendedRevision: { dir: string; integrity: IntegrityInput } = { dir: "", integrity: "" };

    const whole = (id: string, what: string) => void assertWhole(scope, id, what);
    const sides: Side[] = [
      {
        name: "prepare",
        setup: async () => {
          await prepare(scope, racePlan);
          unlinkSync(join(scope, ".agents/refs/instances/racer.json"));
          return { plan: racePlan };
        },
        check: async (out) => {
          const read = await readResolution(scope, out.id, { verify: true });
          assert.equal(read.verified, true);
          whole(out.id, "prepare");
        },
      },
      {
        name: "capture-prepare",
        setup: async () => {
          await prepareCapture(scope, spare.specPath);
          return { spec: spare.specPath };
        },
        // Nothing names the record once the prepare is done (no job yet): gc may take it from then on.
        check: async () => {},
      },
      {
        name: "retain",
        setup: async () => {
          await retainTree(scope, { kind: "capture", key: "loose", source: loose });
          return { key: "loose", source: loose };
        },
        check: async () => {},
      },
      {
        name: "retain-tarball",
        setup: async () => ({ key: "packed", tarball }),
        check: async () => {},
      },
      { name: "import", setup: async () => ({ bundle }), check: async () => {} },
      {
        name: "queue",
        goneFirst: "resolution-not-found",
        setup: async () => ({ job: "spare", resolution: (await prepareCapture(scope, spare.specPath)).id }),
        check: async (out, round) => {
          const { resolution } = readJob(scope, "spare");
          whole(resolution, `queue, round ${round}`);
          unlinkSync(join(scope, ".agents/queue/spare.json"));
          void out;
        },
      },
      {
        name: "pin",
        goneFirst: "artifact-not-found",
        setup: async () => {
          const receipt = await retainTree(scope, { kind: "capture", key: "loose", source: loose });
          return { ref: `capture:loose@oats.tree-exec.v1:${receipt.execIntegrity.value}` };
        },
        check: async (_out, round) => {
          const receipt = await retainTree(scope, { kind: "capture", key: "loose", source: loose });
          assert.equal(receipt.status, "kept", `pin, round ${round}: the pinned revision stayed`);
          await unpin(scope, `capture:loose@oats.tree-exec.v1:${receipt.execIntegrity.value}`);
        },
      },
      {
        name: "repair",
        setup: async () => {
          const receipt = await retainTree(scope, { kind: "capture", key: "mended", source: mended });
          mendedRevision = { dir: receipt.dir, integrity: receipt.execIntegrity };
          chmodSync(join(receipt.dir, "file-0.txt"), 0o644);
          writeFileSync(join(receipt.dir, "file-0.txt"), "damaged\n");
          return { ref: `capture:mended@oats.tree-exec.v1:${receipt.execIntegrity.value}`, from: mended };
        },
        check: async () => {
          // Repaired, then garbage again: gc may have taken it since, but never half of it.
          if (existsSync(mendedRevision.dir))
            await verifyTree(scope, { kind: "capture", key: "mended", integrity: mendedRevision.integrity });
        },
      },
      { name: "put-blob", setup: async (round) => ({ text: `blob of round ${round}\n` }), check: async () => {} },
      {
        name: "dispatch",
        setup: async (round) => {
          appendFileSync(tick.specPath, `# dispatch round ${round}\n`);
          return { job: "ticker" };
        },
        check: async () => {},
      },
      {
        name: "dispatch-exec",
        setup: async () => ({ job: "plain" }),
        check: async (out, round) => whole(out.resolution, `dispatch --exec, round ${round}`),
      },
      {
        name: "dispatch-exec",
        setup: async (round) => {
          appendFileSync(tick.specPath, `# exec round ${round}\n`);
          return { job: "ticker" };
        },
        check: async (out, round) => whole(out.resolution, `prepare-on-tick dispatch --exec, round ${round}`),
      },
    ];
    void plain;
    // Two rounds of each of twelve sides by default (OATS_RACE_ROUNDS for more): a round is two Node processes.
    const rounds = Number(process.env["OATS_RACE_ROUNDS"] ?? 2);
    const pair = await startWorkers(CHILD, 2, REPO);
    t.after(() => pair.close());
    const trips: string[] = [];
    const tally: Record<string, { ok: number; goneFirst: number; gcBusy: number; gcDeleted: number }> = {};
    for (let round = 0; round < rounds; round++) {
      for (const [index, side] of sides.entries()) {
        const label = `${side.name}${index === sides.length - 1 ? " (tick)" : ""}`;
        const counts = (tally[label] ??= { ok: 0, goneFirst: 0, gcBusy: 0, gcDeleted: 0 });
        // Garbage for gc to verify and delete while the other side works, besides what that side claims.
        await retainTree(scope, { kind: "capture", key: "junk", source: tree(`junk-${round}-${index}`, 150) });
        const request = { op: side.name, scope, ...(await side.setup(round)) };
        const [gcOut, out] = await pair.round([{ op: "gc", scope, delayMs: ((round + index) % 4) * 40 }, request]);
        if (!gcOut.ok) {
          assert.equal(gcOut.error.code, "busy", `${label}: ${JSON.stringify(gcOut)}`);
          counts.gcBusy += 1;
        } else {
          if (gcOut.deleted.length > 0) counts.gcDeleted += 1;
          if (gcOut.missing.length > 0)
            trips.push(`${label}, round ${round}: gc missing ${JSON.stringify(gcOut.missing)}`);
        }
        if (!out.ok && out.error.code === side.goneFirst) {
          counts.goneFirst += 1;
          continue;
        }
        if (!out.ok) {
          trips.push(`${label}, round ${round}: refused ${out.error.code}: ${out.error.message}`);
          continue;
        }
        counts.ok += 1;
        try {
          await side.check(out, round);
        } catch (error) {
          trips.push(`${label}, round ${round}: ${(error as Error).message}`);
        }
      }
    }
    console.log(`race outcomes: ${JSON.stringify(tally)}`);
    assert.deepEqual(trips, [], `the races tripped ${trips.length} times`);
    await assertFsckClean(scope, "after every race");
  });
});

describe("a run whose resolution is gone is not silent", () => {
  test(
    "Given a sealed run and an open one whose records were removed behind oats' back, When fsck and gc run, " +
      "Then fsck reports each as resolution-not-found (exit 3) and gc lists each as a missing root",
    async () => {
      const f = await evidenceFixture(sh("echo sealed"));
      const sealed = await runDispatchPlanWithEvidence(f.scope, await f.plan(), { output: "quiet" });
      await assertFsckClean(f.scope, "before");
      unlinkSync(resolutionPath(f.scope, f.resolution));
      const report = await fsckScope(f.scope);
      assert.equal(report.exitCode, 3);
      const runs = report.classes.runs.filter((finding) => finding.kind !== "notice");
      assert.deepEqual(
        runs.map((finding) => [finding.code, finding.subject]),
        [["resolution-not-found", sealed.handle]],
      );
      const dry = await gc(f.scope, { graceMs: 0 });
      assert.deepEqual(dry.roots.missing, [{ root: `job:probe,run:${sealed.handle}`, id: f.resolution }]);
      // A run that is not sealed (its control file alone names the record) is a root the same way.
      const other = await evidenceFixture(sh("echo open", { job: "open" }));
      const openScope = other.scope;
      const held = await runDispatchPlanWithEvidence(openScope, await other.plan(), { output: "quiet" });
      unlinkSync(join(runDir(openScope, held.handle), "record.json"));
      unlinkSync(resolutionPath(openScope, other.resolution));
      const openReport = await fsckScope(openScope);
      assert.ok(
        openReport.classes.runs.some(
          (finding) => finding.code === "resolution-not-found" && finding.subject === held.handle,
        ),
        JSON.stringify(openReport.classes.runs),
      );
      assert.deepEqual((await gc(openScope, { graceMs: 0 })).roots.missing, [
        { root: `job:open,run:${held.handle}`, id: other.resolution },
      ]);
    },
  );
});

describe("gc reads its roots under its lock, after the last publisher", () => {
  test("Given a publisher holding its lease when gc --delete takes the gc lock, When the publisher then pins a " +
    "revision no root reached and lets its lease go, Then gc, which waited for it, keeps that revision and " +
    "deletes the other garbage", { timeout: 120_000 }, async () => {
    const scope = tempDir("oats-race-roots-");
    const late = await retainTree(scope, { kind: "capture", key: "late", source: tree("late") });
    const junk = await retainTree(scope, { kind: "capture", key: "junk", source: tree("junk") });
    const lateRef = `capture:late@oats.tree-exec.v1:${late.execIntegrity.value}`;
    const junkRef = `capture:junk@oats.tree-exec.v1:${junk.execIntegrity.value}`;
    // Both are garbage when gc starts.
    const dry = await gc(scope, { graceMs: 0 });
    assert.deepEqual(dry.collect.map((item) => item.ref).sort(), [junkRef, lateRef].sort());
    const hold = await holdPublishLease(scope);
    let held = true;
    try {
      const collecting = gc(scope, { delete: true, graceMs: 0, lockWaitMs: 60_000 });
      // gc has its lock and waits on the lease.
      const lock = join(scope, ".agents/gc.lock");
      for (const started = Date.now(); !existsSync(lock); ) {
        assert.ok(Date.now() - started < 30_000, "gc took its lock");
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      // The publisher passed before the lock was taken, so it still works: its pin is a root gc must see.
      await pin(scope, lateRef);
      held = false;
      await hold.release();
      const report = await collecting;
      assert.deepEqual(
        report.collect.map((item) => item.ref),
        [junkRef],
      );
      assert.equal(report.roots.pins, 1);
      await verifyTree(scope, { kind: "capture", key: "late", integrity: late.execIntegrity });
      assert.equal(existsSync(junk.dir), false);
    } finally {
      if (held) await hold.release();
    }
  });
});
