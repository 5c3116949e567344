import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  CLI,
  DIST,
  TREE_EXEC,
  WORK,
  cliWorks,
  dataset,
  digestTree,
  interleave,
  median,
  notes,
  options,
  removeTree,
  retainTree,
  run,
  timeRow,
  warm,
} from "../lib.mjs";

const { acquireWorker, releaseWorker } = await import(join(DIST, "retention", "parallel", "pool.js"));

// ---------------------------------------------------------------- 20. retain of an unchanged, already retained tree

/**
 * retainTree of a tree that is already retained (status `kept`), with and
 * without `expect`, against digestTree of the same tree, both in process.
 * The kept retain still reads the whole source and verifies the whole stored
 * revision; the goal is that the two reads share the two cores.
 */
async function benchKept(name, ids, runs) {
  const label = name === "small" ? "20k small files" : "8 x 128 MiB";
  console.error(`\n[${ids[0]}, ${ids[1]}] retain again of the unchanged ${label} (kept) vs digestTree of it`);
  const source = dataset(name);
  const scope = join(WORK, `kept-${name}`);
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  const first = await retainTree(scope, { kind: "capture", key: `kept-${name}`, source });
  warm(source);
  warm(first.dir);
  const kept = (expect) => async () => {
    const receipt = await retainTree(scope, {
      kind: "capture",
      key: `kept-${name}`,
      source,
      ...(expect ? { expect: first.integrity } : {}),
    });
    if (receipt.status !== "kept") notes.push(`[${ids[0]}] expected kept, got ${receipt.status}`);
  };
  const times = await interleave(
    [
      { name: "digest", inProcess: true, run: () => digestTree(source, [TREE_EXEC]) },
      { name: "kept --expect", inProcess: true, run: kept(true) },
      { name: "kept", inProcess: true, run: kept(false) },
      // The read each of the kept retain's two lanes makes: digestTree while a worker is held reads on one thread, as
      // a lane
      // does (busy.ts), where digestTree alone splits its small-file reads over both cores.
      {
        name: "digest, one lane",
        inProcess: true,
        run: async () => {
          const worker = acquireWorker();
          try {
            await digestTree(source, [TREE_EXEC]);
          } finally {
            await releaseWorker(worker);
          }
        },
      },
      // The same two reads a kept retain makes, one after the other: what sharing the cores buys.
      {
        name: "both digests",
        inProcess: true,
        run: async () => {
          await digestTree(source, [TREE_EXEC]);
          await digestTree(first.dir, [TREE_EXEC]);
        },
      },
    ],
    runs,
  );
  removeTree(scope);
  const base = median(times.digest);
  timeRow({
    id: ids[0],
    what: `retain again, unchanged ${label}, with expect (kept: source read + stored copy verified) vs digestTree`,
    oursMs: median(times["kept --expect"]),
    baseMs: base,
    goal: 1.2,
    baseExtra: " digest",
  });
  timeRow({
    id: ids[1],
    what: `retain again, unchanged ${label}, without expect (kept) vs digestTree`,
    oursMs: median(times.kept),
    baseMs: base,
    goal: 1.2,
    baseExtra: " digest",
  });
  timeRow({
    id: ids[2],
    what:
      `same, kept with expect vs digestTree of the source and then of the ` +
      `stored copy (the same two reads, one after the other) (info)`,
    oursMs: median(times["kept --expect"]),
    baseMs: median(times["both digests"]),
    goal: null,
    headline: false,
    baseExtra: " two digests",
  });
  timeRow({
    id: ids[3],
    what:
      `same, kept with expect vs digestTree on one thread, the read each of ` +
      `the kept retain's two lanes makes (info)`,
    oursMs: median(times["kept --expect"]),
    baseMs: median(times["digest, one lane"]),
    goal: null,
    headline: false,
    baseExtra: " one lane",
  });
}

/**
 * The same comparison as a user meets it: `oats retain` of the retained,
 * unchanged tree against `oats digest` of it, each a fresh process. Both
 * pay node's start and a cold JIT; the kept retain also starts its worker
 * and compiles the walk and the hash a second time, in that worker's
 * isolate, on the same two cores (docs/design/performance.md, "Kept retains").
 */
async function benchKeptCli(name, id) {
  const label = name === "small" ? "20k small files" : "8 x 128 MiB";
  const source = dataset(name);
  if (!(await cliWorks(id, ["digest", source]))) return;
  console.error(`\n[${id}] CLI: oats retain of the unchanged ${label} (kept) vs oats digest of it`);
  const scope = join(WORK, `kept-cli-${name}`);
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  const first = await retainTree(scope, { kind: "capture", key: `kept-${name}`, source });
  const integrity = `${first.integrity.format}:${first.integrity.value}`;
  const retain = (expect) => [
    "retain",
    "--scope",
    scope,
    "--kind",
    "capture",
    "--id",
    `kept-${name}`,
    ...(expect ? ["--expect", integrity] : []),
    source,
  ];
  const probe = await run(process.execPath, [CLI, ...retain(true)], { allowFail: true });
  if (probe.code !== 0 || !/kept/.test(probe.stdout)) {
    notes.push(
      `[${id}] \`oats retain --expect\` of the retained tree did not report ` +
        `kept (exit ${probe.code}): ${probe.stdout.trim().slice(0, 160)} ` +
        `${probe.stderr.trim().slice(0, 160)}`,
    );
    removeTree(scope);
    return;
  }
  warm(source);
  warm(first.dir);
  const times = await interleave(
    [
      { name: "digest", run: () => run(process.execPath, [CLI, "digest", source], { capture: false }) },
      { name: "kept --expect", run: () => run(process.execPath, [CLI, ...retain(true)], { capture: false }) },
      { name: "kept", run: () => run(process.execPath, [CLI, ...retain(false)], { capture: false }) },
    ],
    options.runs,
  );
  removeTree(scope);
  const base = median(times.digest);
  timeRow({
    id,
    what:
      `same, CLI: \`oats retain --expect\` of the unchanged ${label} (kept) vs ` +
      `\`oats digest\` of it, fresh processes (info)`,
    oursMs: median(times["kept --expect"]),
    baseMs: base,
    goal: null,
    headline: false,
    baseExtra: " CLI digest",
  });
  timeRow({
    id: `${id}b`,
    what: `same, CLI, without --expect (info)`,
    oursMs: median(times.kept),
    baseMs: base,
    goal: null,
    headline: false,
    baseExtra: " CLI digest",
  });
}

export const parts = {
  kept: async () => {
    // Nine rounds for the small tree: its sides take about 100 ms, where three rounds moved the median by tens
    // of percent.
    await benchKept("small", ["24a", "24b", "24e", "24g"], 9);
    await benchKeptCli("small", "24i");
    await benchKept("big", ["24c", "24d", "24f", "24h"], 3);
  },
};
