import { readdirSync } from "node:fs";
import { CLI, dataset, digestInOutput, digestOf, interleave, median, notes, run, timeRow, warm } from "../lib.mjs";
import { describeNodeModules, nodeModulesTree } from "../tools.mjs";

// ---------------------------------------------------------------- 21. digest vs shell pipelines

const RUNS = 3;
const FIND_PIPELINE = "find . -type f | sort | xargs sha256sum";

/**
 * `oats digest` end to end (process start included), warm page cache,
 * against what a shell does: `cat FILES | openssl dgst -sha256` for the
 * large files (one stream, read and hash on two cores), and
 * `find | sort | xargs sha256sum` for the node_modules tree (row 2 is the
 * same for the 20k tree).
 */
async function benchDigestTools() {
  console.error(
    "\n[21] `oats digest` vs cat | openssl dgst -sha256, and vs find | sort | xargs sha256sum on a real node_modules",
  );
  const big = dataset("big");
  const blobs = readdirSync(big).sort();
  warm(big);
  const expected = await digestOf(big);
  const probe = await run(process.execPath, [CLI, "digest", big]);
  if (digestInOutput(probe.stdout) !== expected)
    notes.push(`[21] the CLI printed ${digestInOutput(probe.stdout)}, the library computed ${expected}`);
  const catSh = `cat ${blobs.map((name) => `'${name}'`).join(" ")} | openssl dgst -sha256`;
  let times = await interleave(
    [
      { name: "cli", run: () => run(process.execPath, [CLI, "digest", big], { capture: false }) },
      { name: "cat|openssl", run: () => run("sh", ["-c", catSh], { cwd: big, capture: false }) },
    ],
    RUNS,
  );
  timeRow({
    id: "21a",
    what: "digest 8 x 128 MiB, CLI `oats digest` vs `cat files | openssl dgst -sha256` (warm)",
    oursMs: median(times.cli),
    baseMs: median(times["cat|openssl"]),
    goal: 0.85,
  });

  const tree = nodeModulesTree();
  warm(tree.dir);
  times = await interleave(
    [
      { name: "cli", run: () => run(process.execPath, [CLI, "digest", tree.dir], { capture: false }) },
      { name: "pipeline", run: () => run("sh", ["-c", FIND_PIPELINE], { cwd: tree.dir, capture: false }) },
    ],
    RUNS,
  );
  timeRow({
    id: "21b",
    what: `digest ${describeNodeModules(tree)}, CLI vs \`${FIND_PIPELINE}\` (warm, info)`,
    oursMs: median(times.cli),
    baseMs: median(times.pipeline),
    goal: null,
    headline: false,
  });
}

export const parts = { "digest-tools": benchDigestTools };
