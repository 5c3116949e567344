// A digest on this thread and one in a pool worker, alone and at once (the two reads of a kept retain): node
// bench/probes/two-reads.mjs [tree]
const { retainTree, digestTree } = await import(new URL("../../dist/index.js", import.meta.url));
const { acquireWorker, releaseWorker } = await import(
  new URL("../../dist/retention/parallel/pool.js", import.meta.url)
);
const { rmSync, mkdtempSync } = await import("node:fs");
const src = process.argv[2] ?? "/tmp/oats-bench/data/small";
const scope = mkdtempSync("/tmp/oats-two-reads-");

const r = await retainTree(scope, { kind: "capture", key: "s", source: src });
const w = acquireWorker();
const job = { dir: r.dir, formats: ["oats.tree-exec.v1"] };
await w.measure(job);
await digestTree(src);
for (let i = 0; i < 5; i++) {
  let t = performance.now();
  await digestTree(src);
  const alone = performance.now() - t;
  t = performance.now();
  await w.measure(job);
  const walone = performance.now() - t;
  t = performance.now();
  const p = w.measure(job).then(() => performance.now() - t);
  const q = digestTree(src).then(() => performance.now() - t);
  const [wp, mp] = await Promise.all([p, q]);
  console.log(
    "main alone",
    alone.toFixed(0),
    "worker alone",
    walone.toFixed(0),
    "both: main",
    mp.toFixed(0),
    "worker",
    wp.toFixed(0),
  );
}
await releaseWorker(w);
rmSync(scope, { recursive: true, force: true });
