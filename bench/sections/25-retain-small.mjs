import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { DIST, WORK, addRow, dataset, interleave, median, removeTree, retainTree, run, settle, timeRow, warm } from "../lib.mjs";

// ---------------------------------------------------------------- 21. first retain of 20,000 small files, and its peak RSS

const PIPELINE = "find . -type f | sort | xargs sha256sum > /dev/null";

/**
 * retainTree of the `small` data set into a fresh scope against `cp -a` +
 * `sync -f` + the shell's pipeline digest of the copy (issue 13: at most
 * 1.5x), then the peak RSS of the same retain in a child process (at most
 * 100 MiB).
 */
async function benchRetainSmall() {
  console.error("\n[21] retainTree 20k small files vs cp -a + sync -f + find|sort|xargs sha256sum; peak RSS");
  const source = dataset("small");
  warm(source);
  const scopes = join(WORK, "retain-small-scopes");
  const copies = join(WORK, "retain-small-copies");
  for (const dir of [scopes, copies]) {
    removeTree(dir);
    mkdirSync(dir, { recursive: true });
  }
  const times = await interleave(
    [
      {
        name: "oats",
        inProcess: true,
        prepare: async (round) => {
          mkdirSync(join(scopes, `scope-${round + 1}`));
          await settle();
        },
        run: async (round) => {
          const receipt = await retainTree(join(scopes, `scope-${round + 1}`), { kind: "capture", key: "small", source });
          if (receipt.status !== "retained") throw new Error(`expected a fresh retain, got ${receipt.status}`);
        },
      },
      {
        name: "baseline",
        prepare: settle,
        run: async (round) => {
          const copy = join(copies, `copy-${round + 1}`);
          await run("cp", ["-a", source, copy], { capture: false });
          await run("sync", ["-f", copy], { capture: false });
          await run("sh", ["-c", PIPELINE], { cwd: copy, capture: false });
        },
      },
    ],
    3,
  );
  timeRow({ id: "25", what: "retainTree 20k small files vs cp -a + sync -f + find|sort|xargs sha256sum", oursMs: median(times.oats), baseMs: median(times.baseline), goal: 1.5 });

  const scope = join(scopes, "rss");
  mkdirSync(scope);
  await settle();
  const script = [
    `const { retainTree } = await import(${JSON.stringify(join(DIST, "index.js"))});`,
    `const receipt = await retainTree(${JSON.stringify(scope)}, { kind: "capture", key: "small", source: ${JSON.stringify(source)} });`,
    `console.log(JSON.stringify({ status: receipt.status, maxRSS: process.resourceUsage().maxRSS }));`,
  ].join("\n");
  const viaTime = existsSync("/usr/bin/time");
  const child = viaTime
    ? await run("/usr/bin/time", ["-f", "maxrss-kib=%M", process.execPath, "--input-type=module", "-e", script])
    : await run(process.execPath, ["--input-type=module", "-e", script]);
  const kib = Number(child.stderr.match(/maxrss-kib=(\d+)/)?.[1] ?? child.stdout.match(/"maxRSS":(\d+)/)?.[1] ?? NaN);
  const empty = viaTime ? Number((await run("/usr/bin/time", ["-f", "maxrss-kib=%M", process.execPath, "-e", "0"])).stderr.match(/maxrss-kib=(\d+)/)?.[1]) : NaN;
  addRow({
    id: "25b",
    what: "peak RSS, retainTree of 20k small files (library in a child process)",
    headline: true,
    ours: `${(kib / 1024).toFixed(1)} MiB`,
    baseline: `node -e 0: ${(empty / 1024).toFixed(1)} MiB`,
    ratio: "-",
    goal: "<= 100 MiB",
    pass: kib <= 100 * 1024,
  });
  for (const dir of [scopes, copies]) removeTree(dir);
  await settle();
}

export const parts = { "retain-small": benchRetainSmall };
