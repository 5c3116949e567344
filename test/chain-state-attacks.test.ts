/**
 * The operator's private state (chain-state.ts) against another local user,
 * for real: `nobody` (uid 65534) renames the checkpoint away through a
 * directory it owns, or makes the state root before oats does; a scope
 * writer then cuts both logs back to just before a revoke. Every operator
 * step is a real `oats` process (dist/cli/bin.js; `npm run build` first)
 * whose state root comes from XDG_STATE_HOME, as an operator's would. The
 * capture's executable leaves a marker when it runs, so "the revoked
 * composition did not run" is checked, not assumed.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { runJson, runOats, tempDir } from "./helpers.js";

const NOBODY = { uid: 65534, gid: 65534 };
const asRoot = process.getuid?.() === 0;
const skip = asRoot ? false : "needs root, to run the attacker as nobody";

interface Fixture {
  scope: string;
  spec: string;
  marker: string;
  at: string[];
}

/** A capture whose tool touches `marker`; its config and spec; an empty scope. Readable by nobody. */
function fixture(base: string): Fixture {
  const dir = join(base, "work");
  const marker = join(dir, "marker");
  mkdirSync(join(dir, "tool", "bin"), { recursive: true });
  writeFileSync(join(dir, "tool", "bin", "run"), `#!/bin/sh\ntouch '${marker}'\nexit 0\n`, { mode: 0o755 });
  const config = { schemaVersion: 1, wings: {}, repos: {}, defaults: [], fallback: "internal", principals: {} };
  writeFileSync(join(dir, "class.yaml"), `${JSON.stringify(config)}\n`);
  writeFileSync(
    join(dir, "spec.yaml"),
    `${JSON.stringify({
      name: "nightly",
      executable: { tree: "./tool", path: "bin/run", args: [] },
      target: { wing: "x" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      env: { PATH: "/usr/bin:/bin" },
      // The tests run as root: only a privileged composition may run there.
      privileged: true,
    })}\n`,
  );
  const scope = join(dir, "scope");
  mkdirSync(scope);
  return { scope, spec: join(dir, "spec.yaml"), marker, at: ["--scope", scope] };
}

/** A temporary directory other users may enter (mkdtemp makes it 0700). */
function openBase(prefix: string): string {
  const base = tempDir(prefix);
  chmodSync(base, 0o755);
  return base;
}

/** The operator's environment: the state root is $XDG_STATE_HOME/oats. */
function operator(xdg: string): { env: NodeJS.ProcessEnv } {
  return { env: { OATS_STATE_DIR: "", XDG_STATE_HOME: xdg } };
}

function ok(args: string[], options: { env: NodeJS.ProcessEnv }) {
  const run = runJson(args, options);
  assert.equal(run.status, 0, run.stdout + run.stderr);
  return run.envelope.result!;
}

function prepare(f: Fixture, options: { env: NodeJS.ProcessEnv }) {
  const result = ok([...f.at, "capture", "prepare", f.spec], options);
  const subject = result["composition"]["subject"] as { kind: string; key: string; integrity: string };
  return { id: result["id"] as string, args: [subject.kind, subject.key, subject.integrity] };
}

/** Run `script` (JavaScript) as nobody; it must succeed: the attack itself is possible. */
function asNobody(script: string, ...args: string[]): void {
  const attacker = spawnSync(process.execPath, ["-e", script, ...args], { ...NOBODY, encoding: "utf8" });
  assert.equal(attacker.status, 0, `the attacker's step failed: ${attacker.stderr}`);
}

function lines(path: string): string[] {
  return readFileSync(path, "utf8").split("\n").slice(0, -1);
}

/** The scope writer: both logs cut back to just before the revoke (both chains stay valid and agree). */
function cutBeforeRevoke(scope: string): void {
  const ledger = join(scope, ".agents", "approvals", "ledger.jsonl");
  const audit = join(scope, ".agents", "audit", "audit.jsonl");
  const kept = lines(ledger).filter((line) => JSON.parse(line).action !== "revoke");
  writeFileSync(ledger, kept.map((line) => `${line}\n`).join(""));
  const entries = lines(audit);
  const at = entries.findIndex((line) => {
    const entry = JSON.parse(line);
    return entry.action === "revoke" && entry.outcome === "ok";
  });
  assert.ok(at > 0, "the revoke was audited");
  writeFileSync(
    audit,
    entries
      .slice(0, at)
      .map((line) => `${line}\n`)
      .join(""),
  );
}

