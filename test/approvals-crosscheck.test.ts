/**
 * The approvals ledger and the audit log are checked against
 * each other, and against the operator's private checkpoint. Attacks are real
 * edits of the real files (one of them by `nobody` in its own process); the
 * dispatch cases run the real dispatch of a real prepared capture, and
 * "nothing ran" means the script's marker file is absent.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import { stringify } from "yaml";
import {
  CHAIN_LOGS,
  addJob,
  appendEntry,
  approve,
  currentPrincipal,
  latestApprovedFor,
  listApprovals,
  prepareCapture,
  readJob,
  requireApproval,
  resolveQueuedCapture,
  revoke,
} from "../src/index.js";
import { entryHash } from "../src/ledger/chain-line.js";
import { canonicalJson } from "../src/core/canonical-json.js";
import { REPO, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

const saved = process.env["OATS_STATE_DIR"];
const exec = (c: string) => `oats.tree-exec.v1:sha256-${c.repeat(64)}`;
const subject = (c: string, key = "nightly-report") => ({ kind: "capture", key, integrity: exec(c) }) as const;

function freshState(): void {
  process.env["OATS_STATE_DIR"] = join(tempDir("oats-state-test-"), "state");
}
beforeEach(freshState);
afterEach(() => {
  process.env["OATS_STATE_DIR"] = saved;
});

const LEDGER = (scope: string) => join(scope, ".agents", "approvals", "ledger.jsonl");
const AUDIT = (scope: string) => join(scope, ".agents", "audit", "audit.jsonl");

function readLines(path: string): Record<string, unknown>[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .slice(0, -1)
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

function writeLines(path: string, entries: Record<string, unknown>[]): void {
  writeFileSync(path, entries.map((entry) => canonicalJson(entry)).join(""));
}

/** The next entry of a log, computed by hand with the public chain rule (what any scope writer can do). */
function forgeNext(path: string, body: Record<string, unknown>): string {
  const entries = existsSync(path) ? readLines(path) : [];
  const last = entries.at(-1);
  const entry: Record<string, unknown> = {
    seq: entries.length + 1,
    at: new Date().toISOString(),
    ...body,
    prev: last ? last["hash"] : `sha256-${"0".repeat(64)}`,
  };
  entry["hash"] = entryHash(entry);
  return canonicalJson(entry);
}

