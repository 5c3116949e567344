/**
 * Whole-scope fsck of what the lifecycle commands leave in a scope: pins
 * (checked like any reference), and leases, quarantined trees and run
 * copies (leftovers, reported as notices). Real scopes built through the
 * library, damaged on disk; fsck must change nothing and exit by the most
 * serious finding.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { createHash, randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { FINDING_CLASSES, canonicalJsonBytes, jsonDigest, pin, prepare, type ScopeFsckReport } from "../src/index.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, runOats, snapshotTree, tempDir } from "./helpers.js";
import { agents, fsckUnchanged } from "./support/scopes.js";

const host = () => createHash("sha256").update(hostname()).digest("hex").slice(0, 8);

async function preparedScope(): Promise<{ scope: string; id: string; revision: string }> {
  const scope = join(tempDir("oats-fsck-life-"), "scope");
  mkdirSync(scope);
  const plan = {
    schemaVersion: 1,
    instance: "demo",
    capabilities: [{ id: "demo.hello", dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
    entrypoints: { hello: { capability: "demo.hello", path: "bin/hello.mjs", role: "command" } },
  };
  const prepared = await prepare(scope, plan);
  const { artifact } = Object.values(prepared.record.artifacts)[0]!;
  return {
    scope,
    id: prepared.id,
    revision: `${artifact.kind}:${artifact.key}@${artifact.integrity.format}:${artifact.integrity.value}`,
  };
}

function others(report: ScopeFsckReport, ...allowed: string[]): Array<[string, unknown[]]> {
  return Object.entries(report.classes).filter(([name, findings]) => !allowed.includes(name) && findings.length > 0);
}

/** A pin file exactly as the pin writer lays it out, for a reference the scope may not hold. */
function handPin(scope: string, ref: Record<string, unknown>): string {
  const name = `${jsonDigest(ref).slice("sha256-".length)}.json`;
  mkdirSync(agents(scope, "pins"), { recursive: true });
  writeFileSync(
    agents(scope, "pins", name),
    canonicalJsonBytes({ schemaVersion: 1, ref, pinnedAt: "2026-01-01T00:00:00.000Z" }),
  );
  return name;
}

/** The pid of a process that has exited. */
function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" });
  return Number(child.stdout);
}

describe("fsck: pins", () => {
  test(
    "Given pins of a present revision and a present record, Then they are " + "counted and nothing is found, exit 0",
    async () => {
      const { scope, id, revision } = await preparedScope();
      await pin(scope, revision);
      await pin(scope, id);
      const report = await fsckUnchanged(scope);
      assert.equal(report.counts.pins, 2);
      assert.deepEqual(report.classes.pins, []);
      assert.equal(report.exitCode, 0);
      assert.ok(FINDING_CLASSES.includes("pins"));
    },
  );

  test(
    "Given well-formed pins of a record and a revision the scope does not " +
      "hold, Then each is a missing pins finding, exit 3",
    async () => {
      const { scope } = await preparedScope();
      const ghostId = `sha256-${"e".repeat(64)}`;
      handPin(scope, { type: "resolution", id: ghostId });
      handPin(scope, {
        type: "artifact",
        kind: "capability",
        key: "demo.gone",
        integrity: { format: "oats.tree-exec.v1", value: `sha256-${"d".repeat(64)}` },
      });
      const report = await fsckUnchanged(scope);
      assert.deepEqual(others(report, "pins"), []);
      assert.deepEqual(report.classes.pins.map((each) => [each.code, each.kind]).sort(), [
        ["artifact-not-found", "missing"],
        ["resolution-not-found", "missing"],
      ]);
      assert.ok(report.classes.pins.some((each) => each.subject === ghostId));
      assert.equal(report.exitCode, 3);
    },
  );

  test(
    "Given a pin renamed to another digest, and a pin that is not JSON, Then " +
      "each is an invalid pins finding, exit 4",
    async () => {
      const { scope, id } = await preparedScope();
      const pinned = await pin(scope, id);
      const renamed = agents(scope, "pins", `${"a".repeat(64)}.json`);
      renameSync(pinned.path, renamed);
      writeFileSync(agents(scope, "pins", `${"b".repeat(64)}.json`), "{not json");
      const report = await fsckUnchanged(scope);
      assert.deepEqual(others(report, "pins"), []);
      assert.equal(report.classes.pins.length, 2);
      for (const finding of report.classes.pins) {
        assert.equal(finding.code, "invalid-artifact-store");
        assert.equal(finding.kind, "invalid");
      }
      assert.match(
        report.classes.pins.find((each) => each.path === renamed)!.message,
        /not the digest of the reference/,
      );
      assert.equal(report.exitCode, 4);
    },
  );

  test(
    "Given a missing pin and a broken one, When `oats --json fsck` runs, " +
      "Then exit 4 and the report has the pins class and count",
    async () => {
      const { scope } = await preparedScope();
      handPin(scope, { type: "resolution", id: `sha256-${"e".repeat(64)}` });
      writeFileSync(agents(scope, "pins", `${"b".repeat(64)}.json`), "{}");
      const before = snapshotTree(scope);
      const run = runOats(["--json", "--scope", scope, "fsck"]);
      assert.equal(run.status, 4, run.stderr);
      const envelope = JSON.parse(run.stdout);
      assert.equal(envelope.error.code, "invalid-artifact-store");
      assert.deepEqual(Object.keys(envelope.error.details.report.classes), [...FINDING_CLASSES]);
      assert.equal(envelope.error.details.report.counts.pins, 2);
      assert.equal(envelope.error.details.first.class, "pins");
      const human = runOats(["--scope", scope, "fsck"]);
      assert.match(human.stdout, /^pins: 2 findings$/m);
      assert.match(human.stdout, /^checked .*2 pins/m);
      assert.deepEqual(snapshotTree(scope), before);
    },
  );
});

