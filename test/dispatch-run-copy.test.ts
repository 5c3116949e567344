/**
 * The trust chain at dispatch: dispatch runs only the bytes it
 * verified. The executable tree is hashed while it is copied into a private
 * run directory, the child runs from that copy, Node module resolution is
 * kept inside it, and the harness label is audited on every dispatch.
 * Real files, real child processes, a real racing attacker process, and
 * `nobody` (uid 65534) where another local user is needed.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import {
  addJob,
  approve,
  cleanupStaging,
  currentPrincipal,
  discardDispatchPlan,
  prepareCapture,
  readAudit,
  resolveQueuedCapture,
  revoke,
  runDispatchPlan,
  verifyAudit,
  type AuditEntry,
  type DispatchOptions,
  type PrepareCaptureResult,
} from "../src/index.js";
import { setReadHook } from "../src/engine/read-hook.js";
import { digestTree } from "../src/retention/digest/tree.js";
import { hostTag } from "../src/retention/store/layout.js";
import { REPO, tempDir } from "./helpers.js";
import { makeUnwritable } from "./support/unwritable.js";
import { refusal } from "./support/refusals.js";

const NODE_DIR = dirname(process.execPath);
const TREE_EXEC = "oats.tree-exec.v1";

interface TreeFile {
  readonly body: string;
  readonly mode: number;
}

interface Options {
  /** Files of the tool tree by relative path. */
  readonly files: Record<string, TreeFile>;
  readonly entry: string;
  readonly args?: string[];
  readonly env?: Record<string, string>;
  /** How the config names this principal (default sovereign). */
  readonly principal?: "sovereign" | "non-sovereign";
  /** Create the scope inside this directory instead of a fresh temporary one. */
  readonly parent?: string;
}

interface Fixture {
  readonly scope: string;
  readonly prepared: PrepareCaptureResult;
  readonly job: string;
}

async function fixture(options: Options): Promise<Fixture> {
  const base = options.parent ?? tempDir("oats-runcopy-");
  const scope = join(base, "scope");
  const home = join(base, "home");
  mkdirSync(scope, { recursive: true });
  const tool = join(home, "tool");
  for (const [path, file] of Object.entries(options.files)) {
    mkdirSync(dirname(join(tool, path)), { recursive: true });
    writeFileSync(join(tool, path), file.body);
    chmodSync(join(tool, path), file.mode);
  }
  writeFileSync(
    join(home, "class.yaml"),
    stringify({
      schemaVersion: 1,
      wings: { vault: "confidential" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: options.principal ?? "sovereign" },
    }),
  );
  writeFileSync(
    join(home, "spec.yaml"),
    stringify({
      name: "runner",
      executable: { tree: "./tool", path: options.entry, args: options.args ?? [] },
      target: { wing: "vault" },
      classification: "confidential",
      classificationConfig: "./class.yaml",
      env: options.env ?? { PATH: `${NODE_DIR}:/usr/bin:/bin` },
      ...(options.env && Object.hasOwn(options.env, "NODE_OPTIONS") ? { loaderEnv: ["NODE_OPTIONS"] } : {}),
      credentials: [],
      // Tests run as root: only a privileged composition may run there (privilege.ts).
      privileged: true,
    }),
  );
  const prepared = await prepareCapture(scope, join(home, "spec.yaml"));
  await approve(scope, prepared.composition.subject, { reason: "reviewed" });
  await addJob(scope, { job: "nightly", resolution: prepared.id });
  return { scope, prepared, job: "nightly" };
}

function runCopies(scope: string): string[] {
  const area = join(scope, ".agents", "run-copies");
  return existsSync(area) ? readdirSync(area).filter((name) => name !== ".gitignore") : [];
}

function auditEntries(scope: string): AuditEntry[] {
  return readAudit(scope).entries;
}

async function dispatchAndRun(scope: string, job: string, options: DispatchOptions = {}) {
  const plan = await resolveQueuedCapture(scope, job, { env: {}, ...options });
  const run = await runDispatchPlan(plan, { stdio: "pipe" });
  return { plan, run };
}

// ------------------------------------------------------------ TOCTOU race

