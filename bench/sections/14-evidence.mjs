import { closeSync, mkdirSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { WORK, addRow, interleave, median, oats, options, removeTree, timeRow } from "../lib.mjs";

// ---------------------------------------------------------------- 14. run evidence

const LINES = 200_000;

/** A prepared, approved, queued capture of `script` (bin/run.mjs, a Node program) in a fresh scope. */
async function captureScope(name, script) {
  // A fresh path each run: the operator's private chain state remembers a scope by its path.
  const scope = join(WORK, `${name}-scope-${process.pid}`);
  const inputs = join(WORK, `${name}-inputs`);
  removeTree(scope);
  removeTree(inputs);
  mkdirSync(scope, { recursive: true });
  mkdirSync(join(inputs, "tool", "bin"), { recursive: true });
  writeFileSync(join(inputs, "tool", "bin", "run.mjs"), script);
  writeFileSync(
    join(inputs, "class.yaml"),
    "schemaVersion: 1\nwings: {bench: internal}\nrepos: {}\ndefaults: []\nfallback: confidential\nprincipals: {}\n",
  );
  // As root, only a privileged composition may run (src/captures/privilege.ts).
  writeFileSync(
    join(inputs, "spec.yaml"),
    `name: ${name}\nexecutable: {tree: ./tool, path: bin/run.mjs, args: ` +
      `[]}\ntarget: {wing: bench}\nclassification: ` +
      `internal\nclassificationConfig: ./class.yaml\nenv: {PATH: ` +
      `/usr/bin:/bin}\n${process.geteuid?.() === 0 ? "privileged: true\n" : ""}`,
  );
  const prepared = await oats.prepareCapture(scope, join(inputs, "spec.yaml"));
  await oats.approve(scope, prepared.composition.subject, { reason: "bench" });
  await oats.addJob(scope, { job: `${name}-job`, resolution: prepared.id });
  return { scope, inputs, job: `${name}-job` };
}

/**
 * - 14: a child printing 200,000 short lines as fast as it can, dispatched as
 *   a recorded run (runDispatchPlanWithEvidence, quiet: every line decoded,
 *   cleaned, stamped, redacted and appended to the log, then sealed) vs the
 *   same dispatch with the child's output sent to /dev/null (runDispatchPlan).
 *   Goal: at most 1.5x.
 * - 14b: stamp latency: a child writes one line every 10 ms carrying its own
 *   write time (microseconds, wall clock); the 99th percentile of (stamp -
 *   write time) over 300 lines. Goal: under 20 ms.
 */
async function benchEvidence() {
  console.error(`\n[14] run evidence: capture cost and stamp latency`);
  const burst = await captureScope(
    "evidence-burst",
    `const chunk = [];\nfor (let i = 0; i < ${LINES}; i++) { ` +
      `chunk.push(\`line \${i}\`); if (chunk.length === 1000) { ` +
      `process.stdout.write(chunk.join("\\n") + "\\n"); chunk.length = 0; } }\n`,
  );
  const devNull = openSync("/dev/null", "w");
  const sides = [
    {
      name: "null",
      inProcess: true,
      run: async () => {
        const plan = await oats.planQueuedRun(burst.scope, burst.job);
        const ran = await oats.runDispatchPlan(plan, { stdio: ["ignore", devNull, devNull] });
        if (ran.code !== 0) throw new Error(`the burst child failed: ${ran.code}`);
      },
    },
    {
      name: "evidence",
      inProcess: true,
      run: async () => {
        const plan = await oats.planQueuedRun(burst.scope, burst.job);
        const ran = await oats.runDispatchPlanWithEvidence(burst.scope, plan, { output: "quiet" });
        if (ran.exitCode !== 0 || ran.record.log.lines !== LINES)
          throw new Error(`the burst run logged ${ran.record.log.lines} lines, exit ${ran.exitCode}`);
      },
    },
  ];
  const times = await interleave(sides, Math.max(3, Math.min(options.runs, 5)));
  closeSync(devNull);
  timeRow({
    id: "14",
    what:
      `dispatch --exec of a child printing ${LINES.toLocaleString("en")} short ` +
      `lines, recorded as a run (log, stamps, seal) vs its output to /dev/null`,
    oursMs: median(times.evidence),
    baseMs: median(times.null),
    goal: 1.5,
    baseExtra: " /dev/null",
  });

  const ticks = await captureScope(
    "evidence-latency",
    "let n = 0;\nconst tick = () => { const us = " +
      "Math.round((performance.timeOrigin + performance.now()) * 1000); " +
      "process.stdout.write(`${us}\\n`); if (++n < 300) setTimeout(tick, 10); " +
      "};\ntick();\n",
  );
  const plan = await oats.planQueuedRun(ticks.scope, ticks.job);
  const ran = await oats.runDispatchPlanWithEvidence(ticks.scope, plan, { output: "quiet" });
  const lines = oats.readRun(ticks.scope, ran.runId).lines;
  const latencies = lines.map((line) => (oats.parseStamp(line.at) - Number(line.text)) / 1000).sort((a, b) => a - b);
  const p99 = latencies[Math.min(latencies.length - 1, Math.ceil(latencies.length * 0.99) - 1)];
  addRow({
    id: "14b",
    what:
      `stamp latency: p99 of (stamp - write time) for a child writing one line ` +
      `every 10 ms (${latencies.length} lines; median ` +
      `${median(latencies).toFixed(2)} ms)`,
    headline: true,
    ours: `${p99.toFixed(2)} ms`,
    baseline: "-",
    ratio: "-",
    goal: "< 20 ms",
    pass: p99 < 20,
  });
  for (const dir of [burst.scope, burst.inputs, ticks.scope, ticks.inputs]) removeTree(dir);
}

export const parts = { evidence: benchEvidence };