describe("fsck: leases, quarantine, run copies", () => {
  test(
    "Given a lease and a run copy of a gone process, a live process's, and a " +
      "quarantined tree, Then the gone ones and the tree are notices, exit 0, " +
      "nothing removed",
    async () => {
      const { scope } = await preparedScope();
      const gone = deadPid();
      const suffix = () => randomBytes(6).toString("hex");
      mkdirSync(agents(scope, "leases"), { recursive: true });
      const goneLease = agents(scope, "leases", `${host()}-${gone}-${suffix()}.lease`);
      const liveLease = agents(scope, "leases", `${host()}-1-${suffix()}.lease`);
      for (const path of [goneLease, liveLease]) writeFileSync(path, "{}\n");
      const goneCopy = agents(scope, "run-copies", `.staging-${host()}-${gone}-${suffix()}`);
      const liveCopy = agents(scope, "run-copies", `.staging-${host()}-1-${suffix()}`);
      for (const path of [goneCopy, liveCopy]) mkdirSync(join(path, "tree"), { recursive: true });
      const tree = agents(scope, "quarantine", "20260101T000000Z-capability-demo.hello-0123456789ab-deadbeef");
      mkdirSync(join(tree, "bin"), { recursive: true });
      writeFileSync(join(tree, "bin", "hello.mjs"), "damaged\n");

      const report = await fsckUnchanged(scope);
      assert.deepEqual(others(report, "leases", "run-copies", "quarantine"), []);
      assert.deepEqual(
        report.classes.leases.map((each) => each.path),
        [goneLease],
      );
      assert.deepEqual(
        report.classes["run-copies"].map((each) => each.path),
        [goneCopy],
      );
      assert.deepEqual(
        report.classes.quarantine.map((each) => each.path),
        [tree],
      );
      assert.deepEqual(report.classes.staging, [], "a live dispatch's run copy is not a leftover");
      for (const finding of [...report.classes.leases, ...report.classes["run-copies"], ...report.classes.quarantine])
        assert.equal(finding.kind, "notice");
      assert.equal(report.counts.quarantine, 1);
      assert.equal(report.ok, true);
      assert.equal(report.exitCode, 0);
      assert.equal(readdirSync(agents(scope, "leases")).length, 2);

      const human = runOats(["--scope", scope, "fsck"]);
      assert.equal(human.status, 0, human.stderr);
      assert.match(
        human.stdout,
        /^quarantine: 1 finding\n {2}notice {2}\/.*quarantine\/20260101T000000Z-capability-demo\.hello-/m,
      );
      assert.match(human.stdout, /^leases: 1 finding$/m);
      assert.match(human.stdout, /^run-copies: 1 finding$/m);
    },
  );
});