/** An attacker process (test/support/swap-attacker.ts), started and ready. */
async function startAttacker(
  request: Record<string, unknown>,
  as?: { uid: number; gid: number },
): Promise<{ done: Promise<{ status: number | null; stdout: string; stderr: string }> }> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(REPO, "test/support/swap-attacker.ts"), JSON.stringify(request)],
    { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], ...(as ?? {}) },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  const done = new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on("close", (status) => resolve({ status, stdout, stderr })),
  );
  await new Promise<void>((resolve, reject) => {
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      if (stderr.includes("ready\n")) resolve();
    });
    child.on("exit", () => reject(new Error(`attacker exited before ready: ${stderr}`)));
  });
  // Wrapped: an async function returning the promise itself would wait for it.
  return { done };
}

describe("dispatch runs the bytes it verified (time of check to time of use)", () => {
  // The entry point copies its own text to the marker: what ran is what the marker holds.
  const approved = '#!/bin/sh\n# approved\ncat "$0" > "$1"\n';
  const swapped = '#!/bin/sh\n# swapped by the attacker\ncat "$0" > "$1"\n';

  // on-audit: another local user (nobody) who can write one directory of the store (a group-writable store, say);
  // hold-lock: another process of the dispatching account, which can also take the audit lock.
  for (const mode of ["on-audit", "hold-lock"] as const) {
    test(`Given ` +
      (mode === "on-audit"
        ? "another user (nobody) who swaps the retained entry point the moment the dispatch audit entry appears"
        : "a process that swaps the retained entry point while it holds the audit lock the dispatcher waits on") +
      ", " +
      `When dispatched over several rounds, Then what runs is always the ` +
      `approved text, never the swapped one`, {
      timeout: 180_000,
    }, async (t) => {
      const asNobody = mode === "on-audit";
      if (asNobody && process.geteuid?.() !== 0) return t.skip("needs root to run the attacker as nobody");
      const base = tempDir("oats-race-");
      const marker = join(base, "marker");
      const parent = tempDir("oats-race-scope-");
      const f = await fixture({
        files: { "bin/run": { body: approved, mode: 0o755 } },
        entry: "bin/run",
        args: [marker],
        parent,
      });
      const target = join(f.prepared.retained.dir, "bin", "run");
      // Directory modes and owners are outside identity: this is the attacker's foothold in the store.
      chmodSync(dirname(target), 0o755);
      if (asNobody) {
        chmodSync(parent, 0o755);
        chownSync(dirname(target), 65534, 65534);
      }
      const auditLog = join(f.scope, ".agents", "audit", "audit.jsonl");
      const rounds = 4;
      for (let round = 0; round < rounds; round++) {
        writeFileSync(marker, "");
        const attacker = await startAttacker(
          { mode, auditLog, target, swapped, holdMs: 1500 },
          asNobody ? { uid: 65534, gid: 65534 } : undefined,
        );
        const { run } = await dispatchAndRun(f.scope, f.job, { lockWaitMs: 60_000 });
        const attack = await attacker.done;
        assert.equal(
          attack.stdout,
          "swapped\n",
          `round ${round}: the attacker swapped the store copy (status ${attack.status}: ${attack.stderr})`,
        );
        assert.equal(readFileSync(target, "utf8"), swapped, "the store really holds the swapped text");
        assert.equal(run.code, 0, run.stderr);
        assert.equal(
          readFileSync(marker, "utf8"),
          approved,
          `round ${round}: the approved text ran, not the swapped one`,
        );
        assert.deepEqual(runCopies(f.scope), [], "the run copy is gone after the run");
        // Put the approved text back for the next round (else the next check refuses, rightly).
        writeFileSync(`${target}.restore`, approved);
        chmodSync(`${target}.restore`, 0o755);
        renameSync(`${target}.restore`, target);
      }
      const dispatches = auditEntries(f.scope).filter((entry) => entry.action === "dispatch");
      assert.deepEqual(
        dispatches.map((entry) => entry.outcome),
        Array(rounds).fill("ok"),
      );
    });
  }

  test(
    "Given a retained entry point changed before dispatch, When dispatched, " +
      "Then integrity-mismatch, nothing runs, and no run copy is left",
    async () => {
      const base = tempDir("oats-race-");
      const marker = join(base, "marker");
      const f = await fixture({
        files: { "bin/run": { body: approved, mode: 0o755 } },
        entry: "bin/run",
        args: [marker],
      });
      const target = join(f.prepared.retained.dir, "bin", "run");
      chmodSync(dirname(target), 0o755);
      writeFileSync(`${target}.x`, swapped);
      chmodSync(`${target}.x`, 0o755);
      renameSync(`${target}.x`, target);
      await assert.rejects(
        dispatchAndRun(f.scope, f.job),
        refusal("integrity-mismatch", (error) => assert.equal(error.details["reason"], "damaged-revision")),
      );
      assert.equal(existsSync(marker), false, "nothing ran");
      assert.deepEqual(runCopies(f.scope), []);
    },
  );
});