function oats(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const run = spawnSync(process.execPath, [join(REPO, "dist/cli/bin.js"), ...args], {
    encoding: "utf8",
    env: process.env,
  });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

describe("cross-check: ledger against audit", () => {
  test(
    "Given approve then revoke, When the revoke's ledger line is deleted, " +
      "Then requireApproval is integrity-mismatch (checkpoint: truncated; " +
      "fresh state: the audit's revoke names a ledger entry that is gone)",
    async () => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      const revocation = await revoke(scope, subject("a"), { reason: "pulled" });
      writeLines(LEDGER(scope), readLines(LEDGER(scope)).slice(0, -1));
      assert.throws(
        () => requireApproval(scope, subject("a")),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["reason"], "truncated")),
      );
      freshState();
      assert.throws(
        () => requireApproval(scope, subject("a")),
        refusal("integrity-mismatch", (error) => {
          assert.equal(error.details["crossCheck"], "ledger-reference-differs");
          assert.deepEqual((error.details["audit"] as { ledger: unknown }).ledger, {
            seq: revocation.seq,
            hash: revocation.hash,
          });
          assert.equal((error.details["ledger"] as { action: string }).action, "approve");
        }),
      );
    },
  );

  test(
    "Given a never-approved digest, When nobody (another local user who can " +
      "write the ledger) appends a hand-chained approve attributed to the " +
      "operator, Then requireApproval is integrity-mismatch and `oats " +
      "approvals` lists it UNCONFIRMED, not approved",
    async (t) => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      const line = forgeNext(LEDGER(scope), {
        action: "approve",
        subject: { ...subject("f") },
        operator: currentPrincipal(),
        reason: "looks fine",
      });
      if (process.getuid?.() === 0) {
        for (const dir of [scope, join(scope, ".agents"), join(scope, ".agents", "approvals")]) chmodSync(dir, 0o777);
        chmodSync(LEDGER(scope), 0o666);
        const attacker = spawnSync(
          process.execPath,
          ["-e", "require('fs').appendFileSync(process.argv[1], process.argv[2])", LEDGER(scope), line],
          { uid: 65534, gid: 65534, encoding: "utf8" },
        );
        assert.equal(attacker.status, 0, attacker.stderr);
      } else {
        t.diagnostic("not root: the forged line is appended by this process instead of by nobody");
        writeFileSync(LEDGER(scope), line, { flag: "a" });
      }
      assert.throws(
        () => requireApproval(scope, subject("f")),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["crossCheck"], "no-audit-entry")),
      );
      assert.equal(requireApproval(scope, subject("a")).action, "approve", "the genuine approval still stands");
      const forged = listApprovals(scope).find((item) => item.subject.integrity === exec("f"))!;
      assert.equal(forged.approved, false);
      assert.equal(forged.confirmed, false);
      assert.equal(forged.mismatch?.reason, "no-audit-entry");
      const cli = oats(["--scope", scope, "approvals"]);
      assert.equal(cli.status, 0, cli.stderr);
      assert.match(
        cli.stdout,
        new RegExp(`^UNCONFIRMED capture nightly-report ${exec("f")} seq 2 approve by .*no-audit-entry`, "m"),
      );
      assert.match(cli.stdout, new RegExp(`^approved capture nightly-report ${exec("a")} seq 1 by `, "m"));
    },
  );

  test(
    "Given an approval whose audit entry is dropped and the audit chain " +
      "recomputed, When asked with a fresh state, Then integrity-mismatch " +
      "(no-audit-entry)",
    async () => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      await approve(scope, subject("b"), { reason: "ok" });
      const kept = readLines(AUDIT(scope)).filter(
        (entry) =>
          !(entry["action"] === "approve" && (entry["subject"] as { integrity: string }).integrity === exec("a")),
      );
      kept.forEach((entry, index) => {
        entry["seq"] = index + 1;
        entry["prev"] = index === 0 ? `sha256-${"0".repeat(64)}` : kept[index - 1]!["hash"];
        entry["hash"] = entryHash(entry);
      });
      writeLines(AUDIT(scope), kept);
      freshState();
      assert.throws(
        () => requireApproval(scope, subject("a")),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["crossCheck"], "no-audit-entry")),
      );
      assert.equal(requireApproval(scope, subject("b")).action, "approve");
    },
  );

  test(
    "Given an approval whose ledger line is removed and the ledger " +
      "re-chained, When asked with a fresh state, Then integrity-mismatch " +
      "(no-ledger-entry), not 'never approved'",
    async () => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      await approve(scope, subject("b"), { reason: "ok" });
      const kept = readLines(LEDGER(scope)).slice(1);
      kept.forEach((entry, index) => {
        entry["seq"] = index + 1;
        entry["prev"] = index === 0 ? `sha256-${"0".repeat(64)}` : kept[index - 1]!["hash"];
        entry["hash"] = entryHash(entry);
      });
      writeLines(LEDGER(scope), kept);
      freshState();
      assert.throws(
        () => requireApproval(scope, subject("a")),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["crossCheck"], "no-ledger-entry")),
      );
      assert.throws(
        () => requireApproval(scope, subject("b")),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["crossCheck"], "ledger-reference-differs")),
        "b's ledger entry moved to seq 1: the audit names seq 2",
      );
    },
  );

  test(
    "Given an approval, When a refused revoke naming the same ledger entry " +
      "is audited after it, Then it is not a decision and the approval stands",
    async () => {
      const scope = tempDir("oats-cross-");
      const approval = await approve(scope, subject("a"), { reason: "ok" });
      await appendEntry(scope, CHAIN_LOGS.audit, {
        principal: currentPrincipal(),
        action: "revoke",
        subject: { ...subject("a") },
        outcome: "refused",
        details: { ledger: { seq: approval.seq, hash: approval.hash }, refusal: { code: "busy" } },
      });
      freshState();
      assert.equal(requireApproval(scope, subject("a")).hash, approval.hash);
    },
  );

  test(
    "Given an audit log that cannot be read at all (a directory in its " +
      "place), When an approval is asked for, Then audit-unavailable (step " +
      "read): no approval is confirmed without it",
    async () => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      rmSync(AUDIT(scope));
      mkdirSync(AUDIT(scope));
      assert.throws(
        () => requireApproval(scope, subject("a")),
        refusal("audit-unavailable", (error) => assert.equal(error.details["step"], "read")),
      );
    },
  );

  test(
    "Given a decision interrupted between its ledger write and its audit " +
      "write, Then it is refused until it is decided again through oats",
    async () => {
      const scope = tempDir("oats-cross-");
      await appendEntry(scope, CHAIN_LOGS.approvals, {
        action: "approve",
        subject: { ...subject("a") },
        operator: currentPrincipal(),
        reason: "crashed",
      });
      assert.throws(
        () => requireApproval(scope, subject("a")),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["crossCheck"], "no-audit-entry")),
      );
      const again = await approve(scope, subject("a"), { reason: "decided again" });
      assert.equal(requireApproval(scope, subject("a")).hash, again.hash);
    },
  );

  test(
    "Given an audit approve naming another ledger entry than the ledger's " +
      "latest for the subject (action swapped), Then integrity-mismatch",
    async () => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      const entries = readLines(AUDIT(scope));
      entries.at(-1)!["action"] = "revoke";
      entries.at(-1)!["hash"] = entryHash(entries.at(-1)!);
      writeLines(AUDIT(scope), entries);
      freshState();
      assert.throws(
        () => requireApproval(scope, subject("a")),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["crossCheck"], "action-differs")),
      );
    },
  );

  test(
    "latestApprovedFor: the latest cross-checked approve of that kind and " +
      "key, any integrity; revoked, forged and other keys do not count",
    async () => {
      const scope = tempDir("oats-cross-");
      assert.equal(latestApprovedFor(scope, "capture", "nightly-report"), null);
      const a = await approve(scope, subject("a"), { reason: "a" });
      await approve(scope, subject("b"), { reason: "b" });
      await revoke(scope, subject("b"), { reason: "b out" });
      await approve(scope, subject("c", "other"), { reason: "other key" });
      writeFileSync(
        LEDGER(scope),
        forgeNext(LEDGER(scope), {
          action: "approve",
          subject: { ...subject("d") },
          operator: currentPrincipal(),
          reason: "forged",
        }),
        { flag: "a" },
      );
      freshState();
      assert.equal(latestApprovedFor(scope, "capture", "nightly-report")?.hash, a.hash);
      assert.equal(latestApprovedFor(scope, "capability", "nightly-report"), null);
    },
  );
});

