// What a collection before each timed run does to a kept retain and a digest of the 20k-file tree
// (bench/lib.mjs, interleave):
//   node --expose-gc bench/probes/forced-gc.mjs [tree]
// Add --trace-opt and count "completed compiling" lines between the "==" markers to see the recompiles a forced full
// one causes.
const oats = await import(new URL("../../dist/retention/index.js", import.meta.url));
const { mkdtempSync, rmSync } = await import("node:fs");
const source = process.argv[2] ?? "/tmp/oats-bench/data/small";
const scope = mkdtempSync("/tmp/oats-forced-gc-");
const first = await oats.retainTree(scope, { kind: "capture", key: "k", source });
const before = { none: () => {}, minor: () => gc({ type: "minor" }), full: () => gc() };
const ops = {
  digest: () => oats.digestTree(source, ["oats.tree-exec.v1"]),
  kept: () => oats.retainTree(scope, { kind: "capture", key: "k", source, expect: first.integrity }),
};
const times = {};
for (let round = 0; round < 12; round++) {
  for (const [op, run] of Object.entries(ops)) {
    for (const [collection, collect] of Object.entries(before)) {
      collect();
      console.log(`== ${op} after ${collection}`);
      const started = performance.now();
      await run();
      (times[`${op} after ${collection}`] ??= []).push(performance.now() - started);
    }
  }
}
for (const [name, list] of Object.entries(times)) {
  list.sort((a, b) => a - b);
  console.log(name.padEnd(20), "median", list[list.length >> 1].toFixed(0), "ms");
}
rmSync(scope, { recursive: true, force: true });
