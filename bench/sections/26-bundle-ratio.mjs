import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
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

// ---------------------------------------------------------------- 22. export and import against tar + sha256sum

/**
 * exportBundle against `tar cf` + `sha256sum` of the tar (goal: at most
 * 1.5x); importBundle (extract, verify everything, publish durably) against
 * `tar xf` + `sync -f` + `sha256sum` of every extracted file (at most 2.0x).
 * Both on the 20k small files and on the 8 x 128 MiB data set.
 */
async function benchBundleRatio(name, ids) {
  const label = name === "small" ? "20k small files" : "8 x 128 MiB";
  console.error(`\n[${ids.join(", ")}] export / import of ${label} vs tar + sha256sum`);
  if (typeof oats.exportBundle !== "function" || typeof oats.importBundle !== "function") {
    missingRow(ids[0], `export ${label}`, "<= 1.5x", "exportBundle is not built");
    return;
  }
  const source = dataset(name);
  const root = join(WORK, `bundle-ratio-${name}`);
  removeTree(root);
  const scope = join(root, "scope");
  const bundles = join(root, "bundles");
  const targets = join(root, "targets");
  for (const dir of [scope, bundles, targets]) mkdirSync(dir, { recursive: true });
  const receipt = await retainTree(scope, { kind: "capture", key: `bundle-${name}`, source });
  const ref = { kind: "capture", key: `bundle-${name}`, integrity: receipt.integrity };
  warm(receipt.dir);
  const exported = await interleave(
    [
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
        run: async (round) => {
          const tar = join(bundles, `tar-${round + 1}.tar`);
          await run("tar", ["-C", receipt.dir, "-cf", tar, "."], { capture: false });
          await run("sha256sum", [tar], { capture: false });
        },
        cleanup: (round) => removeTree(join(bundles, `tar-${round + 1}.tar`)),
      },
    ],
    3,
  );
  timeRow({
    id: ids[0],
    what: `exportBundle of ${label} vs tar cf + sha256sum of the tar`,
    oursMs: median(exported.oats),
    baseMs: median(exported.tar),
    goal: 1.5,
  });

  const bundle = join(bundles, "bench.tar");
  const plain = join(bundles, "plain.tar");
  await oats.exportBundle(scope, [ref], bundle);
  await run("tar", ["-C", receipt.dir, "-cf", plain, "."], { capture: false });
  const imported = await interleave(
    [
      {
        name: "oats",
        inProcess: true,
        prepare: async (round) => {
          mkdirSync(join(targets, `scope-${round + 1}`));
          await settle();
        },
        run: async (round) => void (await oats.importBundle(join(targets, `scope-${round + 1}`), bundle)),
      },
      {
        name: "tar",
        prepare: async (round) => {
          mkdirSync(join(targets, `tar-${round + 1}`));
          await settle();
        },
        run: async (round) => {
          const dir = join(targets, `tar-${round + 1}`);
          await run("tar", ["-C", dir, "-xf", plain], { capture: false });
          await run("sync", ["-f", dir], { capture: false });
          await run("sh", ["-c", "find . -type f | sort | xargs sha256sum > /dev/null"], { cwd: dir, capture: false });
        },
      },
    ],
    3,
  );
  timeRow({
    id: ids[1],
    what: `importBundle of ${label} (verify all, publish durably) vs tar xf + sync -f + sha256sum of the files`,
    oursMs: median(imported.oats),
    baseMs: median(imported.tar),
    goal: 2.0,
  });
  removeTree(root);
  await settle();
}

export const parts = {
  "bundle-ratio": async () => {
    await benchBundleRatio("small", ["26a", "26b"]);
    await benchBundleRatio("big", ["26c", "26d"]);
  },
};
