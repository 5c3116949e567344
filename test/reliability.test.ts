/**
 * Reliability of publication: real OS processes
 * racing on one store, a publisher killed with SIGKILL mid-copy, staging
 * cleanup that respects live publishers, injected faults at each step, the
 * bounded lock wait. Fault injection is used only for failures that cannot
 * be produced on demand (a copy, fsync, re-read or rename error).
 */
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { basename, join } from "node:path";
import { test } from "node:test";
import lockfile from "proper-lockfile";
import {
  type OatsError,
  TREE_EXEC,
  TREE_LEGACY,
  cleanupStaging,
  digestTree,
  fsck,
  listRetained,
  listStore,
  retainCapabilityArtifact,
  retainTree,
  storeRoot,
  verifyRetainedCapability,
  verifyTree,
  type ArtifactReceipt,
} from "../src/index.js";
import { setFaultHook, type PublishStep } from "../src/retention/store/faults.js";
import { hostTag, stagingName } from "../src/retention/store/layout.js";
import { REPO, fixtureCopy, fixtureLock, snapshotTree, tempDir } from "./helpers.js";
import { ofKind, refusal } from "./support/refusals.js";

const CHILD = join(REPO, "test/support/retain-child.ts");
const CAPABILITY = "demo.hello";

// ---------------------------------------------------------------- helpers

interface ChildRequest {
  scope: string;
  source: string;
  key: string;
  kind?: "capability" | "source" | "capture";
  mode: "capability" | "tree";
  lockFile?: string;
  waitForGo?: boolean;
  faults?: PublishStep[];
  lockWaitMs?: number;
}

interface ChildOutcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  result?:
    | { ok: true; receipt: ArtifactReceipt }
    | { ok: false; error: { code: string; kind: string; message: string; details: Record<string, any> } };
}

interface Child {
  process: ChildProcess;
  ready: Promise<void>;
  done: Promise<ChildOutcome>;
}

function startChild(request: ChildRequest): Child {
  const child = spawn(process.execPath, ["--import", "tsx", CHILD, JSON.stringify(request)], {
    cwd: REPO,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout!.setEncoding("utf8").on("data", (data: string) => (stdout += data));
  child.stderr!.setEncoding("utf8").on("data", (data: string) => {
    stderr += data;
    if (/^ready$/m.test(stderr)) markReady();
  });
  const done = new Promise<ChildOutcome>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      markReady();
      const line = stdout.trim().split("\n").pop();
      let result: ChildOutcome["result"];
      try {
        result = line ? JSON.parse(line) : undefined;
      } catch {
        result = undefined;
      }
      resolve({ code, signal, stdout, stderr, ...(result ? { result } : {}) });
    });
  });
  return { process: child, ready, done };
}

/** Start all children, wait until each has loaded the library, then release them at once. */
async function raceChildren(requests: ChildRequest[]): Promise<ChildOutcome[]> {
  const children = requests.map((request) => startChild({ ...request, waitForGo: true }));
  await Promise.all(children.map((child) => child.ready));
  for (const child of children) child.process.stdin!.end("go\n");
  return Promise.all(children.map((child) => child.done));
}

function receiptOf(outcome: ChildOutcome): ArtifactReceipt {
  assert.equal(outcome.code, 0, `child failed: ${outcome.stdout}\n${outcome.stderr}`);
  assert.ok(outcome.result?.ok, `child reported failure: ${outcome.stdout}`);
  return (outcome.result as { receipt: ArtifactReceipt }).receipt;
}

/** Every path under root whose name starts with one of the prefixes. */
function findByPrefix(root: string, prefixes: string[]): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (prefixes.some((prefix) => entry.name.startsWith(prefix))) found.push(path);
      if (entry.isDirectory()) walk(path);
    }
  };
  if (existsSync(root)) walk(root);
  return found;
}

