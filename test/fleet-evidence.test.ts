/**
 * Run evidence moved between two scopes through a real registry (Debian's
 * docker-registry, started by test/support/registry.ts) and a dir: share:
 * scope A dispatches a capture (a real child process), `oats push --to`
 * delivers its sealed run, scope B `oats pull`s it into
 * .agents/received-runs/ and `run ls/show/verify` and fsck see it there.
 * Far sides that serve other bytes under the run's id (consistent OCI
 * digests, wrong evidence) are refused with B byte-for-byte unchanged.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  chmodSync,
  cpSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { EvidenceFileName } from "../src/evidence/transport.js";
import { ociTransport } from "../src/evidence/transport-oci.js";
import { runJson, runOats, snapshotTree, tempDir } from "./helpers.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";

let registry: Registry | null = null;
const skip = registryBinary() === null ? NO_REGISTRY : false;

interface Sent {
  scope: string;
  handle: string;
  runId: string;
  to: string;
  files: Map<string, Buffer>;
  showLines: string[];
}
let sent: Sent;

function reg(): Registry {
  assert.ok(registry, "the registry was started");
  return registry;
}

function ok(args: string[]) {
  const run = runJson(args);
  assert.equal(run.status, 0, run.stdout + run.stderr);
  return run.envelope.result as Record<string, any>;
}

/** Scope A: a privileged capture (tests run as root), approved, dispatched; its sealed run pushed to the registry. */
function sendingScope(): Sent {
  const dir = tempDir("oats-fleet-ev-");
  mkdirSync(join(dir, "tool/bin"), { recursive: true });
  writeFileSync(
    join(dir, "tool/bin/run"),
    ["#!/bin/sh", 'echo "evidence line one $1"', 'echo "evidence line two" >&2', "exit 0", ""].join("\n"),
  );
  chmodSync(join(dir, "tool/bin/run"), 0o755);
  writeFileSync(
    join(dir, "class.yaml"),
    JSON.stringify({ schemaVersion: 1, wings: {}, repos: {}, defaults: [], fallback: "internal", principals: {} }) +
      "\n",
  );
  writeFileSync(join(dir, "profile.yaml"), "schemaVersion: 1\nretention:\n  keepLast: 3\n");
  writeFileSync(
    join(dir, "spec.yaml"),
    `${JSON.stringify({
      name: "evidence",
      executable: { tree: "./tool", path: "bin/run", args: ["--fast"] },
      target: { wing: "x" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      profile: "./profile.yaml",
      env: { PATH: "/usr/bin:/bin" },
      privileged: process.geteuid?.() === 0,
    })}\n`,
  );
  const scope = join(dir, "scope");
  mkdirSync(scope);
  const capture = ok(["--scope", scope, "capture", "prepare", join(dir, "spec.yaml")]);
  const subject = capture["composition"].subject;
  ok(["--scope", scope, "approve", subject.kind, subject.key, subject.integrity, "--reason", "reviewed on host A"]);
  ok(["--scope", scope, "queue", "add", capture["id"], "--job", "evidence"]);
  const ran = runOats(["--scope", scope, "dispatch", "evidence", "--exec"]);
  assert.equal(ran.status, 0, ran.stdout + ran.stderr);
  const runs = ok(["--scope", scope, "run", "ls"])["runs"] as { handle: string; runId: string; result: string }[];
  assert.equal(runs.length, 1);
  assert.equal(runs[0]!.result, "OK");
  const { handle, runId } = runs[0]!;
  const to = reg().ref("fleet/evidence");
  const pushed = ok(["--scope", scope, "push", "--to", to]);
  assert.deepEqual(
    pushed["delivered"].map((entry: { runId: string }) => entry.runId),
    [runId],
  );
  const runDir = join(scope, ".agents/runs", handle);
  const files = new Map([
    ["record.json", readFileSync(join(runDir, "record.json"))],
    ["log", readFileSync(join(runDir, "log"))],
  ]);
  const shown = runOats(["--scope", scope, "--quiet", "run", "show", runId]);
  assert.equal(shown.status, 0, shown.stderr);
  return { scope, handle, runId, to, files, showLines: shown.stdout.trimEnd().split("\n") };
}