describe("cross-check: dispatch", () => {
  async function queued(): Promise<{
    scope: string;
    marker: string;
    subject: { kind: "composition"; key: string; integrity: string };
  }> {
    const scope = tempDir("oats-cross-dispatch-");
    const tool = join(scope, "home", "tool");
    mkdirSync(join(tool, "bin"), { recursive: true });
    writeFileSync(join(tool, "bin", "run"), '#!/bin/sh\necho ran > "$1"\n');
    chmodSync(join(tool, "bin", "run"), 0o755);
    const config = {
      schemaVersion: 1,
      wings: { lobby: "public" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    };
    writeFileSync(join(scope, "home", "class.yaml"), stringify(config));
    const marker = join(scope, "marker.txt");
    const spec = join(scope, "home", "spec.yaml");
    writeFileSync(
      spec,
      stringify({
        name: "nightly-report",
        executable: { tree: "./tool", path: "bin/run", args: [marker] },
        target: { wing: "lobby" },
        classification: "internal",
        classificationConfig: "./class.yaml",
        env: { PATH: "/usr/bin:/bin" },
        credentials: [],
      }),
    );
    const prepared = await prepareCapture(scope, spec);
    await approve(scope, prepared.composition.subject, { reason: "reviewed" });
    await addJob(scope, { job: "nightly", resolution: prepared.id });
    return { scope, marker, subject: prepared.composition.subject };
  }

  test(
    "Given a queued, approved capture, When a middle audit line is edited " +
      "and re-chained, Then the next append and the dispatch are refused and " +
      "nothing runs",
    async () => {
      const f = await queued();
      assert.ok(
        (await resolveQueuedCapture(f.scope, "nightly", { env: {} })).approval.seq >= 1,
        "it dispatches before the edit",
      );
      const entries = readLines(AUDIT(f.scope));
      entries[1]!["principal"] = "someone@else";
      for (let i = 1; i < entries.length; i++) {
        entries[i]!["prev"] = entries[i - 1]!["hash"];
        entries[i]!["hash"] = entryHash(entries[i]!);
      }
      writeLines(AUDIT(f.scope), entries);
      await assert.rejects(approve(f.scope, subject("e"), { reason: "another" }), refusal("audit-unavailable"));
      await assert.rejects(
        resolveQueuedCapture(f.scope, "nightly", { env: {} }),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["reason"], "history-rewritten")),
      );
      assert.equal(existsSync(f.marker), false);
    },
  );

  test(
    "Given a queued capture whose approval was revoked, When the revoke's " +
      "ledger line is deleted (fresh state: no checkpoint), Then dispatch is " +
      "integrity-mismatch, not approved",
    async () => {
      const f = await queued();
      await revoke(f.scope, f.subject, { reason: "pulled" });
      writeLines(LEDGER(f.scope), readLines(LEDGER(f.scope)).slice(0, -1));
      freshState();
      // The fresh state holds no job this account queued: queued again (kept), the job is this state's.
      const { resolution } = readJob(f.scope, "nightly");
      assert.equal((await addJob(f.scope, { job: "nightly", resolution })).status, "kept");
      await assert.rejects(
        resolveQueuedCapture(f.scope, "nightly", { env: {} }),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["crossCheck"], "ledger-reference-differs")),
      );
      assert.equal(existsSync(f.marker), false);
    },
  );
});