/** Add `count` small files spread over a few directories. */
function addFiles(root: string, count: number, salt = ""): void {
  for (let index = 0; index < count; index++) {
    const dir = join(root, "extra", `d${index % 12}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `f${index}.txt`), `${salt}file ${index}\n`.repeat(1 + (index % 40)));
  }
}

/** A copy of the fixture with more files, and a lock file whose capability row names its legacy digest. */
async function biggerCapability(count: number): Promise<{ source: string; lock: any; lockFile: string }> {
  const source = fixtureCopy();
  addFiles(source, count);
  const lock = fixtureLock() as any;
  lock.capabilities[CAPABILITY].integrity = (await digestTree(source, [TREE_LEGACY]))[TREE_LEGACY];
  const lockFile = join(tempDir("oats-lock-"), "oats-lock.json");
  writeFileSync(lockFile, JSON.stringify(lock, null, 2));
  return { source, lock, lockFile };
}

function injectedFault(step: PublishStep): Error {
  return Object.assign(new Error(`injected ${step} fault`), { code: "EIO" });
}

/** The internal error of a publish step that failed. */
const isStepError = (step: string) => refusal("internal-error", ofKind("internal"), { step });

async function withFaults<T>(steps: PublishStep[], body: () => Promise<T>): Promise<T> {
  const failing = new Set(steps);
  setFaultHook((step) => {
    if (failing.has(step)) throw injectedFault(step);
  });
  try {
    return await body();
  } finally {
    setFaultHook(null);
  }
}

function deadPid(): number {
  const child = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" });
  const pid = Number(child.stdout);
  assert.ok(Number.isInteger(pid) && pid > 0);
  // The pid belongs to a process that has exited and been reaped.
  assert.throws(() => process.kill(pid, 0), { code: "ESRCH" });
  return pid;
}

function assertNoLeftovers(scope: string): void {
  assert.deepEqual(findByPrefix(scope, [".staging-", ".lock-"]), [], "no staging or lock may remain");
}

// ------------------------------------------------------ concurrent publishers

test(
  "8 processes retaining the same capability at once: one retained, 7 " + "kept, one revision, nothing left over",
  async () => {
    const scope = tempDir();
    const { source, lock, lockFile } = await biggerCapability(400);
    const outcomes = await raceChildren(
      Array.from({ length: 8 }, () => ({ scope, source, key: CAPABILITY, mode: "capability" as const, lockFile })),
    );
    const receipts = outcomes.map(receiptOf);
    assert.deepEqual(receipts.map((receipt) => receipt.status).sort(), [
      "kept",
      "kept",
      "kept",
      "kept",
      "kept",
      "kept",
      "kept",
      "retained",
    ]);
    for (const receipt of receipts) {
      assert.equal(receipt.dir, receipts[0]!.dir);
      assert.deepEqual(receipt.integrity, { format: TREE_LEGACY, value: lock.capabilities[CAPABILITY].integrity });
      assert.deepEqual(receipt.execIntegrity, receipts[0]!.execIntegrity);
    }
    assert.equal(
      receipts[0]!.dir,
      join(storeRoot(scope, "capability"), CAPABILITY, lock.capabilities[CAPABILITY].integrity),
    );
    assertNoLeftovers(scope);
    assert.equal(listRetained(scope).length, 1);
    await verifyRetainedCapability(scope, CAPABILITY, lock);
  },
);

test(
  "8 processes retaining the same capture tree at once: one retained, 7 " + "kept, one revision, nothing left over",
  async () => {
    const scope = tempDir();
    const source = fixtureCopy();
    addFiles(source, 400);
    const expected = (await digestTree(source, [TREE_EXEC]))[TREE_EXEC]!;
    const outcomes = await raceChildren(
      Array.from({ length: 8 }, () => ({
        scope,
        source,
        key: "nightly",
        kind: "capture" as const,
        mode: "tree" as const,
      })),
    );
    const receipts = outcomes.map(receiptOf);
    assert.deepEqual(receipts.map((receipt) => receipt.status).sort(), [
      "kept",
      "kept",
      "kept",
      "kept",
      "kept",
      "kept",
      "kept",
      "retained",
    ]);
    for (const receipt of receipts) {
      assert.equal(receipt.dir, join(storeRoot(scope, "capture"), "nightly", "tree-exec-v1", expected));
      assert.deepEqual(receipt.integrity, { format: TREE_EXEC, value: expected });
    }
    assertNoLeftovers(scope);
    assert.equal(listRetained(scope).length, 1);
    await verifyTree(scope, { kind: "capture", key: "nightly", integrity: receipts[0]!.integrity });
  },
);

test(
  "two different trees retained at once under the same capture name: both " + "retained as different revisions",
  async () => {
    const scope = tempDir();
    const first = fixtureCopy();
    const second = fixtureCopy();
    addFiles(first, 200, "first ");
    addFiles(second, 200, "second ");
    const [a, b] = (
      await raceChildren(
        [first, second].map((source) => ({
          scope,
          source,
          key: "shared",
          kind: "capture" as const,
          mode: "tree" as const,
        })),
      )
    ).map(receiptOf);
    assert.equal(a!.status, "retained");
    assert.equal(b!.status, "retained");
    assert.notEqual(a!.integrity.value, b!.integrity.value);
    assert.notEqual(a!.dir, b!.dir);
    assert.deepEqual(
      listRetained(scope)
        .map((entry) => entry.dir)
        .sort(),
      [a!.dir, b!.dir].sort(),
    );
    for (const receipt of [a!, b!])
      await verifyTree(scope, { kind: "capture", key: "shared", integrity: receipt.integrity });
    assertNoLeftovers(scope);
  },
);

// ------------------------------------------------------------- crash (SIGKILL)

test(
  "a publisher killed with SIGKILL mid-publication leaves only staging; " +
    "cleanup removes it and a retain then succeeds",
  async () => {
    const scope = tempDir();
    const source = join(tempDir("oats-big-"), "tree");
    addFiles(source, 2000);
    const big = openSync(join(source, "big.bin"), "w");
    const block = randomBytes(4 << 20);
    for (let written = 0; written < 200 << 20; written += block.length) {
      block.writeUInt32BE(written >>> 0, 0);
      writeSync(big, block);
    }
    closeSync(big);
    const integrity = { format: TREE_EXEC, value: (await digestTree(source, [TREE_EXEC]))[TREE_EXEC]! } as const;
    const parent = join(storeRoot(scope, "capture"), "bulk", "tree-exec-v1");

    const child = startChild({ scope, source, key: "bulk", kind: "capture", mode: "tree" });
    let staging: string | undefined;
    const deadline = Date.now() + 60_000;
    while (!staging) {
      assert.equal(child.process.exitCode, null, "the publisher finished before it could be killed");
      assert.ok(Date.now() < deadline, "no staging directory appeared");
      let names: string[] = [];
      try {
        names = readdirSync(parent);
      } catch {
        // not created yet
      }
      staging = names.find((name) => name.startsWith(".staging-"));
      if (!staging) await new Promise((resolve) => setTimeout(resolve, 5));
    }
    child.process.kill("SIGKILL");
    const outcome = await child.done;
    assert.equal(outcome.signal, "SIGKILL");
    const stagingPath = join(parent, staging);
    assert.ok(existsSync(stagingPath), "the killed publisher's staging is still there");

    // Nothing selectable.
    assert.deepEqual(listRetained(scope), []);
    assert.deepEqual(
      readdirSync(parent).filter((name) => !name.startsWith(".")),
      [],
    );
    await assert.rejects(verifyTree(scope, { kind: "capture", key: "bulk", integrity }), {
      code: "artifact-not-found",
      kind: "missing",
    });
    // Reported, not selected.
    assert.deepEqual(listStore(scope).staging, [stagingPath]);
    const report = await fsck(scope);
    assert.equal(report.checked, 0);
    assert.deepEqual(report.staging, [stagingPath]);

    // Explicit cleanup removes it: its publisher is gone.
    const cleanup = await cleanupStaging(scope);
    assert.deepEqual(cleanup.removed, [stagingPath]);
    assert.deepEqual(cleanup.active, []);
    assert.equal(existsSync(stagingPath), false);
    assert.deepEqual(listStore(scope).staging, []);

    const retained = await retainTree(scope, { kind: "capture", key: "bulk", source });
    assert.equal(retained.status, "retained");
    assert.deepEqual(retained.integrity, integrity);
    await verifyTree(scope, { kind: "capture", key: "bulk", integrity });
    assertNoLeftovers(scope);
    rmSync(source, { recursive: true, force: true });
  },
);

// ------------------------------------------------------------------- cleanup

test(
  "cleanupStaging removes a dead publisher's staging only: live " + "publishers' and foreign names are left alone",
  async () => {
    const scope = tempDir();
    const first = await retainTree(scope, { kind: "capture", key: "keep", source: fixtureCopy() });
    const parent = join(storeRoot(scope, "capture"), "keep", "tree-exec-v1");
    const capabilityParent = join(storeRoot(scope, "capability"), CAPABILITY);
    await retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, fixtureLock());

    const live = join(parent, stagingName());
    assert.match(basename(live), new RegExp(`^\\.staging-${hostTag()}-${process.pid}-[0-9a-f]{12}$`));
    const dead = join(capabilityParent, `.staging-${hostTag()}-${deadPid()}-${randomBytes(6).toString("hex")}`);
    const foreign = join(parent, ".staging-foo");
    // Another host's staging is not ours to judge by pid: left alone while recent.
    const otherHost = join(
      parent,
      `.staging-${hostTag() === "00000000" ? "11111111" : "00000000"}-1-${randomBytes(6).toString("hex")}`,
    );
    for (const dir of [live, dead, foreign, otherHost]) {
      mkdirSync(join(dir, "partial"), { recursive: true });
      writeFileSync(join(dir, "partial", "file.txt"), "half-written\n");
    }

    assert.deepEqual(listStore(scope).staging.sort(), [live, dead, foreign, otherHost].sort());
    const report = await cleanupStaging(scope);
    assert.deepEqual(report.removed, [dead]);
    assert.deepEqual(report.active.sort(), [live, otherHost].sort());
    assert.equal(existsSync(dead), false);
    for (const dir of [live, foreign, otherHost])
      assert.ok(existsSync(join(dir, "partial", "file.txt")), `${dir} must be left alone`);
    // Revisions are untouched by cleanup.
    assert.equal(listRetained(scope).length, 2);
    await verifyTree(scope, first);
  },
);

// ---------------------------------------------------------- injected faults

const STEPS = ["copy", "fsync", "verify-staged", "rename"] as const;

for (const step of STEPS) {
  test(
    `an injected ${step} fault fails the retain naming the step and leaves ` + `the store byte-for-byte as it was`,
    async () => {
      const scope = tempDir();
      // Make the store and both revision parents exist, so "unchanged" means unchanged.
      const other = fixtureCopy();
      writeFileSync(join(other, "other.txt"), "another revision\n");
      await retainTree(scope, { kind: "capture", key: "faulty", source: other });
      await retainTree(scope, { kind: "capability", key: CAPABILITY, source: other });
      const before = snapshotTree(scope);

      const capture = fixtureCopy();
      addFiles(capture, 20);
      await withFaults([step], () =>
        assert.rejects(retainTree(scope, { kind: "capture", key: "faulty", source: capture }), isStepError(step)),
      );
      assert.deepEqual(snapshotTree(scope), before);
      assertNoLeftovers(scope);

      await withFaults([step], () =>
        assert.rejects(retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, fixtureLock()), isStepError(step)),
      );
      assert.deepEqual(snapshotTree(scope), before);
      assertNoLeftovers(scope);
      assert.equal(listRetained(scope).length, 2);

      // The store is not wedged: without the fault the same retains succeed.
      assert.equal((await retainTree(scope, { kind: "capture", key: "faulty", source: capture })).status, "retained");
      assert.equal(
        (await retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, fixtureLock())).status,
        "retained",
      );
      assertNoLeftovers(scope);
    },
  );
}

test(
  "an injected fsync fault on a large tree (one syncfs, not per-file " +
    "fsync) names the fsync step and leaves nothing",
  async () => {
    const scope = tempDir();
    const other = fixtureCopy();
    await retainTree(scope, { kind: "capture", key: "many", source: other });
    const before = snapshotTree(scope);
    const source = fixtureCopy();
    addFiles(source, 700);
    await withFaults(["fsync"], () =>
      assert.rejects(retainTree(scope, { kind: "capture", key: "many", source }), isStepError("fsync")),
    );
    assert.deepEqual(snapshotTree(scope), before);
    assertNoLeftovers(scope);
  },
);

test(
  "a copy fault whose cleanup also fails names the copy step, says staging " + "was left, and cleanup then removes it",
  async () => {
    const scope = tempDir();
    const other = fixtureCopy();
    writeFileSync(join(other, "other.txt"), "another revision\n");
    await retainTree(scope, { kind: "capture", key: "leaky", source: other });
    const before = snapshotTree(scope);

    // In this process: the error says what happened, and cleanup leaves the staging of a live publisher alone.
    const source = fixtureCopy();
    let left = "";
    await withFaults(["copy", "cleanup"], () =>
      assert.rejects(retainTree(scope, { kind: "capture", key: "leaky", source }), (error: unknown) => {
        isStepError("copy")(error);
        const cleanup = (error as OatsError).details.cleanup as { staging: string; error: string; remedy: string };
        assert.ok(cleanup, "the error must say that staging was left");
        assert.match(cleanup.error, /cleanup/);
        assert.match(cleanup.remedy, /cleanup/);
        left = cleanup.staging;
        return true;
      }),
    );
    assert.ok(existsSync(left), "the staging was left behind");
    assert.deepEqual(listStore(scope).staging, [left]);
    assert.deepEqual((await cleanupStaging(scope)).active, [left]);
    assert.ok(existsSync(left));
    rmSync(left, { recursive: true, force: true });
    assert.deepEqual(snapshotTree(scope), before);

    // In a publisher process that then exits, as `oats retain` would: `oats cleanup` removes what it left.
    const outcome = await startChild({
      scope,
      source,
      key: "leaky",
      kind: "capture",
      mode: "tree",
      faults: ["copy", "cleanup"],
    }).done;
    assert.equal(outcome.code, 1, outcome.stdout + outcome.stderr);
    assert.ok(outcome.result && !outcome.result.ok);
    const error = outcome.result.error;
    assert.equal(error.code, "internal-error");
    assert.equal(error.kind, "internal");
    assert.equal(error.details.step, "copy");
    const staging: string = error.details.cleanup?.staging;
    assert.ok(staging && existsSync(staging), "the child's staging was left behind");
    assert.deepEqual(listStore(scope).staging, [staging]);
    assert.equal(listRetained(scope).length, 1, "nothing new is selectable");
    const report = await cleanupStaging(scope);
    assert.deepEqual(report.removed, [staging]);
    assert.equal(existsSync(staging), false);
    assert.deepEqual(snapshotTree(scope), before);
    assert.equal(listRetained(scope).length, 1);
  },
);

// ---------------------------------------------------------------------- busy

test(
  "a publication lock held elsewhere ends in busy after the bounded wait, " +
    "removes staging, and the retain succeeds once it is released",
  async () => {
    const scope = tempDir();
    const other = fixtureCopy();
    writeFileSync(join(other, "other.txt"), "another revision\n");
    await retainTree(scope, { kind: "capture", key: "held", source: other });
    const source = fixtureCopy();
    const value = (await digestTree(source, [TREE_EXEC]))[TREE_EXEC]!;
    const parent = join(storeRoot(scope, "capture"), "held", "tree-exec-v1");
    const lockfilePath = join(parent, `.lock-${value}`);

    const release = await lockfile.lock(join(parent, value), { realpath: false, lockfilePath });
    try {
      await assert.rejects(
        retainTree(scope, { kind: "capture", key: "held", source }, { lockWaitMs: 300 }),
        refusal("busy", { lock: lockfilePath }, ofKind("busy")),
      );
      assert.deepEqual(findByPrefix(scope, [".staging-"]), [], "staging removed after busy");
      assert.equal(existsSync(join(parent, value)), false);
    } finally {
      await release();
    }
    const receipt = await retainTree(scope, { kind: "capture", key: "held", source }, { lockWaitMs: 300 });
    assert.equal(receipt.status, "retained");
    assert.equal(receipt.dir, join(parent, value));
    assertNoLeftovers(scope);
  },
);

test(
  "a publisher waits for the lock up to lockWaitMs: a lock released during " +
    "the wait is acquired, not refused as busy",
  async () => {
    const scope = tempDir();
    const other = fixtureCopy();
    writeFileSync(join(other, "other.txt"), "another revision\n");
    await retainTree(scope, { kind: "capture", key: "waits", source: other });
    const source = fixtureCopy();
    const value = (await digestTree(source, [TREE_EXEC]))[TREE_EXEC]!;
    const parent = join(storeRoot(scope, "capture"), "waits", "tree-exec-v1");
    const release = await lockfile.lock(join(parent, value), {
      realpath: false,
      lockfilePath: join(parent, `.lock-${value}`),
    });
    // Released well inside an 800 ms wait; a publisher that gives up early reports busy.
    const released = new Promise<void>((resolve, reject) => setTimeout(() => release().then(resolve, reject), 250));
    try {
      const receipt = await retainTree(scope, { kind: "capture", key: "waits", source }, { lockWaitMs: 800 });
      assert.equal(receipt.status, "retained");
    } finally {
      await released;
    }
    assertNoLeftovers(scope);
  },
);

test(
  "the capability publication lock is the same lock: held by another " + "process, a capability retain is busy",
  async () => {
    const scope = tempDir();
    const other = fixtureCopy();
    writeFileSync(join(other, "other.txt"), "another revision\n");
    await retainTree(scope, { kind: "capability", key: CAPABILITY, source: other });
    const lock = fixtureLock() as any;
    const value: string = lock.capabilities[CAPABILITY].integrity;
    const parent = join(storeRoot(scope, "capability"), CAPABILITY);
    const holder = spawn(
      process.execPath,
      [
        "-e",
        `const l = require(${JSON.stringify(join(REPO, "node_modules/proper-lockfile"))});
       l.lock(${JSON.stringify(join(parent, value))}, {
         realpath: false, lockfilePath: ${JSON.stringify(join(parent, `.lock-${value}`))} })
        .then(() => { process.stdout.write("held\\n"); process.stdin.once("data", () => process.exit(0)); });`,
      ],
      { stdio: ["pipe", "pipe", "inherit"] },
    );
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout!.once("data", () => resolve());
        holder.once("exit", (code) => reject(new Error(`lock holder exited ${code}`)));
      });
      await assert.rejects(retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, lock, { lockWaitMs: 300 }), {
        code: "busy",
        kind: "busy",
      });
      assert.deepEqual(findByPrefix(scope, [".staging-"]), []);
    } finally {
      holder.stdin!.end("release\n");
      await new Promise((resolve) => holder.once("close", resolve));
    }
    assert.equal(
      (await retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, lock, { lockWaitMs: 2000 })).status,
      "retained",
    );
    assertNoLeftovers(scope);
  },
);
