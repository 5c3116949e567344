import { mkdirSync } from "node:fs";
import { join } from "node:path";
import {
  StagingWriter,
  TREE_EXEC,
  WORK,
  dataset,
  digestListing,
  digestOf,
  interleave,
  median,
  notes,
  removeTree,
  retainTree,
  run,
  settle,
  timeRow,
  walkTree,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 3. retain vs cp -a + sync -f + digest

async function benchRetain(name, runs) {
  console.error(`\n[3] retainTree (capture) of ${name} vs cp -a + sync -f + digest of the copy`);
  const source = dataset(name);
  warm(source);
  const scopes = join(WORK, "scopes");
  const copies = join(WORK, "copies");
  removeTree(scopes);
  removeTree(copies);
  mkdirSync(scopes, { recursive: true });
  mkdirSync(copies, { recursive: true });
  const scopeOf = (round) => join(scopes, `scope-${round + 1}`);
  const copyOf = (round) => join(copies, `copy-${round + 1}`);
  const digests = new Set();
  const sides = [
    {
      name: "oats",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(scopeOf(round));
        await settle();
      },
      run: async (round) => {
        const receipt = await retainTree(scopeOf(round), { kind: "capture", key: `bench-${name}`, source });
        if (receipt.status !== "retained") throw new Error(`expected a fresh retain, got ${receipt.status}`);
        digests.add(receipt.integrity.value);
      },
    },
    {
      name: "baseline",
      inProcess: true, // its digest of the copy
      prepare: settle,
      run: async (round) => {
        await run("cp", ["-a", source, copyOf(round)], { capture: false });
        await run("sync", ["-f", copyOf(round)], { capture: false });
        digests.add(await digestOf(copyOf(round)));
      },
    },
  ];
  const times = await interleave(sides, runs);
  removeTree(scopes);
  removeTree(copies);
  await settle();
  if (digests.size !== 1) notes.push(`[3] ${name}: retained and copied digests differ: ${[...digests].join(", ")}`);
  const label = name === "small" ? "20k small files" : "8 x 128 MiB";
  timeRow({
    id: name === "small" ? "3a" : "3b",
    what: `retainTree ${label} vs cp -a + sync -f + digest`,
    oursMs: median(times.oats),
    baseMs: median(times.baseline),
    goal: 2.0,
  });
}

// ---------------------------------------------------------------- 3c. durability: per-file fsync vs one syncfs

/**
 * The staging copy alone (copy + hash + making it durable, no verify, no
 * rename), once with an fsync of every file as it is written and once with one
 * syncfs at the end, on the same tree: the figures behind PER_FILE_FSYNC_LIMIT.
 */
async function benchDurability(name, id, runs) {
  const label = name === "small" ? "20k small files" : "8 x 128 MiB";
  console.error(`\n[${id}] staging ${label}: per-file fsync vs one syncfs (\`sync -f\`)`);
  const source = dataset(name);
  warm(source);
  const listing = await walkTree(source);
  const stage = join(WORK, "stage");
  removeTree(stage);
  mkdirSync(stage, { recursive: true });
  const side = (durability) => ({
    name: durability,
    inProcess: true,
    prepare: async (round) => {
      mkdirSync(join(stage, `${durability}-${round + 1}`));
      await settle();
    },
    run: async (round) => {
      const writer = new StagingWriter(join(stage, `${durability}-${round + 1}`), listing, { durability });
      writer.prepareDirectories();
      try {
        await digestListing(listing, [TREE_EXEC], { sink: writer, sinkOrder: "bytes" });
      } finally {
        writer.abort();
      }
      await writer.flush();
    },
  });
  const times = await interleave([side("syncfs"), side("per-file")], runs);
  removeTree(stage);
  await settle();
  timeRow({
    id,
    what: `stage ${label} (copy + hash + durable): per-file fsync vs one syncfs (info)`,
    oursMs: median(times["per-file"]),
    baseMs: median(times.syncfs),
    goal: null,
    headline: false,
    oursExtra: " per-file",
    baseExtra: " syncfs",
  });
}

export const parts = {
  retain: async () => {
    await benchRetain("small", 5);
    await benchRetain("big", 3);
  },
  fsync: () => benchDurability("small", "3c", 3),
  "fsync-big": () => benchDurability("big", "3d", 3),
};
