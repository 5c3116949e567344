import { mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import {
  MiB,
  TARBALL,
  WORK,
  dataset,
  digestOf,
  interleave,
  median,
  missingRow,
  notes,
  oats,
  removeTree,
  run,
  settle,
  timeRow,
} from "../lib.mjs";

// ---------------------------------------------------------------- 9. retain from a package tarball

/**
 * retainTarball of a ~50 MB .tgz holding TARBALL.files files vs `tar xzf`
 * into a fresh directory, `sync -f` and the digest of what it wrote: both
 * sides end with a durable, hashed tree.
 */
async function benchTarball() {
  console.error(`\n[9] retain from a ${TARBALL.files}-file .tgz vs tar xzf + sync -f + digest`);
  if (typeof oats.retainTarball !== "function")
    return missingRow("9", "retain from a 50 MB .tgz vs tar xzf + digest", "<= 1.5x", "retainTarball is not built");
  const tree = dataset("tarball");
  const tgz = join(WORK, "bench-package.tgz");
  removeTree(tgz);
  await run("tar", ["-C", tree, "-czf", tgz, "package"], { capture: false });
  const bytes = statSync(tgz).size;
  const scopes = join(WORK, "tgz-scopes");
  const outs = join(WORK, "tgz-out");
  for (const dir of [scopes, outs]) {
    removeTree(dir);
    mkdirSync(dir, { recursive: true });
  }
  const digests = new Set();
  const sides = [
    {
      name: "oats",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(join(scopes, `scope-${round + 1}`));
        await settle();
      },
      run: async (round) => {
        const receipt = await oats.retainTarball(join(scopes, `scope-${round + 1}`), tgz, {
          kind: "capture",
          key: "bench-tgz",
        });
        digests.add(receipt.execIntegrity.value);
      },
    },
    {
      name: "baseline",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(join(outs, `out-${round + 1}`));
        await settle();
      },
      run: async (round) => {
        const out = join(outs, `out-${round + 1}`);
        await run("tar", ["-C", out, "-xzf", tgz], { capture: false });
        await run("sync", ["-f", out], { capture: false });
        digests.add(await digestOf(join(out, "package")));
      },
    },
  ];
  const times = await interleave(sides, 5);
  removeTree(scopes);
  removeTree(outs);
  removeTree(tgz);
  if (digests.size !== 1) notes.push(`[9] the retained and extracted digests differ: ${[...digests].join(", ")}`);
  timeRow({
    id: "9",
    what:
      `retainTarball of a ${(bytes / MiB).toFixed(0)} MiB .tgz ` +
      `(${TARBALL.files} files) vs tar xzf + sync -f + digest`,
    oursMs: median(times.oats),
    baseMs: median(times.baseline),
    goal: 1.5,
  });
}

export const parts = { tarball: benchTarball };
