import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CAPTURE, WORK, dataset, interleave, median, oats, options, removeTree, run, timeRow, verifyTree, warm } from "../lib.mjs";

// ---------------------------------------------------------------- 8. capture dispatch

/**
 * resolveQueuedCapture (without --exec) of a capture whose executable tree has
 * CAPTURE.files files, against verifyTree of that tree alone. Dispatch adds
 * reading the job and record, the ledger, the pinned blobs, the current
 * config, the entry point, and one fsync'd audit append.
 */
async function benchDispatch() {
  console.error(`\n[8] dispatch of a queued capture (${CAPTURE.files}-file executable tree) vs verifying that tree alone`);
  const tree = dataset("capture");
  const scope = join(WORK, "dispatch-scope");
  const inputs = join(WORK, "dispatch-inputs");
  removeTree(scope);
  removeTree(inputs);
  mkdirSync(scope, { recursive: true });
  mkdirSync(inputs, { recursive: true });
  writeFileSync(join(inputs, "class.yaml"), "schemaVersion: 1\nwings: {bench: internal}\nrepos: {}\ndefaults: []\nfallback: confidential\nprincipals: {}\n");
  writeFileSync(
    join(inputs, "spec.yaml"),
    `name: bench-capture\nexecutable: {tree: ${JSON.stringify(tree)}, path: bin/run, args: [--bench]}\ntarget: {wing: bench}\nclassification: internal\nclassificationConfig: ./class.yaml\nenv: {PATH: /usr/bin:/bin}\ncredentials: [BENCH_TOKEN]\n`,
  );
  const prepared = await oats.prepareCapture(scope, join(inputs, "spec.yaml"));
  await oats.approve(scope, prepared.subject, { reason: "bench" });
  await oats.addJob(scope, { job: "bench-job", resolution: prepared.id });
  const ref = { kind: prepared.subject.kind, key: prepared.subject.key, integrity: prepared.subject.integrity };
  warm(join(scope, ".agents"));
  const sides = [
    { name: "verify", inProcess: true, run: async () => void (await verifyTree(scope, ref)) },
    {
      name: "dispatch",
      inProcess: true,
      run: async () => {
        const plan = await oats.resolveQueuedCapture(scope, "bench-job", { env: { BENCH_TOKEN: "x" } });
        if (plan.verified.length !== 1 || plan.executable.subject.integrity !== prepared.subject.integrity) throw new Error("dispatch did not verify the executable tree");
      },
    },
  ];
  const times = await interleave(sides, Math.max(options.runs, 9));
  timeRow({
    id: "8",
    what: `resolveQueuedCapture (no --exec) of a ${CAPTURE.files}-file capture vs verifyTree of that tree alone`,
    oursMs: median(times.dispatch),
    baseMs: median(times.verify),
    goal: 1.2,
    baseExtra: " verify",
  });
  const verdict = oats.verifyAudit(scope);
  if (!verdict.ok) throw new Error(`audit chain broken after the dispatch bench: ${JSON.stringify(verdict.brokenAt)}`);
  removeTree(scope);
  removeTree(inputs);
}

export const parts = { dispatch: benchDispatch };
