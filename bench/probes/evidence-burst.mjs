// Row 14's two sides in one process, seven pairs: a child printing 200,000 short lines dispatched to /dev/null, then
// recorded as a run (wall ms, and the recorded side's CPU ms): node bench/probes/evidence-burst.mjs [null|ev]
import { mkdirSync, mkdtempSync, openSync, writeFileSync } from "node:fs";
import { join } from "node:path";
const oats = await import(new URL("../../dist/index.js", import.meta.url));
// A fresh path each run: the operator's private chain state remembers a scope by its path.
const work = mkdtempSync("/tmp/oats-evidence-burst-");
const scope = join(work, "scope");
const inputs = join(work, "inputs");
mkdirSync(scope, { recursive: true });
mkdirSync(join(inputs, "tool", "bin"), { recursive: true });
const LINES = 200_000;
writeFileSync(
  join(inputs, "tool", "bin", "run.mjs"),
  `const chunk = [];\nfor (let i = 0; i < ${LINES}; i++) { ` +
    `chunk.push(\`line \${i}\`); if (chunk.length === 1000) { ` +
    `process.stdout.write(chunk.join("\\n") + "\\n"); chunk.length = 0; } }\n`,
);
writeFileSync(
  join(inputs, "class.yaml"),
  "schemaVersion: 1\nwings: {bench: internal}\nrepos: {}\ndefaults: []\nfallback: confidential\nprincipals: {}\n",
);
writeFileSync(
  join(inputs, "spec.yaml"),
  `name: burst\nexecutable: {tree: ./tool, path: bin/run.mjs, args: ` +
    `[]}\ntarget: {wing: bench}\nclassification: ` +
    `internal\nclassificationConfig: ./class.yaml\nenv: {PATH: ` +
    `/usr/bin:/bin}\n${process.geteuid?.() === 0 ? "privileged: true\n" : ""}`,
);
const prepared = await oats.prepareCapture(scope, join(inputs, "spec.yaml"));
await oats.approve(scope, prepared.composition.subject, { reason: "probe" });
await oats.addJob(scope, { job: "burst", resolution: prepared.id });
const devNull = openSync("/dev/null", "w");
const only = process.argv[2];
for (let run = 0; run < 7; run++) {
  if (only !== "ev") {
    const t0 = performance.now();
    const plan = await oats.planQueuedRun(scope, "burst");
    await oats.runDispatchPlan(plan, { stdio: ["ignore", devNull, devNull] });
    console.log("null", (performance.now() - t0).toFixed(0));
  }
  if (only !== "null") {
    const cpu = process.cpuUsage();
    const t0 = performance.now();
    const plan = await oats.planQueuedRun(scope, "burst");
    const ran = await oats.runDispatchPlanWithEvidence(scope, plan, { output: "quiet" });
    const used = process.cpuUsage(cpu);
    console.log(
      "ev",
      (performance.now() - t0).toFixed(0),
      "cpu",
      ((used.user + used.system) / 1000).toFixed(0),
      "lines",
      ran.record.log.lines,
    );
  }
}
