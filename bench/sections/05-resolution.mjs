import { mkdirSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { CAPS, WORK, addRow, dataset, fmtMs, gc, interleave, log, median, options, readRecordBytes, readResolution, removeTree, retainTree, run, timeRow, verifyTree, warm, writeResolution } from "../lib.mjs";

// ---------------------------------------------------------------- 7. resolution records

/**
 * A complete instance record selecting every capability of `caps`, one entry
 * point into each, and `configEntries` config choices (their size is what
 * makes a record large; they reference no artifact).
 */
function benchRecord(refs, configEntries) {
  const artifacts = {};
  const entrypoints = {};
  for (const ref of refs) {
    artifacts[ref.key] = {
      artifact: ref,
      package: { id: ref.key, source: `path:/bench/${ref.key}`, version: "1.0.0", commit: null, integrity: null },
      legacyIntegrity: null,
    };
    entrypoints[`${ref.key}.run`] = { artifact: ref, path: "bin/run.mjs", args: ["--bench"], role: "command" };
  }
  const config = {};
  for (let i = 0; i < configEntries; i++) {
    const capability = refs[i % refs.length].key;
    config[`/settings/${capability}/option-${String(i).padStart(4, "0")}`] = {
      value: { enabled: i % 2 === 0, level: i % 7, label: `setting number ${i} of ${capability}` },
      origin: { kind: i % 3 === 0 ? "soul-default" : "operator", ref: "bench/plan.yaml" },
      constraints: i % 5 === 0 ? [{ kind: "maximum", value: 10, origin: { kind: "soul-requirement", ref: "bench/soul.yaml" } }] : [],
      considered: [],
    };
  }
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: "bench" },
    source: null,
    artifacts,
    config,
    bindings: {},
    messaging: null,
    entrypoints,
    capture: null,
    evidence: [],
    unresolved: [],
  };
}

async function benchResolution() {
  console.error(`\n[7] resolution records: verify ${CAPS.capabilities} capabilities of ${CAPS.files} files through the record vs directly; read a ~100 KB record`);
  const dir = dataset("caps");
  const scope = join(WORK, "resolution-scope");
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  const started = performance.now();
  const refs = [];
  for (const name of readdirSync(dir).sort()) {
    const receipt = await retainTree(scope, { kind: "capability", key: `bench.${name}`, source: join(dir, name) });
    refs.push({ kind: "capability", key: receipt.key, integrity: { format: receipt.execIntegrity.format, value: receipt.execIntegrity.value } });
  }
  log(`retained ${refs.length} capabilities in ${fmtMs(performance.now() - started)}`);
  warm(join(scope, ".agents"));

  // (a) verification through the record vs the same artifacts verified directly.
  const { id } = writeResolution(scope, benchRecord(refs, 0));
  const sides = [
    { name: "direct", inProcess: true, run: async () => { for (const ref of refs) await verifyTree(scope, ref); } },
    {
      name: "record",
      inProcess: true,
      run: async () => {
        const read = await readResolution(scope, id, { verify: true });
        if (!read.verified || Object.keys(read.entrypoints).length !== refs.length) throw new Error("the record did not verify every artifact");
      },
    },
  ];
  const times = await interleave(sides, options.runs);
  timeRow({
    id: "7a",
    what: `readResolution(verify) of a record naming ${CAPS.capabilities} x ${CAPS.files}-file capabilities vs verifyTree on each`,
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
  // Where the time goes: the record alone (bounded read, digest, canonical check, schema), without resolving the entry points.
  const recordOnly = await sample(() => readRecordBytes(scope, big.id));
  const ms = median(samples);
  addRow({
    id: "7b",
    what: `read + check a ${(bytes / 1024).toFixed(0)} KB record (${entries} config entries, ${refs.length} entry points), no artifact verification; median of ${reads}`,
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
