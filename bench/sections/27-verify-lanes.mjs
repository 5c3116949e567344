import { linkSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  DIST,
  WORK,
  dataset,
  interleave,
  median,
  notes,
  oats,
  removeTree,
  retainTree,
  timeRow,
  verifyTree,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 23. verifying several revisions on every core

const REVISIONS = 8;
const { setParallelism, parallelism } = await import(join(DIST, "retention", "parallel", "pool.js"));

/**
 * fsckScope of a scope holding 8 revisions (each one 128 MiB file of the
 * `big` data set) against verifyTree of the 8 one after the other, in
 * process. The goal: at most 0.6x on 2 cores. An info row gives
 * the CPU time of both sides (process.cpuUsage counts every thread), which
 * says whether the cores were there to be used.
 */
async function benchLanes() {
  console.error(`\n[23] fsckScope of ${REVISIONS} revisions (lanes: ${parallelism()}) vs verifyTree of each in turn`);
  if (typeof oats.fsckScope !== "function") {
    notes.push("[23] fsckScope is not built");
    return;
  }
  const big = dataset("big");
  const scope = join(WORK, "lanes-scope");
  const sources = join(WORK, "lanes-sources");
  removeTree(scope);
  removeTree(sources);
  mkdirSync(scope, { recursive: true });
  const refs = [];
  for (let i = 0; i < REVISIONS; i++) {
    const source = join(sources, `rev-${i}`);
    mkdirSync(source, { recursive: true });
    linkSync(join(big, `blob-${i}.bin`), join(source, "blob.bin"));
    const receipt = await retainTree(scope, { kind: "capture", key: `lane-${i}`, source });
    refs.push({ kind: "capture", key: `lane-${i}`, integrity: receipt.integrity });
    warm(receipt.dir);
  }
  const cpu = { fsck: [], sequential: [] };
  const timed = (name, body) => async () => {
    const before = process.cpuUsage();
    await body();
    const used = process.cpuUsage(before);
    cpu[name].push((used.user + used.system) / 1000);
  };
  const times = await interleave(
    [
      {
        name: "fsck",
        inProcess: true,
        run: timed("fsck", async () => {
          const report = await oats.fsckScope(scope);
          if (report.counts.revisions !== REVISIONS || !report.ok)
            notes.push(`[23] fsck found ${report.counts.revisions} revisions, ok ${report.ok}`);
        }),
      },
      {
        name: "sequential",
        inProcess: true,
        run: timed("sequential", async () => {
          for (const ref of refs) await verifyTree(scope, ref);
        }),
      },
    ],
    3,
  );
  removeTree(scope);
  removeTree(sources);
  timeRow({
    id: "27",
    what:
      `fsckScope of ${REVISIONS} x 128 MiB revisions (worker lanes: ` +
      `${parallelism()}) vs verifyTree of each in turn`,
    oursMs: median(times.fsck),
    baseMs: median(times.sequential),
    goal: 0.6,
    baseExtra: " in turn",
  });
  timeRow({
    id: "27b",
    what: "same, CPU time of the process (all threads) (info)",
    oursMs: median(cpu.fsck),
    baseMs: median(cpu.sequential),
    goal: null,
    headline: false,
    oursExtra: " CPU",
    baseExtra: " CPU",
  });
  setParallelism(null);
}

export const parts = { lanes: benchLanes };