// ------------------------------------------------------- the Node guard

describe("Node entry points resolve modules only inside the run copy", () => {
  const planted = 'module.exports = "PLANTED OUTSIDE THE TREE";\n';
  const inside = 'module.exports = "inside-y";\n';

  /** A scope with `<scope>/node_modules/x` planted, as another writer of the scope could. */
  function plant(scope: string): void {
    mkdirSync(join(scope, "node_modules", "x"), { recursive: true });
    writeFileSync(join(scope, "node_modules", "x", "index.js"), planted);
    writeFileSync(join(scope, "node_modules", "x", "package.json"), '{"name":"x","main":"index.js"}\n');
  }

  const cases: { name: string; entry: string; body: string; mode: number }[] = [
    {
      name: "a CommonJS require('x') from a .cjs entry run under this Node",
      entry: "bin/run.cjs",
      body: 'console.log(require("y"));\nconsole.log("cwd " + process.cwd());\nconsole.log(require("x"));\n',
      mode: 0o644,
    },
    {
      name: "an ESM import 'x' from a .mjs entry run under this Node",
      entry: "bin/run.mjs",
      body:
        'import y from "y";\nconsole.log(y);\nconsole.log("cwd " + ' +
        'process.cwd());\nconst x = await import("x");\nconsole.log(x.default);\n',
      mode: 0o644,
    },
    {
      name: "a require('x') from an owner-executable #!/usr/bin/env node entry (guarded through NODE_OPTIONS)",
      entry: "bin/run",
      body:
        '#!/usr/bin/env node\nconsole.log(require("y"));\nconsole.log("cwd " + ' +
        'process.cwd());\nconsole.log(require("x"));\n',
      mode: 0o755,
    },
    {
      name: "a require('x') in a Node child the entry starts with its own environment passed on",
      entry: "bin/run.cjs",
      body:
        'console.log(require("y"));\nconsole.log("cwd " + process.cwd());\n' +
        'const r = require("node:child_process").spawnSync(process.execPath, ' +
        '["-e", "console.log(require(\'x\'))"], { encoding: "utf8" });\n' +
        "process.stdout.write(r.stdout); process.stderr.write(r.stderr); process.exit(r.status ?? 1);\n",
      mode: 0o644,
    },
  ];

  for (const c of cases) {
    test(
      `Given ${c.name} and <scope>/node_modules/x planted, When dispatched, ` +
        `Then the tree's own node_modules/y resolves, the child's cwd is the ` +
        `copy, and x is refused by the guard`,
      async () => {
        const f = await fixture({
          files: {
            [c.entry]: { body: c.body, mode: c.mode },
            "node_modules/y/index.js": { body: inside, mode: 0o644 },
          },
          entry: c.entry,
        });
        plant(f.scope);
        const { plan, run } = await dispatchAndRun(f.scope, f.job);
        assert.notEqual(run.code, 0, `the planted module must not load:\n${run.stdout}`);
        assert.match(run.stderr, /ERR_OATS_RUN_GUARD/);
        assert.match(run.stderr, /oats run guard: "x" resolves outside the verified run copy/);
        assert.doesNotMatch(run.stdout, /PLANTED/);
        assert.match(run.stdout, /^inside-y$/m);
        assert.match(run.stdout, new RegExp(`^cwd ${plan.run.root}$`, "m"));
      },
    );
  }

  test(
    "Given a spec whose pinned env already has NODE_OPTIONS, When " +
      "dispatched, Then the guard is appended, not substituted",
    async () => {
      const f = await fixture({
        files: {
          "bin/run.cjs": {
            body: 'console.log(process.execArgv.join(" ") + " | " + process.env.NODE_OPTIONS);\n',
            mode: 0o644,
          },
        },
        entry: "bin/run.cjs",
        env: { PATH: "/usr/bin:/bin", NODE_OPTIONS: "--max-old-space-size=64" },
      });
      const { plan, run } = await dispatchAndRun(f.scope, f.job);
      assert.equal(run.code, 0, run.stderr);
      assert.ok(plan.env["NODE_OPTIONS"]!.startsWith("--max-old-space-size=64 --import "), plan.env["NODE_OPTIONS"]);
      assert.ok(plan.env["NODE_OPTIONS"]!.includes(plan.run.guard));
    },
  );
});

