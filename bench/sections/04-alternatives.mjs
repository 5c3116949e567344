import { join } from "node:path";
import { REPO, addRow, dataset, interleave, median, notes, run, timeRow, warm } from "../lib.mjs";

// ---------------------------------------------------------------- 6. design alternatives (info)

async function benchAlternatives() {
  console.error(
    "\n[6] reading many small files: synchronous vs thread pool vs worker threads (bench/alternatives.mjs)",
  );
  const dir = dataset("small");
  warm(dir);
  const script = join(REPO, "bench", "alternatives.mjs");
  const expected = new Set();
  const mode = (name, limit) => {
    const results = [];
    return {
      name: limit ? `${name}@${limit}` : name,
      results,
      run: async () => {
        const out = await run(process.execPath, [script, name, dir, ...(limit ? [String(limit)] : [])]);
        const parsed = JSON.parse(out.stdout);
        if (!limit) expected.add(parsed.digest);
        results.push(parsed);
      },
    };
  };
  // The thread-pool modes cost hundreds of microseconds a file here: timed on the first 2,000 files.
  const part = 2000;
  const sides = [
    mode("sync"),
    mode("sync", part),
    mode("async", part),
    mode("async16", part),
    mode("workers1"),
    mode("workers2"),
  ];
  await interleave(sides, 3);
  if (expected.size !== 1) notes.push(`[6] the alternatives disagree on the digest: ${[...expected].join(", ")}`);
  const timed = (side) => side.results.slice(1); // the first was the warm-up
  const perFile = (side) => median(timed(side).map((r) => (r.afterListingMs * 1000) / r.files));
  const total = (side) => median(timed(side).map((r) => r.ms));
  const [sync, syncPart, async1, async16, workers1, workers2] = sides;
  const us = (value) => `${value.toFixed(1)} us/file`;
  const rowPerFile = (id, what, side) =>
    addRow({
      id,
      what,
      headline: false,
      ours: us(perFile(side)),
      baseline: `${us(perFile(syncPart))} sync`,
      ratio: `${(perFile(side) / perFile(syncPart)).toFixed(2)}x`,
      goal: "-",
    });
  rowPerFile("6a", "small-file reads through the thread pool, one file at a time, vs synchronous (info)", async1);
  rowPerFile("6b", "same, 16 files in flight (info)", async16);
  const rowTotal = (id, what, side) =>
    timeRow({ id, what, oursMs: total(side), baseMs: total(sync), goal: null, headline: false, baseExtra: " sync" });
  rowTotal("6c", "list + read + hash 20k files: 1 worker thread reading ahead vs synchronous (info)", workers1);
  rowTotal("6d", "same, 2 worker threads (info)", workers2);
}

export const parts = { alt: benchAlternatives };