function freshScope(): string {
  const scope = join(tempDir("oats-fleet-ev-b-"), "scope");
  mkdirSync(scope);
  writeFileSync(join(scope, "keep.txt"), "already here\n");
  return scope;
}

function hex(runId: string): string {
  return runId.slice("sha256-".length);
}

function expectRefused(scope: string, args: string[], code: string, reason?: string) {
  const before = snapshotTree(scope);
  const run = runJson(["--scope", scope, "pull", ...args]);
  assert.equal(run.envelope.ok, false, run.stdout + run.stderr);
  assert.equal(run.envelope.error!.code, code, run.stdout);
  if (reason !== undefined) assert.equal(run.envelope.error!.details["reason"], reason, run.stdout);
  assert.deepEqual(snapshotTree(scope), before, "the scope is byte-for-byte as it was");
  return run;
}

/** A far side (a registry repository of its own) serving the run's id with the given files: OCI digests consistent,
 * evidence not. */
async function servedAs(repository: string, files: Map<string, Buffer>): Promise<string> {
  const to = reg().ref(repository);
  await ociTransport(to).put({ runId: sent.runId, seq: 0, files: files as Map<EvidenceFileName, Buffer> });
  return to;
}

async function delivered(): Promise<Map<string, Buffer>> {
  const back = await ociTransport(sent.to).readBack(sent.runId);
  assert.ok(back);
  return back;
}

before(async () => {
  if (skip) return;
  registry = await startRegistry();
  sent = sendingScope();
});
after(async () => {
  await registry?.stop();
});

