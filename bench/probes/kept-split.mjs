// A kept retain against digestTree split over both cores and on one thread (a worker held), in a loop (rows 24a,
// 24g): node bench/probes/kept-split.mjs [tree]
const oats = await import(new URL("../../dist/retention/index.js", import.meta.url));
const { acquireWorker, releaseWorker } = await import(
  new URL("../../dist/retention/parallel/pool.js", import.meta.url)
);
const { mkdtempSync, rmSync } = await import("node:fs");
const source = process.argv[2] ?? "/tmp/oats-bench/data/small";
const scope = mkdtempSync("/tmp/oats-kept-split-");
const first = await oats.retainTree(scope, { kind: "capture", key: "k", source });
const runs = 15;
const median = async (name, fn) => {
  const times = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    await fn();
    times.push(performance.now() - started);
  }
  times.sort((a, b) => a - b);
  console.log(name, "median", times[runs >> 1].toFixed(0), "ms");
};
for (let pass = 0; pass < 2; pass++) {
  await median("digest (split)", () => oats.digestTree(source, ["oats.tree-exec.v1"]));
  const worker = acquireWorker();
  await median("digest on one thread (a worker held)", () => oats.digestTree(source, ["oats.tree-exec.v1"]));
  await releaseWorker(worker);
  await median("kept --expect", () =>
    oats.retainTree(scope, { kind: "capture", key: "k", source, expect: first.integrity }),
  );
}
rmSync(scope, { recursive: true, force: true });
