import { existsSync } from "node:fs";
import { join } from "node:path";
import {
  CLI,
  DIST,
  GiB,
  TREE_EXEC,
  addRow,
  cliWorks,
  dataset,
  fmtRate,
  interleave,
  median,
  missingRow,
  notes,
  run,
  timeRow,
  warm,
} from "../lib.mjs";
import { extraCaCerts, runEnv } from "../tools.mjs";

// ---------------------------------------------------------------- 4. peak RSS on a 2 GiB file

async function peakRss(file, args) {
  const viaTime = existsSync("/usr/bin/time");
  const result = viaTime ? await run("/usr/bin/time", ["-f", "maxrss-kib=%M", file, ...args]) : await run(file, args);
  const fromTime = result.stderr.match(/maxrss-kib=(\d+)/);
  const fromChild = result.stdout.match(/"maxRSS":(\d+)/);
  const kib = fromTime ? Number(fromTime[1]) : fromChild ? Number(fromChild[1]) : NaN;
  return { kib, ms: result.ms, stdout: result.stdout };
}

async function benchRss() {
  console.error("\n[4] peak RSS while digesting one 2 GiB file");
  const dir = dataset("huge");
  warm(dir);
  const script = [
    `const { digestTree } = await import(${JSON.stringify(join(DIST, "retention", "digest", "tree.js"))});`,
    `const digests = await digestTree(${JSON.stringify(dir)}, [${JSON.stringify(TREE_EXEC)}]);`,
    `console.log(JSON.stringify({ digest: ` +
      `digests[${JSON.stringify(TREE_EXEC)}], maxRSS: ` +
      `process.resourceUsage().maxRSS }));`,
  ].join("\n");
  const empty = await peakRss(process.execPath, ["-e", "0"]);
  const library = await peakRss(process.execPath, ["--input-type=module", "-e", script]);
  const goal = 150 * 1024;
  const show = (kib) => `${(kib / 1024).toFixed(1)} MiB`;
  addRow({
    id: "4",
    what: "peak RSS, digest of one 2 GiB file (library in a child process)",
    headline: true,
    ours: `${show(library.kib)} (${fmtRate(2 * GiB, library.ms)})`,
    baseline: `node -e 0: ${show(empty.kib)}`,
    ratio: "-",
    goal: "<= 150 MiB",
    pass: library.kib <= goal,
  });
  if (await cliWorks("4", ["--version"])) {
    const cli = await peakRss(process.execPath, [CLI, "digest", dir]);
    addRow({
      id: "4b",
      what: "same, CLI `oats digest`",
      headline: false,
      ours: `${show(cli.kib)} (${fmtRate(2 * GiB, cli.ms)})`,
      baseline: `node -e 0: ${show(empty.kib)}`,
      ratio: "-",
      goal: "<= 150 MiB",
      pass: cli.kib <= goal,
    });
  }
}

// ---------------------------------------------------------------- 5. cold start

async function benchStart() {
  console.error("\n[5] `oats --version` cold start vs `node -e 0`");
  if (!(await cliWorks("5", ["--version"])))
    return missingRow("5", "`oats --version` cold start vs `node -e 0`", "<= 3x", "CLI not usable, see notes");
  const times = await interleave(
    [
      { name: "node", run: () => run(process.execPath, ["-e", "0"], { capture: false }) },
      { name: "oats", run: () => run(process.execPath, [CLI, "--version"], { capture: false }) },
    ],
    15,
  );
  timeRow({
    id: "5",
    what: "`oats --version` cold start vs `node -e 0` (15 runs each)",
    oursMs: median(times.oats),
    baseMs: median(times.node),
    goal: 3.0,
  });
  if (!extraCaCerts)
    return notes.push("[5b] NODE_EXTRA_CA_CERTS is not set: node parses no extra certificates at its start");
  const certs = await interleave(
    [
      { name: "with", run: () => runEnv(process.execPath, ["-e", "0"]) },
      { name: "without", run: () => runEnv(process.execPath, ["-e", "0"], { unset: ["NODE_EXTRA_CA_CERTS"] }) },
    ],
    15,
  );
  timeRow({
    id: "5b",
    what:
      `\`node -e 0\` with the caller's NODE_EXTRA_CA_CERTS (${extraCaCerts}, ` +
      `parsed at every start) vs without it (info)`,
    oursMs: median(certs.with),
    baseMs: median(certs.without),
    goal: null,
    headline: false,
  });
}

export const parts = { rss: benchRss, start: benchStart };
