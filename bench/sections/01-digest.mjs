import { mkdirSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { runEnv } from "../tools.mjs";
import {
  CLI,
  DIST,
  TREE_EXEC,
  WORK,
  cliExists,
  cliWorks,
  dataset,
  digestInOutput,
  digestOf,
  interleave,
  median,
  missingRow,
  notes,
  oneLine,
  options,
  run,
  timeRow,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 1. large files vs openssl

async function benchBig() {
  console.error("\n[1] digest of 8 x 128 MiB vs openssl dgst -sha256");
  const dir = dataset("big");
  const files = readdirSync(dir)
    .sort()
    .map((name) => join(dir, name));
  const bytes = files.reduce((sum, file) => sum + statSync(file).size, 0);
  warm(dir);
  let oursDigest;
  const sides = [
    { name: "oats (library, in-process)", inProcess: true, run: async () => void (oursDigest = await digestOf(dir)) },
    { name: "openssl dgst -sha256", run: () => run("openssl", ["dgst", "-sha256", ...files], { capture: false }) },
  ];
  if (await cliWorks("1", ["digest", dir]))
    sides.push({
      name: "oats digest (CLI)",
      run: () => run(process.execPath, [CLI, "digest", dir], { capture: false }),
    });
  const times = await interleave(sides, Math.max(3, Math.min(options.runs, 5)));
  const [ours, base, cli] = sides.map((side) => median(times[side.name]));
  timeRow({
    id: "1",
    what: "digest 8 x 128 MiB, library vs openssl dgst (throughput)",
    oursMs: ours,
    baseMs: base,
    goal: 0.9,
    kind: "ratio-min",
    bytes,
  });
  if (cli !== undefined)
    timeRow({
      id: "1b",
      what: "same, CLI `oats digest` end to end (info)",
      oursMs: cli,
      baseMs: base,
      goal: null,
      kind: "ratio-min",
      bytes,
      headline: false,
    });
  return oursDigest;
}

// ---------------------------------------------------------------- 2. many small files vs sha256sum

const PIPELINE = "find . -type f | sort | xargs sha256sum";

async function benchSmall() {
  console.error(`\n[2] digest of 20,000 small files vs \`${PIPELINE}\``);
  const dir = dataset("small");
  warm(dir);
  const expected = await digestOf(dir);
  // The digest module alone in a fresh process: node start, cold JIT, no CLI.
  const leanScript = [
    `const { digestTree } = await import(${JSON.stringify(join(DIST, "retention", "digest", "tree.js"))});`,
    `const digests = await digestTree(process.argv[1]);`,
    `process.stdout.write(digests[${JSON.stringify(TREE_EXEC)}] + "\\n");`,
  ].join("\n");
  const sides = [
    { name: "pipeline", run: () => run("sh", ["-c", PIPELINE], { cwd: dir, capture: false }) },
    { name: "library", inProcess: true, run: () => digestOf(dir) },
    {
      name: "fresh",
      run: () => run(process.execPath, ["--input-type=module", "-e", leanScript, dir], { capture: false }),
    },
  ];
  let cliNote = null;
  if (cliExists()) {
    const probe = await run(process.execPath, [CLI, "digest", dir], { allowFail: true });
    const shown = digestInOutput(probe.stdout);
    if (probe.code !== 0) cliNote = `CLI exited ${probe.code}: ${oneLine(probe.stderr)}`;
    else if (shown !== expected) cliNote = `CLI printed ${shown}, library computed ${expected}`;
    if (cliNote) notes.push(`[2] ${cliNote}`);
    else {
      sides.push({ name: "cli", run: () => run(process.execPath, [CLI, "digest", dir], { capture: false }) });
      // The same build with the small files read from JavaScript (src/engine/native-reads.ts).
      sides.push({
        name: "cli-js",
        run: () => runEnv(process.execPath, [CLI, "digest", dir], { env: { OATS_NATIVE_READS: "0" } }),
      });
    }
  } else cliNote = "dist/cli/bin.js not built";
  // What the CLI costs before it reads a byte: start node, load the CLI and the library, digest an empty tree.
  const empty = join(WORK, "empty-tree");
  mkdirSync(empty, { recursive: true });
  if (sides.some((side) => side.name === "cli")) {
    sides.push({ name: "cli-empty", run: () => run(process.execPath, [CLI, "digest", empty], { capture: false }) });
    sides.push({ name: "node", run: () => run(process.execPath, ["-e", "0"], { capture: false }) });
  }
  const times = await interleave(sides, options.runs);
  const base = median(times.pipeline);
  if (times.cli)
    timeRow({
      id: "2",
      what: "digest 20k small files, CLI `oats digest` end to end vs pipeline",
      oursMs: median(times.cli),
      baseMs: base,
      goal: 1.0,
    });
  else
    missingRow(
      "2",
      "digest 20k small files, CLI `oats digest` end to end vs pipeline",
      "<= 1.0x",
      "CLI not usable, see notes",
    );
  if (times["cli-js"])
    timeRow({
      id: "2e",
      what: "same CLI, small files read from JavaScript (OATS_NATIVE_READS=0) (info)",
      oursMs: median(times["cli-js"]),
      baseMs: base,
      goal: null,
      headline: false,
    });
  timeRow({
    id: "2b",
    what: "same, library call in-process",
    oursMs: median(times.library),
    baseMs: base,
    goal: 1.0,
    headline: false,
  });
  timeRow({
    id: "2d",
    what: "same, digest module alone in a fresh `node` process (info)",
    oursMs: median(times.fresh),
    baseMs: base,
    goal: null,
    headline: false,
  });
  if (times["cli-empty"]) {
    timeRow({
      id: "2c",
      what: "CLI fixed cost: `oats digest <empty dir>` vs `node -e 0` (info)",
      oursMs: median(times["cli-empty"]),
      baseMs: median(times.node),
      goal: null,
      headline: false,
    });
  }
  return expected;
}

export const parts = { big: benchBig, small: benchSmall };
