import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CAPTURE,
  WORK,
  dataset,
  interleave,
  median,
  oats,
  options,
  removeTree,
  run,
  timeRow,
  verifyTree,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 8. capture dispatch

/**
 * Dispatch of a capture whose executable tree has CAPTURE.files files,
 * against verifyTree of that tree alone. Dispatch verifies the executable by
 * copying it, hashed as it is read, into a private run directory
 * (src/captures/run-copy.ts), so both rows include that copy:
 *
 * - 8: the plan only, as `oats dispatch` without --exec does it:
 *   resolveQueuedCapture, then discardDispatchPlan (the copy removed);
 * - 8b: as `oats dispatch --exec` does it: resolveQueuedCapture, then
 *   runDispatchPlan of the trivial entry point (`#!/bin/sh`, echo), which
 *   runs it from the copy and removes the copy when it exits.
 *
 * Dispatch also reads the job and record, the ledger, the pinned blobs and
 * the current config, and appends one fsync'd audit entry.
 *
 * - 8c (info): `cp -a` of the same tree into the scope's filesystem (and
 *   `rm -rf` of the copy), the floor of any private copy there: creating
 *   CAPTURE.files inodes, which verifyTree never does.
 */
async function benchDispatch() {
  console.error(
    `\n[8] dispatch of a queued capture (${CAPTURE.files}-file executable tree) vs verifying that tree alone`,
  );
  const tree = dataset("capture");
  const scope = join(WORK, "dispatch-scope");
  const inputs = join(WORK, "dispatch-inputs");
  removeTree(scope);
  removeTree(inputs);
  mkdirSync(scope, { recursive: true });
  mkdirSync(inputs, { recursive: true });
  writeFileSync(
    join(inputs, "class.yaml"),
    "schemaVersion: 1\nwings: {bench: internal}\nrepos: {}\ndefaults: []\nfallback: confidential\nprincipals: {}\n",
  );
  // As root, only a privileged composition may run (src/captures/privilege.ts).
  writeFileSync(
    join(inputs, "spec.yaml"),
    `name: bench-capture\nexecutable: {tree: ${JSON.stringify(tree)}, path: ` +
      `bin/run, args: [--bench]}\ntarget: {wing: bench}\nclassification: ` +
      `internal\nclassificationConfig: ./class.yaml\nenv: {PATH: ` +
      `/usr/bin:/bin}\ncredentials: ` +
      `[BENCH_TOKEN]\n${process.geteuid?.() === 0 ? "privileged: true\n" : ""}`,
  );
  const prepared = await oats.prepareCapture(scope, join(inputs, "spec.yaml"));
  await oats.approve(scope, prepared.composition.subject, { reason: "bench" });
  await oats.addJob(scope, { job: "bench-job", resolution: prepared.id });
  const ref = { kind: prepared.subject.kind, key: prepared.subject.key, integrity: prepared.subject.integrity };
  warm(join(scope, ".agents"));
  const sides = [
    { name: "verify", inProcess: true, run: async () => void (await verifyTree(scope, ref)) },
    {
      name: "dispatch",
      inProcess: true,
      run: async () => {
        const plan = await oats.resolveQueuedCapture(scope, "bench-job", { env: { BENCH_TOKEN: "bench-token" } });
        await oats.discardDispatchPlan(plan);
        if (plan.verified.length !== 1 || plan.executable.subject.integrity !== prepared.subject.integrity)
          throw new Error("dispatch did not verify the executable tree");
      },
    },
    {
      name: "exec",
      inProcess: true,
      run: async () => {
        const plan = await oats.resolveQueuedCapture(scope, "bench-job", { env: { BENCH_TOKEN: "bench-token" } });
        const ran = await oats.runDispatchPlan(plan, { stdio: "pipe" });
        if (ran.code !== 0 || ran.stdout !== "captured\n")
          throw new Error(`the dispatched entry point failed: ${ran.code} ${ran.stderr}`);
      },
    },
  ];
  const cpTarget = join(scope, "cp-a-copy");
  sides.push({
    name: "cp",
    inProcess: false,
    run: async () => {
      await run("cp", ["-a", tree, cpTarget]);
      await run("rm", ["-rf", cpTarget]);
    },
  });
  const times = await interleave(sides, Math.max(options.runs, 9));
  timeRow({
    id: "8",
    what:
      `dispatch plan (resolveQueuedCapture + discardDispatchPlan, private copy ` +
      `included) of a ${CAPTURE.files}-file capture vs verifyTree of that tree alone`,
    oursMs: median(times.dispatch),
    baseMs: median(times.verify),
    goal: 1.5,
    baseExtra: " verify",
  });
  timeRow({
    id: "8b",
    what:
      `dispatch --exec (plan, run a trivial entry from the private copy, ` +
      `remove it) of a ${CAPTURE.files}-file capture vs verifyTree of that ` +
      `tree alone`,
    oursMs: median(times.exec),
    baseMs: median(times.verify),
    goal: 1.5,
    baseExtra: " verify",
  });
  timeRow({
    id: "8c",
    what:
      `cp -a + rm -rf of the same ${CAPTURE.files}-file tree on the scope's ` +
      `filesystem (the floor of a private copy) vs verifyTree (info)`,
    oursMs: median(times.cp),
    baseMs: median(times.verify),
    goal: null,
    baseExtra: " verify",
  });
  const copies = join(scope, ".agents", "run-copies");
  if (existsSync(copies) && readdirSync(copies).some((name) => name !== ".gitignore"))
    throw new Error("the dispatch bench left a run copy behind");
  const verdict = oats.verifyAudit(scope);
  if (!verdict.ok) throw new Error(`audit chain broken after the dispatch bench: ${JSON.stringify(verdict.brokenAt)}`);
  removeTree(scope);
  removeTree(inputs);
}

export const parts = { dispatch: benchDispatch };
