// A kept retain timed after each kind of call (rows 24a-b: the bench's side order): node --expose-gc
// bench/probes/kept-order.mjs [tree]
const oats = await import(new URL("../../dist/retention/index.js", import.meta.url));
const { mkdtempSync, rmSync } = await import("node:fs");
const source = process.argv[2] ?? "/tmp/oats-bench/data/small";
const scope = mkdtempSync("/tmp/oats-seq-");
const first = await oats.retainTree(scope, { kind: "capture", key: "k", source });
const kept = () => oats.retainTree(scope, { kind: "capture", key: "k", source, expect: first.integrity });
const digest = () => oats.digestTree(source, ["oats.tree-exec.v1"]);
const { setParallelism } = await import(new URL("../../dist/retention/parallel/pool.js", import.meta.url));
const pre = {
  kept: kept,
  digest: digest,
  "digest one thread": async () => {
    setParallelism(1);
    try {
      await digest();
    } finally {
      setParallelism(null);
    }
  },
  "sleep 100": () => new Promise((r) => setTimeout(r, 100)),
  "both digests": async () => {
    await digest();
    await oats.digestTree(first.dir, ["oats.tree-exec.v1"]);
  },
  "bench order": async () => {
    await oats.digestTree(first.dir, ["oats.tree-exec.v1"]);
    await digest();
  },
  "spin 100": async () => {
    const t = performance.now();
    while (performance.now() - t < 100);
  },
};
const times = {};
for (let round = 0; round < 10; round++)
  for (const [name, before] of Object.entries(pre)) {
    await before();
    gc({ type: "minor" });
    const t = performance.now();
    await kept();
    (times[name] ??= []).push(performance.now() - t);
  }
for (const [name, list] of Object.entries(times)) {
  list.sort((a, b) => a - b);
  console.log(
    `kept after ${name}`.padEnd(32),
    "median",
    list[5].toFixed(0),
    "  ",
    list.map((x) => x.toFixed(0)).join(" "),
  );
}
rmSync(scope, { recursive: true, force: true });
