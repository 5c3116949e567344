// Reading the bench's ~100 KB resolution record (row 7b): the whole read, the record alone (7c), then each step of
// it: node --expose-gc bench/probes/record-read.mjs
import { mkdirSync, mkdtempSync, writeFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
const { benchRecord } = await import(new URL("../datasets.mjs", import.meta.url));
const oats = await import(new URL("../../dist/index.js", import.meta.url));
const { readRecordBytes } = await import(new URL("../../dist/resolution/store.js", import.meta.url));
const { retainTree, readResolution, writeResolution } = oats;
const work = mkdtempSync("/tmp/oats-record-read-");
const scope = join(work, "scope");
mkdirSync(scope, { recursive: true });
const refs = [];
for (let c = 0; c < 50; c++) {
  const src = join(work, "caps", `cap${c}`);
  mkdirSync(join(src, "bin"), { recursive: true });
  writeFileSync(join(src, "bin", "run.mjs"), `console.log(${c})\n`);
  for (let f = 0; f < 5; f++) writeFileSync(join(src, `f${f}.txt`), `file ${f} of ${c}\n`);
  const r = await retainTree(scope, { kind: "capability", key: `bench.cap${c}`, source: src });
  refs.push({
    kind: "capability",
    key: r.key,
    integrity: { format: r.execIntegrity.format, value: r.execIntegrity.value },
  });
}
let entries = 300,
  record = benchRecord(refs, entries);
while (Buffer.byteLength(JSON.stringify(record)) < 100 * 1024) record = benchRecord(refs, (entries += 25));
const big = writeResolution(scope, record);
console.log("bytes", statSync(big.path).size, "entries", entries);
const med = (a) => a.slice().sort((x, y) => x - y)[a.length >> 1];
const sample = async (fn, n = Number(process.env.N ?? 50)) => {
  for (let i = 0; i < 5; i++) await fn();
  globalThis.gc?.();
  const s = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn();
    s.push(performance.now() - t);
  }
  return s;
};
const full = await sample(() => readResolution(scope, big.id));
const bytesOnly = await sample(() => readRecordBytes(scope, big.id));
console.log(
  "7b full",
  med(full).toFixed(2),
  "min",
  Math.min(...full).toFixed(2),
  "| 7c bytes",
  med(bytesOnly).toFixed(2),
);
// components
const { readFileSync } = await import("node:fs");
const { canonicalJsonBytes, bytesDigest } = await import(new URL("../../dist/core/canonical-json.js", import.meta.url));
const { scanJsonText, STORED_MAX_DEPTH } = await import(new URL("../../dist/core/json-text.js", import.meta.url));
const { withoutPrototypes, readCanonicalJson } = await import(
  new URL("../../dist/resolution/canonical-read.js", import.meta.url)
);
const { resolutionRecordSchema } = await import(new URL("../../dist/resolution/record.js", import.meta.url));
const buf = readFileSync(big.path);
const text = buf.toString("utf8");
const value = JSON.parse(text);
const parsedRecord = resolutionRecordSchema.parse(withoutPrototypes(value, ""));
const parts = {
  read: () => readFileSync(big.path),
  digest: () => bytesDigest(buf),
  decode: () => new TextDecoder("utf-8", { fatal: true }).decode(buf),
  scan: () => scanJsonText(text, STORED_MAX_DEPTH),
  parse: () => JSON.parse(text),
  canonical: () => canonicalJsonBytes(value),
  copy: () => withoutPrototypes(value, ""),
  schema: () => resolutionRecordSchema.parse(withoutPrototypes(value, "")),
  copy2: () => withoutPrototypes(parsedRecord, ""),
  readCanonical: () => readCanonicalJson(buf, "x"),
};
for (const [k, fn] of Object.entries(parts)) {
  const s = await sample(fn, 200);
  console.log(k.padEnd(14), med(s).toFixed(3), "ms");
}
rmSync(work, { recursive: true, force: true });
