import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  MiB,
  WORK,
  dataset,
  interleave,
  median,
  missingRow,
  oats,
  removeTree,
  retainTree,
  run,
  settle,
  timeRow,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 10. export and import

/** exportBundle / importBundle of the 1 GiB data set retained, beside tar cf / tar xf of the same revision. */
async function benchBundle() {
  console.error("\n[10] export and import of 1 GiB of retained trees vs tar cf / tar xf");
  if (typeof oats.exportBundle !== "function" || typeof oats.importBundle !== "function") {
    missingRow("10a", "export 1 GiB", "-", "exportBundle is not built");
    return;
  }
  const source = dataset("big");
  const scope = join(WORK, "bundle-scope");
  const bundles = join(WORK, "bundles");
  const targets = join(WORK, "bundle-targets");
  for (const dir of [scope, bundles, targets]) {
    removeTree(dir);
    mkdirSync(dir, { recursive: true });
  }
  const receipt = await retainTree(scope, { kind: "capture", key: "bench-bundle", source });
  const ref = {
    kind: "capture",
    key: "bench-bundle",
    integrity: `${receipt.execIntegrity.format}:${receipt.execIntegrity.value}`,
  };
  const bytes = 8 * 128 * MiB;
  warm(receipt.dir);
  const exportSides = [
    {
      name: "oats",
      inProcess: true,
      prepare: settle,
      run: async (round) => void (await oats.exportBundle(scope, [ref], join(bundles, `oats-${round + 1}.tar`))),
      cleanup: (round) => removeTree(join(bundles, `oats-${round + 1}.tar`)),
    },
    {
      name: "tar",
      prepare: settle,
      run: (round) =>
        run("tar", ["-C", receipt.dir, "-cf", join(bundles, `tar-${round + 1}.tar`), "."], { capture: false }),
      cleanup: (round) => removeTree(join(bundles, `tar-${round + 1}.tar`)),
    },
  ];
  const exported = await interleave(exportSides, 3);
  timeRow({
    id: "10a",
    what: "exportBundle of 1 GiB of retained trees (verify + write) vs tar cf of the revision",
    oursMs: median(exported.oats),
    baseMs: median(exported.tar),
    goal: null,
    kind: "ratio-min",
    bytes,
  });

  const bundle = join(bundles, "bench.tar");
  const plain = join(bundles, "plain.tar");
  await oats.exportBundle(scope, [ref], bundle);
  await run("tar", ["-C", receipt.dir, "-cf", plain, "."], { capture: false });
  const importSides = [
    {
      name: "oats",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(join(targets, `scope-${round + 1}`));
        await settle();
      },
      run: async (round) => void (await oats.importBundle(join(targets, `scope-${round + 1}`), bundle)),
      cleanup: (round) => removeTree(join(targets, `scope-${round + 1}`)),
    },
    {
      name: "tar",
      prepare: async (round) => {
        mkdirSync(join(targets, `tar-${round + 1}`));
        await settle();
      },
      run: (round) => run("tar", ["-C", join(targets, `tar-${round + 1}`), "-xf", plain], { capture: false }),
      cleanup: (round) => removeTree(join(targets, `tar-${round + 1}`)),
    },
  ];
  const imported = await interleave(importSides, 3);
  timeRow({
    id: "10b",
    what: "importBundle of the same (extract to staging, verify all, publish durably) vs tar xf",
    oursMs: median(imported.oats),
    baseMs: median(imported.tar),
    goal: null,
    kind: "ratio-min",
    bytes,
  });
  for (const dir of [scope, bundles, targets]) removeTree(dir);
}

export const parts = { bundle: benchBundle };
