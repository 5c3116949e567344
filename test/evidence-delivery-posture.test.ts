import assert from "node:assert/strict";
import { mkdirSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { runJson, runOats, snapshotTree, tempDir } from "./helpers.js";
import { checkEvidencePosture, enqueueSealedRun, evidencePosture, transportFor } from "../src/index.js";
import { makeShare } from "./support/shares.js";
import { makeSealedRun } from "./support/sealed-runs.js";
import { refusal } from "./support/refusals.js";

/**
 * The posture at dispatch when the far side cannot be reached (pure table
 * and the check that feeds it real probes), destination parsing, and the
 * CLI: `oats push --to`, `oats push --dry-run`, `oats outbox ls`.
 */

const LEVELS = ["public", "internal", "confidential"] as const;

describe("the posture table (pure)", () => {
  test(
    "Given each tier and each far-side state, Then confidential is refused " +
      "only when a configured far side is unreachable, internal and public run " +
      "buffered, and an unwritable outbox refuses every tier",
    () => {
      const table = [];
      for (const level of LEVELS) {
        for (const farSide of ["reachable", "unreachable", "none"] as const) {
          for (const outboxWritable of [true, false]) {
            const posture = evidencePosture({ level, farSide, outboxWritable });
            table.push(
              `${level} ${farSide} ${outboxWritable ? "writable" : "unwritable"}: ` +
                (posture.proceed
                  ? `runs ${posture.posture}${posture.buffered ? " buffered" : ""}`
                  : `refused ${posture.reason}`),
            );
          }
        }
      }
      assert.deepEqual(table, [
        "public reachable writable: runs delivered-later",
        "public reachable unwritable: refused outbox-unwritable",
        "public unreachable writable: runs buffered buffered",
        "public unreachable unwritable: refused outbox-unwritable",
        "public none writable: runs none buffered",
        "public none unwritable: refused outbox-unwritable",
        "internal reachable writable: runs delivered-later",
        "internal reachable unwritable: refused outbox-unwritable",
        "internal unreachable writable: runs buffered buffered",
        "internal unreachable unwritable: refused outbox-unwritable",
        "internal none writable: runs none buffered",
        "internal none unwritable: refused outbox-unwritable",
        "confidential reachable writable: runs delivered-later",
        "confidential reachable unwritable: refused outbox-unwritable",
        "confidential unreachable writable: refused far-side-unreachable",
        "confidential unreachable unwritable: refused outbox-unwritable",
        "confidential none writable: runs none buffered",
        "confidential none unwritable: refused outbox-unwritable",
      ]);
    },
  );
});

describe("checkEvidencePosture at dispatch (real probes)", () => {
  test(
    "Given a configured share that is missing, Then confidential is " +
      "classification-refused (evidence-far-side-unreachable) and internal and " +
      "public proceed buffered with a receipt that says so",
    async () => {
      const scope = tempDir("oats-scope-");
      const to = `dir:${join(tempDir("oats-far-"), "gone")}`;
      await assert.rejects(
        checkEvidencePosture(scope, "confidential", { to }),
        refusal("classification-refused", "evidence-far-side-unreachable"),
      );
      for (const level of ["internal", "public"] as const) {
        const posture = await checkEvidencePosture(scope, level, { to });
        assert.equal(posture.posture, "buffered");
        assert.equal(posture.buffered, true);
        assert.equal(posture.probe, "missing");
        assert.match(posture.receipt, /buffered locally/);
      }
    },
  );

  test(
    "Given the far side in OATS_EVIDENCE_TO and reachable (tmpfs), Then " +
      "every tier proceeds delivered-later; an explicit `to` wins over the environment",
    async () => {
      const scope = tempDir("oats-scope-");
      const { share, mounted } = makeShare();
      const env = { OATS_EVIDENCE_TO: `dir:${share}` };
      for (const level of LEVELS) {
        const posture = await checkEvidencePosture(scope, level, { env, allowSameFilesystem: !mounted });
        assert.deepEqual(
          [posture.posture, posture.to, posture.farSide],
          ["delivered-later", `dir:${share}`, "reachable"],
        );
      }
      await assert.rejects(
        checkEvidencePosture(scope, "confidential", { env, to: `dir:${join(share, "absent")}` }),
        refusal("classification-refused"),
      );
      const none = await checkEvidencePosture(scope, "confidential", { env: {} });
      assert.deepEqual([none.posture, none.to], ["none", null]);
    },
  );

  test(
    "Given an outbox that cannot be written (its directory is a symlink), " +
      "Then every tier is refused with audit-unavailable (outbox-unwritable), " +
      "whatever the far side",
    async () => {
      const scope = tempDir("oats-scope-");
      mkdirSync(join(scope, ".agents"));
      symlinkSync(tempDir("oats-elsewhere-"), join(scope, ".agents", "outbox"));
      const { share, mounted } = makeShare();
      for (const level of LEVELS) {
        await assert.rejects(
          checkEvidencePosture(scope, level, { to: `dir:${share}`, allowSameFilesystem: !mounted }),
          refusal("audit-unavailable", "outbox-unwritable"),
        );
        await assert.rejects(
          checkEvidencePosture(scope, level, { env: {} }),
          refusal("audit-unavailable", "outbox-unwritable"),
        );
      }
    },
  );

  test("Given a malformed destination, Then it is refused before anything is probed: unknown scheme and no scheme are usage, a relative or unnormalised path is invalid-input, oci:// must name a repository (plain http:// only on loopback)", () => {
    assert.throws(() => transportFor("ftp://host/x"), refusal("usage", "unknown-scheme"));
    assert.throws(() => transportFor("__proto__:x"), refusal("usage", "unknown-scheme"));
    assert.throws(() => transportFor("/mnt/evidence"), refusal("usage", "no-scheme"));
    assert.throws(() => transportFor("dir:relative/path"), refusal("invalid-input"));
    assert.throws(() => transportFor("dir:/mnt/../etc"), refusal("invalid-input"));
    assert.throws(() => transportFor("dir:/mnt//x"), refusal("invalid-input"));
    assert.throws(() => transportFor(""), refusal("invalid-input"));
    assert.equal(transportFor("oci://registry.example/evidence").describe(), "oci://registry.example/evidence");
    assert.throws(
      () => transportFor("http://registry.example/evidence"),
      refusal("registry-refused", "insecure-remote"),
    );
    assert.throws(() => transportFor("oci://registry.example/evidence:latest"), refusal("invalid-input"));
    assert.equal(transportFor("dir:/mnt/evidence/").describe(), "dir:/mnt/evidence");
  });
});

describe("oats push and oats outbox ls", () => {
  test(
    "Given two queued runs, When `oats push --dry-run`, `oats push --to " +
      "dir:`, `oats outbox ls`, Then the dry run sends nothing, the push " +
      "delivers both in order, and the listing shows them delivered",
    async () => {
      const scope = tempDir("oats-scope-");
      const runs = [await makeSealedRun(scope, { index: 1 }), await makeSealedRun(scope, { index: 2 })];
      for (const run of runs) await enqueueSealedRun(scope, run.handle);
      const { share, mounted } = makeShare();
      const same = mounted ? [] : ["--allow-same-filesystem"];
      const shareBefore = snapshotTree(share);
      const dry = runJson(["--scope", scope, "push", "--to", `dir:${share}`, "--dry-run"]);
      assert.equal(dry.status, 0, dry.stderr);
      assert.deepEqual(
        dry.envelope.result!["pending"].map((entry: { seq: number }) => entry.seq),
        [1, 2],
      );
      assert.deepEqual(snapshotTree(share), shareBefore);
      const queued = runJson(["--scope", scope, "outbox", "ls"]);
      assert.equal(queued.envelope.result!["queued"], 2);

      const pushed = runJson(["--scope", scope, "push", "--to", `dir:${share}`, ...same]);
      assert.equal(pushed.status, 0, pushed.stderr);
      assert.deepEqual(
        pushed.envelope.result!["delivered"].map((entry: { runId: string }) => entry.runId),
        runs.map((run) => run.runId),
      );
      const listed = runJson(["--scope", scope, "outbox", "ls"]);
      assert.equal(listed.envelope.result!["queued"], 0);
      assert.deepEqual(
        listed.envelope.result!["entries"].map((entry: { delivered: { to: string }[] }) =>
          entry.delivered.map((mark) => mark.to),
        ),
        [[`dir:${share}`], [`dir:${share}`]],
      );
      const again = runJson(["--scope", scope, "push", "--to", `dir:${share}`, ...same]);
      assert.deepEqual(again.envelope.result!["delivered"], []);
    },
  );

  test(
    "Given no destination, an unknown scheme, refs, or an unreachable share, " +
      "When `oats push`, Then usage (exit 2) or artifact-not-found (exit 3), " +
      "and the outbox is as it was",
    async () => {
      const scope = tempDir("oats-scope-");
      const run = await makeSealedRun(scope);
      await enqueueSealedRun(scope, run.handle);
      const before = snapshotTree(join(scope, ".agents/outbox"));
      const noTo = runJson(["--scope", scope, "push"], { env: { OATS_EVIDENCE_TO: "" } });
      assert.deepEqual([noTo.status, noTo.envelope.error!.code], [2, "usage"]);
      const unknown = runJson(["--scope", scope, "push", "--to", "ftp://x/y"]);
      assert.deepEqual([unknown.status, unknown.envelope.error!.code], [2, "usage"]);
      // Refs are artifacts for a registry (the other branch of the same command), never the outbox.
      const refs = runJson([
        "--scope",
        scope,
        "push",
        `sha256-${"a".repeat(64)}`,
        "--to",
        `dir:${tempDir("oats-far-")}`,
      ]);
      assert.deepEqual([refs.status, refs.envelope.error!.code], [2, "usage"]);
      const gone = runJson(["--scope", scope, "push"], {
        env: { OATS_EVIDENCE_TO: `dir:${join(tempDir("oats-far-"), "gone")}` },
      });
      assert.deepEqual(
        [gone.status, gone.envelope.error!.code, gone.envelope.error!.details["reason"]],
        [3, "artifact-not-found", "far-side-unreachable"],
      );
      // Human mode: the code, then the remedy for the reason.
      const human = runOats(["--scope", scope, "push", "--to", `dir:${join(tempDir("oats-far-"), "gone")}`]);
      assert.equal(human.status, 3);
      assert.match(
        human.stderr,
        /^oats: artifact-not-found: .*\nthe far side named above cannot be reached .*everything stays queued/,
      );
      assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), before);
    },
  );
});