function refusedStateUnsafe(run: ReturnType<typeof runJson>, path: string): Record<string, any> {
  assert.equal(run.status, 6, run.stdout + run.stderr);
  const error = run.envelope.error!;
  assert.equal(error.code, "audit-unavailable", error.message);
  assert.equal(error.details["reason"], "state-unsafe", error.message);
  assert.equal(error.details["path"], path, error.message);
  assert.match(error.message, /Fix: /);
  assert.equal(typeof error.details["fix"], "string");
  return error;
}

describe("the operator's state against another local user", { skip }, () => {
  test(
    "Given a checkpoint under $XDG_STATE_HOME in a directory nobody comes " +
      "to own, When nobody renames the checkpoint away and a scope writer " +
      "cuts both logs back before a revoke, Then the revoked composition does " +
      "not dispatch (state-unsafe naming the directory), and audit verify, " +
      "approvals and fsck say that no checkpoint anchored them",
    () => {
      const base = openBase("oats-state-rename-");
      const xdg = join(base, "xdg");
      mkdirSync(xdg, { mode: 0o755 });
      const f = fixture(base);
      const as = operator(xdg);
      const capture = prepare(f, as);
      ok([...f.at, "approve", ...capture.args, "--reason", "reviewed"], as);
      ok([...f.at, "queue", "add", capture.id, "--job", "nightly"], as);
      ok([...f.at, "revoke", ...capture.args, "--reason", "pulled"], as);
      assert.ok(readdirSync(join(xdg, "oats", "scopes")).length === 1, "the checkpoint was written");

      // The directory above the state root becomes nobody's; nobody moves the state aside.
      chownSync(xdg, NOBODY.uid, NOBODY.gid);
      asNobody("require('fs').renameSync(process.argv[1], process.argv[2])", join(xdg, "oats"), join(xdg, "gone"));
      cutBeforeRevoke(f.scope);

      const dispatched = runJson([...f.at, "dispatch", "nightly", "--exec"], as);
      assert.equal(existsSync(f.marker), false, "the revoked composition ran");
      const error = refusedStateUnsafe(dispatched, xdg);
      assert.equal(error.details["problem"], "owner");
      assert.equal(error.details["uid"], NOBODY.uid);

      // Reading still works, unanchored, and says so.
      const verified = ok([...f.at, "audit", "verify"], as);
      assert.equal(verified["checkpoint"]["anchored"], false);
      assert.equal(verified["checkpoint"]["reason"], "state-unusable");
      assert.equal(verified["checkpoint"]["problem"]["path"], xdg);
      const human = runOats([...f.at, "audit", "verify"], as);
      assert.equal(human.status, 0, human.stderr);
      assert.match(human.stdout, /^checkpoint audit log: NOT anchored: the state .* cannot be trusted/m);
      const listed = ok([...f.at, "approvals"], as);
      assert.equal(listed["checkpoint"]["approvals"]["reason"], "state-unusable");
      assert.equal(listed["checkpoint"]["audit"]["reason"], "state-unusable");
      const checked = runJson([...f.at, "fsck"], as);
      assert.equal(checked.envelope.ok, true, checked.stdout);
      assert.equal(checked.envelope.result!["checkpoint"]["audit"]["anchored"], false);
      assert.equal(checked.envelope.result!["checkpoint"]["approvals"]["reason"], "state-unusable");
    },
  );

  test(
    "Given $XDG_STATE_HOME in a directory nobody owns from the start, When " +
      "the operator approves, Then approve is refused (state-unsafe, the " +
      "directory and the fix) and the ledger is unchanged; revoke still works",
    () => {
      const base = openBase("oats-state-owned-");
      const xdg = join(base, "xdg");
      mkdirSync(xdg, { mode: 0o755 });
      chownSync(xdg, NOBODY.uid, NOBODY.gid);
      const f = fixture(base);
      const as = operator(xdg);
      const capture = prepare(f, as);
      const refused = runJson([...f.at, "approve", ...capture.args, "--reason", "reviewed"], as);
      refusedStateUnsafe(refused, xdg);
      assert.equal(existsSync(join(f.scope, ".agents", "approvals", "ledger.jsonl")), false, "nothing was approved");
      const audit = lines(join(f.scope, ".agents", "audit", "audit.jsonl")).map((line) => JSON.parse(line));
      assert.deepEqual(
        audit.at(-1)!.details.refusal,
        { code: "audit-unavailable", kind: "refused", message: refused.envelope.error!.message },
        "the refusal is audited",
      );
      // Revoking is the safe direction: it is never blocked by the state.
      ok([...f.at, "revoke", ...capture.args, "--reason", "withdrawn", "--force"], as);
      const human = runOats([...f.at, "approve", ...capture.args, "--reason", "reviewed"], as);
      assert.equal(human.status, 6);
      assert.match(human.stderr, /cannot anchor the approvals ledger and the audit log/);
      assert.match(human.stderr, /chown it to root or this account/);
    },
  );

  test(
    "Given $XDG_STATE_HOME in a sticky world-writable directory, When " +
      "nobody makes the state root there first and a scope writer cuts both " +
      "logs back before a revoke, Then approve and dispatch are refused " +
      "(state-unsafe naming nobody's directory), nothing is written into it, " +
      "and the revoked composition does not run",
    () => {
      const base = openBase("oats-state-first-");
      const shared = join(base, "shared");
      mkdirSync(shared);
      chmodSync(shared, 0o1777);
      asNobody("require('fs').mkdirSync(process.argv[1], { mode: 0o777 })", join(shared, "oats"));
      const f = fixture(base);
      const as = operator(shared);
      const capture = prepare(f, as);
      const approved = runJson([...f.at, "approve", ...capture.args, "--reason", "reviewed"], as);
      const error = refusedStateUnsafe(approved, join(shared, "oats"));
      assert.equal(error.details["problem"], "owner");
      // Queueing keeps the job's bytes in the private state, so it is refused the same way.
      refusedStateUnsafe(runJson([...f.at, "queue", "add", capture.id, "--job", "nightly"], as), join(shared, "oats"));
      ok([...f.at, "revoke", ...capture.args, "--reason", "pulled", "--force"], as);
      cutBeforeRevoke(f.scope);

      const dispatched = runJson([...f.at, "dispatch", "nightly", "--exec"], as);
      assert.equal(existsSync(f.marker), false, "the revoked composition ran");
      assert.notEqual(dispatched.status, 0, dispatched.stdout);
      assert.deepEqual(readdirSync(join(shared, "oats")), [], "nothing of the operator's went into nobody's directory");
      const verified = ok([...f.at, "audit", "verify"], as);
      assert.equal(verified["checkpoint"]["reason"], "state-unusable");
      assert.equal(verified["checkpoint"]["problem"]["uid"], NOBODY.uid);
    },
  );

  test(
    "Given $XDG_STATE_HOME in a sticky world-writable directory and the " +
      "state root made by the operator, When the capture is approved, revoked " +
      "and both logs are cut back, Then the checkpoint anchors the check: " +
      "truncated, and nothing runs",
    () => {
      const base = openBase("oats-state-sticky-");
      const shared = join(base, "shared");
      mkdirSync(shared);
      chmodSync(shared, 0o1777);
      const f = fixture(base);
      const as = operator(shared);
      const fresh = ok([...f.at, "audit", "verify"], as);
      assert.equal(fresh["checkpoint"]["reason"], "no-checkpoint");
      const capture = prepare(f, as);
      ok([...f.at, "approve", ...capture.args, "--reason", "reviewed"], as);
      ok([...f.at, "queue", "add", capture.id, "--job", "nightly"], as);
      ok([...f.at, "revoke", ...capture.args, "--reason", "pulled"], as);
      const anchored = ok([...f.at, "approvals"], as);
      assert.equal(anchored["checkpoint"]["approvals"]["anchored"], true);
      assert.equal(anchored["checkpoint"]["audit"]["anchored"], true);
      const human = runOats([...f.at, "approvals"], as);
      assert.match(human.stdout, /^checkpoint approvals ledger: anchored by this account's checkpoint/m);
      cutBeforeRevoke(f.scope);
      const dispatched = runJson([...f.at, "dispatch", "nightly", "--exec"], as);
      assert.equal(existsSync(f.marker), false, "the revoked composition ran");
      assert.equal(dispatched.envelope.error!.code, "integrity-mismatch", dispatched.stdout);
      assert.equal(dispatched.envelope.error!.details["reason"], "truncated");
    },
  );
});
