import { mkdirSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { benchRecord } from "../datasets.mjs";
import {
  CAPS,
  WORK,
  addRow,
  dataset,
  fmtMs,
  gc,
  interleave,
  log,
  median,
  options,
  readRecordBytes,
  readResolution,
  removeTree,
  retainTree,
  timeRow,
  verifyTree,
  warm,
  writeResolution,
} from "../lib.mjs";

// ---------------------------------------------------------------- 7. resolution records

async function benchResolution() {
  console.error(
    `\n[7] resolution records: verify ${CAPS.capabilities} capabilities of ` +
      `${CAPS.files} files through the record vs directly; read a ~100 KB record`,
  );
  const dir = dataset("caps");
  const scope = join(WORK, "resolution-scope");
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  const started = performance.now();
  const refs = [];
  for (const name of readdirSync(dir).sort()) {
    const receipt = await retainTree(scope, { kind: "capability", key: `bench.${name}`, source: join(dir, name) });
    refs.push({
      kind: "capability",
      key: receipt.key,
      integrity: { format: receipt.execIntegrity.format, value: receipt.execIntegrity.value },
    });
  }
  log(`retained ${refs.length} capabilities in ${fmtMs(performance.now() - started)}`);
  warm(join(scope, ".agents"));

  // (a) verification through the record vs the same artifacts verified directly.
  const { id } = writeResolution(scope, benchRecord(refs, 0));
  const sides = [
    {
      name: "direct",
      inProcess: true,
      run: async () => {
        for (const ref of refs) await verifyTree(scope, ref);
      },
    },
    {
      name: "record",
      inProcess: true,
      run: async () => {
        const read = await readResolution(scope, id, { verify: true });
        if (!read.verified || Object.keys(read.entrypoints).length !== refs.length)
          throw new Error("the record did not verify every artifact");
      },
    },
  ];
  const times = await interleave(sides, options.runs);
  timeRow({
    id: "7a",
    what:
      `readResolution(verify) of a record naming ${CAPS.capabilities} x ` +
      `${CAPS.files}-file capabilities vs verifyTree on each`,
    oursMs: median(times.record),
    baseMs: median(times.direct),
    goal: 1.1,
    baseExtra: " direct",
  });

  // (b) a ~100 KB record read and checked without artifact verification.
  let entries = 300;
  let record = benchRecord(refs, entries);
  const size = (value) => Buffer.byteLength(JSON.stringify(value));
  while (size(record) < 100 * 1024) record = benchRecord(refs, (entries += 25));
  const big = writeResolution(scope, record);
  const bytes = statSync(big.path).size;
  const reads = 50;
  const sample = async (fn) => {
    for (let i = 0; i < 5; i++) await fn(); // warm-up
    gc();
    const samples = [];
    for (let i = 0; i < reads; i++) {
      const t0 = performance.now();
      await fn();
      samples.push(performance.now() - t0);
    }
    return samples;
  };
  const samples = await sample(() => readResolution(scope, big.id));
  // Where the time goes: the record alone (bounded read, digest, canonical check, schema), without resolving the
  // entry points.
  const recordOnly = await sample(() => readRecordBytes(scope, big.id));
  const ms = median(samples);
  addRow({
    id: "7b",
    what:
      `read + check a ${(bytes / 1024).toFixed(0)} KB record (${entries} ` +
      `config entries, ${refs.length} entry points), no artifact verification; ` +
      `median of ${reads}`,
    headline: true,
    ours: `${ms.toFixed(2)} ms (min ${Math.min(...samples).toFixed(2)}, max ${Math.max(...samples).toFixed(2)})`,
    baseline: "-",
    ratio: "-",
    goal: "<= 5 ms",
    pass: ms <= 5,
  });
  addRow({
    id: "7c",
    what: `same record, its bytes only (read, digest, canonical check, schema; entry points not resolved) (info)`,
    headline: false,
    ours: `${median(recordOnly).toFixed(2)} ms`,
    baseline: "-",
    ratio: "-",
    goal: "-",
  });
  removeTree(scope);
}

export const parts = { resolution: benchResolution };