// ------------------------------------------------------ the run directory

describe("the private run directory", () => {
  const script = "#!/bin/sh\npwd\n";

  test(
    "Given a dispatch, When resolved, Then the run directory is 0700 and " +
      "this account's, the copy's files and directories lose group/other " +
      "write, and the copy is removed after the run",
    async () => {
      const f = await fixture({
        files: {
          "bin/run": { body: script, mode: 0o777 },
          "lib/data.txt": { body: "data\n", mode: 0o666 },
          ...Object.fromEntries(
            Array.from({ length: 60 }, (_, i) => [
              `lib/many/f${i}.txt`,
              { body: `file ${i}\n`.repeat(i + 1), mode: 0o644 },
            ]),
          ),
        },
        entry: "bin/run",
      });
      const plan = await resolveQueuedCapture(f.scope, f.job, { env: {} });
      const dir = statSync(plan.run.dir);
      assert.equal(dir.mode & 0o7777, 0o700);
      assert.equal(dir.uid, process.geteuid!());
      assert.ok(plan.run.root.startsWith(`${plan.run.dir}/`));
      for (const path of ["bin/run", "lib/data.txt", "bin", "lib", "."]) {
        const stats = statSync(join(plan.run.root, path));
        assert.equal(stats.uid, process.geteuid!(), path);
        assert.equal(stats.mode & 0o022, 0, `${path}: no group/other write (${(stats.mode & 0o777).toString(8)})`);
      }
      assert.equal(statSync(join(plan.run.root, "bin/run")).mode & 0o777, 0o755);
      // The copy holds exactly the approved bytes (small files are written concurrently from a reused read buffer).
      assert.equal(`${TREE_EXEC}:${(await digestTree(plan.run.root))[TREE_EXEC]}`, f.prepared.subject.integrity);
      const run = await runDispatchPlan(plan, { stdio: "pipe" });
      assert.deepEqual([run.code, run.stdout, run.kept], [0, `${plan.run.root}\n`, null]);
      assert.equal(existsSync(plan.run.dir), false);
      assert.deepEqual(runCopies(f.scope), []);
    },
  );

  test(
    "Given a tree of 600 small files, When a dispatch copies it, Then each " +
      "file of the revision is read once (the copy's writes in flight never " +
      "make the reads start over) and the copy holds them all",
    async () => {
      const f = await fixture({
        files: {
          "bin/run": { body: script, mode: 0o755 },
          ...Object.fromEntries(
            Array.from({ length: 600 }, (_, i) => [
              `lib/m${i % 4}/f${String(i).padStart(3, "0")}.js`,
              { body: `// ${i}\n`.repeat((i % 50) + 1), mode: 0o644 },
            ]),
          ),
        },
        entry: "bin/run",
      });
      const reads = new Map<string, number>();
      setReadHook((path) => void reads.set(path, (reads.get(path) ?? 0) + 1));
      let plan;
      try {
        plan = await resolveQueuedCapture(f.scope, f.job, { env: {} });
      } finally {
        setReadHook(null);
      }
      try {
        assert.equal(reads.size, 601, "every file of the tree was read");
        assert.deepEqual(
          [...reads].filter(([, count]) => count !== 1),
          [],
          "no file was read twice",
        );
        assert.equal(`${TREE_EXEC}:${(await digestTree(plan.run.root))[TREE_EXEC]}`, f.prepared.subject.integrity);
      } finally {
        await discardDispatchPlan(plan);
      }
    },
  );

  test(
    "Given keep, When the plan runs, Then the copy stays and is reported; " +
      "discardDispatchPlan removes it; a plan never run is discarded the same way",
    async () => {
      const f = await fixture({ files: { "bin/run": { body: script, mode: 0o755 } }, entry: "bin/run" });
      const plan = await resolveQueuedCapture(f.scope, f.job, { env: {} });
      const run = await runDispatchPlan(plan, { stdio: "pipe", keep: true });
      assert.equal(run.kept, plan.run.dir);
      assert.ok(existsSync(join(plan.run.root, "bin/run")));
      await discardDispatchPlan(plan);
      assert.deepEqual(runCopies(f.scope), []);

      const unrun = await resolveQueuedCapture(f.scope, f.job, { env: {} });
      assert.deepEqual(runCopies(f.scope).length, 1);
      await discardDispatchPlan(unrun);
      assert.deepEqual(runCopies(f.scope), []);
    },
  );

  test(
    "Given a plan whose run directory was forged, When discarded, Then " + "invalid-input and nothing is removed",
    async () => {
      const victim = tempDir("oats-victim-");
      writeFileSync(join(victim, "keep.txt"), "keep\n");
      const lookalike = join(victim, ".agents", "not-run-copies", `.staging-${hostTag()}-1-${"0".repeat(12)}`);
      mkdirSync(lookalike, { recursive: true });
      for (const dir of [
        victim,
        lookalike,
        `${victim}/.agents/run-copies/../../keep.txt`,
        "relative/.agents/run-copies/.staging-00000000-1-000000000000",
      ]) {
        await assert.rejects(
          discardDispatchPlan({ run: { dir, root: dir, cwd: dir, guard: "" } }),
          refusal("invalid-input", (error) => assert.equal(error.details["reason"], "not-a-run-copy")),
        );
      }
      assert.equal(readFileSync(join(victim, "keep.txt"), "utf8"), "keep\n");
      assert.ok(existsSync(lookalike));
    },
  );

  test(
    "Given a refusal after the copy was made (approval revoked), When " +
      "dispatched, Then approval-required and no run copy is left",
    async () => {
      const f = await fixture({ files: { "bin/run": { body: script, mode: 0o755 } }, entry: "bin/run" });
      await revoke(f.scope, f.prepared.composition.subject, { reason: "withdrawn" });
      await assert.rejects(resolveQueuedCapture(f.scope, f.job, { env: {} }), refusal("approval-required"));
      assert.deepEqual(runCopies(f.scope), []);
    },
  );

  test(
    "Given an audit log that cannot be appended, When dispatched, Then the " +
      "refusal (audit-unavailable) removes the copy made before the audit",
    async (t) => {
      const f = await fixture({ files: { "bin/run": { body: script, mode: 0o755 } }, entry: "bin/run" });
      const auditDir = join(f.scope, ".agents", "audit");
      const unwritable = makeUnwritable(auditDir, join(auditDir, "audit.jsonl"));
      t.diagnostic(`unwritable audit log by: ${unwritable.setup}`);
      try {
        assert.throws(unwritable.probe, "the audit directory really refuses writes");
        // A read-only log can still be read (the approval cross-check reads it), so the refusal is the append's;
        // a directory in its place is refused earlier, when the log is read.
        const code = unwritable.setup.includes("replaced by a directory")
          ? "invalid-artifact-store"
          : "audit-unavailable";
        await assert.rejects(resolveQueuedCapture(f.scope, f.job, { env: {}, lockWaitMs: 600_000 }), refusal(code));
        if (code === "audit-unavailable")
          assert.ok(existsSync(join(f.scope, ".agents", "run-copies")), "the copy was made before the audit");
        assert.deepEqual(runCopies(f.scope), []);
      } finally {
        unwritable.restore();
      }
    },
  );

  test(
    "Given the run copies' area but a dispatcher whose process is gone, When " +
      "oats cleanup runs, Then the dead dispatcher's copy is removed and a " +
      "live one is kept",
    async () => {
      const f = await fixture({ files: { "bin/run": { body: script, mode: 0o755 } }, entry: "bin/run" });
      const live = await resolveQueuedCapture(f.scope, f.job, { env: {} });
      const orphan = await resolveQueuedCapture(f.scope, f.job, { env: {} });
      const gone = spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], {
        encoding: "utf8",
      });
      const dead = join(dirname(orphan.run.dir), `.staging-${hostTag()}-${gone.stdout}-${"0".repeat(12)}`);
      renameSync(orphan.run.dir, dead);
      const report = await cleanupStaging(f.scope);
      assert.deepEqual(report.removed, [dead]);
      assert.ok(report.active.includes(live.run.dir));
      assert.equal(existsSync(live.run.dir), true);
      await discardDispatchPlan(live);
    },
  );

  for (const unsafe of [
    { name: "a group/other-writable directory (mode 0777, not sticky)", make: (dir: string) => chmodSync(dir, 0o777) },
    { name: "a directory owned by another user (nobody)", make: (dir: string) => chownSync(dir, 65534, 65534) },
  ]) {
    test(
      `Given a scope below ${unsafe.name}, When dispatched, Then ` +
        `invalid-artifact-store run-root-unsafe, audited, nothing runs and no ` +
        `copy is made`,
      async (t) => {
        if (process.geteuid?.() !== 0) return t.skip("needs root to give a directory to another user");
        const parent = tempDir("oats-unsafe-");
        const open = join(parent, "open");
        mkdirSync(open);
        const marker = join(parent, "marker");
        const f = await fixture({
          files: { "bin/run": { body: '#!/bin/sh\ntouch "$1"\n', mode: 0o755 } },
          entry: "bin/run",
          args: [marker],
          parent: open,
        });
        unsafe.make(open);
        await assert.rejects(
          resolveQueuedCapture(f.scope, f.job, { env: {} }),
          refusal("invalid-artifact-store", (error) => {
            assert.equal(error.details["reason"], "run-root-unsafe");
            assert.equal(error.details["path"], open);
          }),
        );
        assert.equal(existsSync(marker), false);
        assert.deepEqual(runCopies(f.scope), []);
        const last = auditEntries(f.scope).at(-1)!;
        assert.deepEqual(
          [last.action, last.outcome, (last.details["refusal"] as { code: string }).code],
          ["dispatch", "refused", "invalid-artifact-store"],
        );
      },
    );
  }
});