describe("anchors: oats audit head and --expect-head", () => {
  test(
    "Given a checkpoint, When the audit log is rewritten into another valid " +
      "chain, Then `oats audit verify` and `oats audit head` fail " +
      "(history-rewritten) although the chain alone verifies",
    async () => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      await approve(scope, subject("b"), { reason: "ok" });
      assert.equal(oats(["--scope", scope, "audit", "verify"]).status, 0);
      const entries = readLines(AUDIT(scope));
      entries[0]!["principal"] = "someone@else";
      entries[0]!["hash"] = entryHash(entries[0]!);
      entries[1]!["prev"] = entries[0]!["hash"];
      entries[1]!["hash"] = entryHash(entries[1]!);
      writeLines(AUDIT(scope), entries);
      for (const args of [
        ["audit", "verify"],
        ["audit", "head"],
      ]) {
        const run = oats(["--scope", scope, "--json", ...args]);
        assert.equal(run.status, 5, run.stdout + run.stderr);
        assert.equal(
          (JSON.parse(run.stdout).error as { details: { reason: string } }).details.reason,
          "history-rewritten",
        );
      }
    },
  );

  test(
    "Given remembered heads, When entries are removed from the end of either " +
      "log (no checkpoint to catch it), Then --expect-head fails naming the " +
      "head; before that it passes",
    async () => {
      const scope = tempDir("oats-cross-");
      await approve(scope, subject("a"), { reason: "ok" });
      await approve(scope, subject("b"), { reason: "ok" });
      const head = oats(["--scope", scope, "--json", "audit", "head"]);
      assert.equal(head.status, 0, head.stderr);
      const heads = JSON.parse(head.stdout).result as {
        approvals: { entries: number; head: string };
        audit: { entries: number; head: string };
      };
      assert.equal(heads.approvals.entries, 2);
      assert.equal(heads.audit.entries, 2);
      assert.equal(oats(["--scope", scope, "audit", "verify", "--expect-head", heads.audit.head]).status, 0);
      assert.equal(oats(["--scope", scope, "approvals", "--expect-head", heads.approvals.head]).status, 0);
      await revoke(scope, subject("a"), { reason: "later" });
      assert.equal(
        oats(["--scope", scope, "approvals", "--expect-head", heads.approvals.head]).status,
        0,
        "a longer chain still extends the head",
      );
      writeLines(LEDGER(scope), readLines(LEDGER(scope)).slice(0, 1));
      writeLines(AUDIT(scope), readLines(AUDIT(scope)).slice(0, 1));
      freshState();
      for (const [args, hash] of [
        [["audit", "verify"], heads.audit.head],
        [["approvals"], heads.approvals.head],
      ] as const) {
        const run = oats(["--scope", scope, "--json", ...args, "--expect-head", hash]);
        assert.equal(run.status, 5, run.stdout + run.stderr);
        const error = JSON.parse(run.stdout).error as { code: string; details: { expectHead: string } };
        assert.equal(error.code, "integrity-mismatch");
        assert.equal(error.details.expectHead, hash);
      }
      assert.equal(
        oats(["--scope", scope, "audit", "verify", "--expect-head", "nope"]).status,
        4,
        "a malformed head is invalid-input",
      );
    },
  );
});