describe("run evidence from one scope to another: oats push, oats pull", { skip }, () => {
  test(
    "Given a run pushed by scope A When scope B pulls it by its run-<hex> " +
      "tag Then B holds its exact bytes as a received run, and run " +
      "show/verify/ls and fsck in B agree with A",
    () => {
      const scopeB = freshScope();
      const pulled = runJson(["--scope", scopeB, "pull", `${sent.to}:run-${hex(sent.runId)}`]);
      assert.equal(pulled.status, 0, pulled.stdout + pulled.stderr);
      const report = pulled.envelope.result!;
      assert.equal(report["runId"], sent.runId);
      assert.equal(report["status"], "written");
      assert.equal(report["auditChainVerified"], false);
      const dir = join(scopeB, ".agents/received-runs", sent.runId);
      assert.equal(lstatSync(dir).mode & 0o777, 0o700);
      assert.ok(readFileSync(join(dir, "record.json")).equals(sent.files.get("record.json")!));
      assert.ok(readFileSync(join(dir, "log")).equals(sent.files.get("log")!));

      const human = runOats(["--scope", scopeB, "pull", `${sent.to}:run-${hex(sent.runId)}`]);
      assert.equal(human.status, 0, human.stderr);
      assert.match(human.stdout, /kept run sha256-/);
      assert.match(human.stdout, /not checked: the sending host's audit chain/);

      const shown = runOats(["--scope", scopeB, "--quiet", "run", "show", sent.runId]);
      assert.equal(shown.status, 0, shown.stderr);
      assert.deepEqual(shown.stdout.trimEnd().split("\n"), sent.showLines, "B shows the very log lines A shows");
      assert.ok(sent.showLines.some((line) => line.includes("evidence line one --fast")));
      const showHuman = runOats(["--scope", scopeB, "run", "show", sent.handle]);
      assert.match(showHuman.stdout, new RegExp(`received run ${sent.handle}: OK ${sent.runId}`));
      assert.ok(showHuman.stdout.includes(`received from ${sent.to}`));

      const verified = ok(["--scope", scopeB, "run", "verify", sent.runId]);
      assert.equal(verified["runId"], sent.runId);
      assert.equal(verified["result"], "OK");
      assert.equal(verified["received"], true);
      assert.equal(verified["checks"].audit.chain, "not-verifiable-here");
      const verifyHuman = runOats(["--scope", scopeB, "run", "verify", sent.runId.slice(0, 20)]);
      assert.equal(verifyHuman.status, 0, verifyHuman.stderr);
      assert.match(verifyHuman.stdout, /checked against the delivered audit lines only/);

      const listed = ok(["--scope", scopeB, "run", "ls"]);
      assert.deepEqual(listed["runs"], []);
      assert.deepEqual(
        listed["received"].map((run: { runId: string; from: string; result: string }) => [
          run.runId,
          run.from,
          run.result,
        ]),
        [[sent.runId, sent.to, "OK"]],
      );
      assert.match(runOats(["--scope", scopeB, "run", "ls"]).stdout, /^received /m);
      assert.equal(runOats(["--scope", scopeB, "fsck"]).status, 0, "B is clean");
    },
  );

  test(
    "Given a run already received When it is pulled again (by tag, or --run " +
      "with the repository) Then it is kept and the scope is byte-for-byte unchanged",
    () => {
      const scopeB = freshScope();
      ok(["--scope", scopeB, "pull", `${sent.to}:run-${hex(sent.runId)}`]);
      const before = snapshotTree(scopeB);
      const again = ok([
        "--scope",
        scopeB,
        "pull",
        sent.to.replace(/^http:/, "oci:"),
        "--insecure",
        "--run",
        sent.runId,
      ]);
      assert.equal(again["status"], "kept");
      assert.deepEqual(snapshotTree(scopeB), before);
    },
  );

  test(
    "Given the log blob corrupted inside the registry's storage When B pulls " +
      "the run Then it is refused (integrity-mismatch) and B is unchanged",
    () => {
      const digest = `sha256:${createHash("sha256").update(sent.files.get("log")!).digest("hex")}`;
      const data = reg().blobPath(digest);
      const original = readFileSync(data);
      const flipped = Buffer.from(original);
      flipped[flipped.indexOf("evidence line one")] = "E".charCodeAt(0);
      try {
        writeFileSync(data, flipped);
        expectRefused(freshScope(), [`${sent.to}:run-${hex(sent.runId)}`], "integrity-mismatch");
      } finally {
        writeFileSync(data, original);
      }
    },
  );

  test(
    "Given a far side serving other evidence under the run's id with " +
      "consistent OCI digests When B pulls it Then each is refused by the run " +
      "checks themselves and B is unchanged",
    async () => {
      const good = await delivered();
      const log = Buffer.from(good.get("log")!.toString("utf8").replace("evidence line one", "evidence line 0ne"));
      const record = Buffer.from(
        good.get("record.json")!.toString("utf8").replace('"job":"evidence"', '"job":"evidencX"'),
      );
      const audit = good.get("audit.jsonl")!.toString("utf8");
      const withoutEnd = Buffer.from(
        audit
          .split("\n")
          .filter((line) => !line.includes('"run-end"'))
          .join("\n"),
      );
      const cases: [string, Map<string, Buffer>, string, string][] = [
        ["ev/log", new Map([...good, ["log", log]]), "integrity-mismatch", "run-log-mismatch"],
        [
          "ev/log-short",
          new Map([...good, ["log", good.get("log")!.subarray(0, good.get("log")!.length - 5)]]),
          "integrity-mismatch",
          "run-log-mismatch",
        ],
        ["ev/record", new Map([...good, ["record.json", record]]), "integrity-mismatch", "run-record-mismatch"],
        ["ev/audit", new Map([...good, ["audit.jsonl", withoutEnd]]), "integrity-mismatch", "run-audit-mismatch"],
        [
          "ev/audit-junk",
          new Map([...good, ["audit.jsonl", Buffer.from(`${audit}not json\n`)]]),
          "integrity-mismatch",
          "run-audit-mismatch",
        ],
        [
          "ev/missing",
          new Map([...good].filter(([name]) => name !== "audit.jsonl")),
          "invalid-artifact",
          "run-files-mismatch",
        ],
      ];
      const scopeB = freshScope();
      for (const [repository, files, code, reason] of cases) {
        const to = await servedAs(repository, files);
        expectRefused(scopeB, [`${to}:run-${hex(sent.runId)}`], code, reason);
      }
      expectRefused(scopeB, [`${reg().ref("ev/nothing")}:run-${hex(sent.runId)}`], "run-not-found");
    },
  );

  test(
    "Given a received run whose files in B were changed When B pulls it " +
      "again, verifies it, or runs fsck Then the pull is refused with nothing " +
      "replaced, and verify and fsck report the damage",
    () => {
      const scopeB = freshScope();
      ok(["--scope", scopeB, "pull", `${sent.to}:run-${hex(sent.runId)}`]);
      const logPath = join(scopeB, ".agents/received-runs", sent.runId, "log");
      const original = readFileSync(logPath);
      writeFileSync(logPath, Buffer.from(original.toString("utf8").replace("evidence line one", "evidence line 0ne")));
      expectRefused(scopeB, [`${sent.to}:run-${hex(sent.runId)}`], "integrity-mismatch", "other-content");
      const verify = runJson(["--scope", scopeB, "run", "verify", sent.runId]);
      assert.equal(verify.envelope.error!.code, "integrity-mismatch", verify.stdout);
      assert.equal(verify.envelope.error!.details["reason"], "run-log-mismatch");
      const fsck = runJson(["--scope", scopeB, "fsck"]);
      assert.notEqual(fsck.status, 0, fsck.stdout);
      assert.ok(fsck.stdout.includes(sent.runId), "fsck names the damaged received run");
    },
  );

  test(
    "Given a symlink planted where the received run would go When B pulls " +
      "the run Then it is refused without following it and nothing is written " +
      "through it",
    () => {
      const scopeB = freshScope();
      const elsewhere = tempDir("oats-elsewhere-");
      mkdirSync(join(scopeB, ".agents/received-runs"), { recursive: true });
      writeFileSync(join(scopeB, ".agents/received-runs/.gitignore"), "*\n");
      symlinkSync(elsewhere, join(scopeB, ".agents/received-runs", sent.runId));
      expectRefused(scopeB, [`${sent.to}:run-${hex(sent.runId)}`], "invalid-artifact-store", "symlink");
      assert.deepEqual(readdirSync(elsewhere), [], "nothing was written through the symlink");
    },
  );

  test(
    "Given the run pushed to a dir: share When another scope pulls it with " +
      "--run Then it is received; a tampered share is refused; a dir: pull " +
      "without --run is a usage error",
    () => {
      const share = tempDir("oats-share-");
      ok(["--scope", sent.scope, "push", "--to", `dir:${share}`, "--allow-same-filesystem"]);
      const scopeC = freshScope();
      const pulled = ok(["--scope", scopeC, "pull", `dir:${share}`, "--run", sent.runId]);
      assert.equal(pulled["status"], "written");
      assert.equal(pulled["from"], `dir:${share}`);
      assert.ok(readFileSync(join(scopeC, ".agents/received-runs", sent.runId, "log")).equals(sent.files.get("log")!));
      assert.equal(ok(["--scope", scopeC, "run", "verify", sent.runId])["from"], `dir:${share}`);

      const usage = expectRefused(freshScope(), [`dir:${share}`], "usage");
      assert.equal(usage.status, 2);
      const tampered = tempDir("oats-share-t-");
      cpSync(share, tampered, { recursive: true });
      const logPath = join(tampered, "runs", hex(sent.runId), "log");
      writeFileSync(logPath, Buffer.concat([readFileSync(logPath), Buffer.from("x")]));
      expectRefused(freshScope(), [`dir:${tampered}`, "--run", sent.runId], "integrity-mismatch", "run-log-mismatch");
    },
  );
});