// ------------------------------------------------------------ the harness

describe("the harness label is audited on every dispatch", () => {
  const script = "#!/bin/sh\nexit 0\n";

  test(
    "Given the seed scenario (a sovereign-sounding label, a non-sovereign " +
      "principal, confidential work), When dispatched, Then " +
      "classification-refused, and the refusal entry records the label and the " +
      "mismatch, with a harness-label-mismatch security event",
    async () => {
      const f = await fixture({
        files: { "bin/run": { body: script, mode: 0o755 } },
        entry: "bin/run",
        principal: "non-sovereign",
      });
      await assert.rejects(
        resolveQueuedCapture(f.scope, f.job, { env: {}, harness: "sovereign-operator@vault" }),
        refusal("classification-refused"),
      );
      const entries = auditEntries(f.scope);
      const refused = entries.at(-1)!;
      assert.deepEqual([refused.action, refused.outcome], ["dispatch", "refused"]);
      assert.equal(refused.principal, currentPrincipal());
      assert.equal(refused.details["harness"], "sovereign-operator@vault");
      assert.equal(refused.details["harnessMismatch"], true);
      const events = entries.filter((entry) => entry.action === "security-event");
      assert.equal(events.length, 1);
      assert.deepEqual(events[0]!.details, {
        event: "harness-label-mismatch",
        harness: "sovereign-operator@vault",
        principal: currentPrincipal(),
      });
      assert.deepEqual({ ...events[0]!.subject }, { job: f.job, resolution: f.prepared.id });
      assert.deepEqual(runCopies(f.scope), []);
      assert.equal(verifyAudit(f.scope).ok, true);
    },
  );

  test(
    "Given an allowed dispatch, When labelled with the principal, another " +
      "label or none, Then each dispatch entry records the label and whether " +
      "it differs",
    async () => {
      const f = await fixture({ files: { "bin/run": { body: script, mode: 0o755 } }, entry: "bin/run" });
      for (const harness of [currentPrincipal(), "ci@elsewhere", undefined]) {
        const plan = await resolveQueuedCapture(f.scope, f.job, {
          env: {},
          ...(harness === undefined ? {} : { harness }),
        });
        await discardDispatchPlan(plan);
      }
      const dispatches = auditEntries(f.scope).filter((entry) => entry.action === "dispatch");
      assert.deepEqual(
        dispatches.map((entry) => [entry.outcome, entry.details["harness"], entry.details["harnessMismatch"]]),
        [
          ["ok", currentPrincipal(), false],
          ["ok", "ci@elsewhere", true],
          ["ok", null, false],
        ],
      );
      assert.equal(auditEntries(f.scope).filter((entry) => entry.action === "security-event").length, 1);
    },
  );

  test(
    "Given a refusal before the record is read (unknown job), When labelled, " +
      "Then the refusal still records the label",
    async () => {
      const f = await fixture({ files: { "bin/run": { body: script, mode: 0o755 } }, entry: "bin/run" });
      await assert.rejects(resolveQueuedCapture(f.scope, "no-such-job", { env: {}, harness: "ci@elsewhere" }));
      const last = auditEntries(f.scope).at(-1)!;
      assert.deepEqual(
        [last.action, last.outcome, last.details["harness"], last.details["harnessMismatch"]],
        ["dispatch", "refused", "ci@elsewhere", true],
      );
    },
  );
});
