import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  REPO,
  WORK,
  addRow,
  dataset,
  interleave,
  median,
  removeTree,
  retainTree,
  run,
  settle,
  timeRow,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 21. first retain of 20,000 small files, and its
// peak RSS

const PIPELINE = "find . -type f | sort | xargs sha256sum > /dev/null";

/**
 * retainTree of the `small` data set into a fresh scope against `cp -a` +
 * `sync -f` + the shell's pipeline digest of the copy (goal: at most
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
          const receipt = await retainTree(join(scopes, `scope-${round + 1}`), {
            kind: "capture",
            key: "small",
            source,
          });
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
  timeRow({
    id: "25",
    what: "retainTree 20k small files vs cp -a + sync -f + find|sort|xargs sha256sum",
    oursMs: median(times.oats),
    baseMs: median(times.baseline),
    goal: 1.5,
  });

  // Peak RSS of a program that imports the library by its package name and
  // retains the tree, in a child process (cwd: this package, so the name
  // resolves to it as it would from a user's node_modules). 25b imports the
  // retention entry, `oats-retention/retention`, which is what a program
  // that only retains and verifies needs; 25c (info) the root entry, which
  // also loads resolution, captures, evidence and fleet and their zod
  // schemas. The source is warmed first; the child reports its block reads,
  // so a run the page cache did not serve (which starts the read-ahead
  // workers, prefetch.ts) shows as such.
  const empty = existsSync("/usr/bin/time")
    ? Number(
        (await run("/usr/bin/time", ["-f", "maxrss-kib=%M", process.execPath, "-e", "0"])).stderr.match(
          /maxrss-kib=(\d+)/,
        )?.[1],
      )
    : NaN;
  const peak = async (specifier, name) => {
    const scope = join(scopes, name);
    mkdirSync(scope);
    warm(source);
    await settle();
    const script = [
      `const { retainTree } = await import(${JSON.stringify(specifier)});`,
      `const receipt = await retainTree(${JSON.stringify(scope)}, { kind: ` +
        `"capture", key: "small", source: ${JSON.stringify(source)} });`,
      `const usage = process.resourceUsage();`,
      `console.log(JSON.stringify({ status: receipt.status, maxRSS: usage.maxRSS, blockReads: usage.fsRead }));`,
    ].join("\n");
    const viaTime = existsSync("/usr/bin/time");
    const child = viaTime
      ? await run("/usr/bin/time", ["-f", "maxrss-kib=%M", process.execPath, "--input-type=module", "-e", script], {
          cwd: REPO,
        })
      : await run(process.execPath, ["--input-type=module", "-e", script], { cwd: REPO });
    const report = JSON.parse(child.stdout.trim().split("\n").pop());
    if (report.status !== "retained") throw new Error(`expected a fresh retain, got ${report.status}`);
    const kib = Number(child.stderr.match(/maxrss-kib=(\d+)/)?.[1] ?? report.maxRSS);
    return { kib, blockReads: report.blockReads };
  };
  const light = await peak("oats-retention/retention", "rss-retention");
  const root = await peak("oats-retention", "rss-root");
  const baseline = `node -e 0: ${(empty / 1024).toFixed(1)} MiB`;
  addRow({
    id: "25b",
    what:
      `peak RSS, retainTree of 20k small files (child process, import ` +
      `"oats-retention/retention"; ${light.blockReads} block reads)`,
    headline: true,
    ours: `${(light.kib / 1024).toFixed(1)} MiB`,
    baseline,
    ratio: "-",
    goal: "<= 100 MiB",
    pass: light.kib <= 100 * 1024,
  });
  addRow({
    id: "25c",
    what: `same, import "oats-retention" (the root entry; ${root.blockReads} block reads) (info)`,
    headline: false,
    ours: `${(root.kib / 1024).toFixed(1)} MiB`,
    baseline,
    ratio: "-",
    goal: "-",
  });
  for (const dir of [scopes, copies]) removeTree(dir);
  await settle();
}

export const parts = { "retain-small": benchRetainSmall };
