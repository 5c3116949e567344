import { randomBytes } from "node:crypto";
import { cpSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CLI,
  SMALL,
  WORK,
  cliWorks,
  dataset,
  interleave,
  median,
  options,
  removeTree,
  run,
  settle,
  timeRow,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 29. retain of a revision with one file changed

const FIRST_GOAL = 0.5;
const DIGEST_GOAL = 1.5;

/** The first file of a tree, depth first by sorted name. */
function firstFile(dir) {
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      const found = firstFile(path);
      if (found) return found;
    } else return path;
  }
  return null;
}

/**
 * `oats retain` of a copy of the 20k small files with one file changed
 * since its last retain into the same scope, against `oats retain` of the
 * tree into a fresh scope and `oats digest` of it; fresh processes each.
 * What a store that shares unchanged files with the previous revision can
 * skip: writing the 19,999 others again (they must still be read).
 */
async function benchOneChange() {
  if (!(await cliWorks("29", ["--version"]))) return;
  console.error(
    `\n[29] oats retain of the ${SMALL.files.toLocaleString("en-US")} small files with one file changed ` +
      `vs the first retain of the tree and vs oats digest of it`,
  );
  const base = join(WORK, "one-change");
  removeTree(base);
  mkdirSync(base, { recursive: true });
  const source = join(base, "tree");
  cpSync(dataset("small"), source, { recursive: true });
  const changed = firstFile(source);
  const size = statSync(changed).size;
  const scope = join(base, "scope");
  // A fresh scope at a new path each round: the operator's chain state remembers a scope's audit log by its path
  // (src/ledger/chain-state.ts), and `oats retain` pins, which audits.
  const fresh = (round) => join(base, `fresh-${round + 1}`);
  mkdirSync(scope, { recursive: true });
  const retain = (into) => [CLI, "retain", "--scope", into, "--kind", "capture", "--id", "one-change", source];
  await run(process.execPath, retain(scope), { capture: false });
  warm(source);
  const times = await interleave(
    [
      { name: "digest", run: () => run(process.execPath, [CLI, "digest", source], { capture: false }) },
      {
        name: "first retain",
        prepare: async (round) => {
          removeTree(fresh(round - 1));
          mkdirSync(fresh(round), { recursive: true });
          await settle();
        },
        run: (round) => run(process.execPath, retain(fresh(round)), { capture: false }),
      },
      {
        name: "one changed",
        prepare: async () => {
          writeFileSync(changed, randomBytes(size));
          await settle();
        },
        run: () => run(process.execPath, retain(scope), { capture: false }),
      },
    ],
    Math.min(options.runs, 5),
  );
  removeTree(base);
  const ours = median(times["one changed"]);
  timeRow({
    id: "29a",
    what:
      `\`oats retain\` of the ${SMALL.files.toLocaleString("en-US")} small files, one file changed ` +
      `since the last retain, vs the first retain of the tree`,
    oursMs: ours,
    baseMs: median(times["first retain"]),
    goal: FIRST_GOAL,
    baseExtra: " first",
  });
  timeRow({
    id: "29b",
    what: "same, vs `oats digest` of the tree",
    oursMs: ours,
    baseMs: median(times.digest),
    goal: DIGEST_GOAL,
    baseExtra: " digest",
  });
}

export const parts = { "one-change": benchOneChange };
