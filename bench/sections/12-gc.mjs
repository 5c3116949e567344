import { cpSync, existsSync, mkdirSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CAPTURE,
  CLI,
  DIST,
  WORK,
  addRow,
  cliWorks,
  dataset,
  fmtMs,
  log,
  median,
  notes,
  oats,
  options,
  removeTree,
  retainTree,
  run,
  warm,
  writeResolution,
} from "../lib.mjs";

// ---------------------------------------------------------------- 12. gc --dry-run of a large scope

const { canonicalJson } = await import(join(DIST, "core", "canonical-json.js"));
const { entryHash } = await import(join(DIST, "ledger", "chain-line.js"));

const GC_SCOPE = {
  revisions: 50,
  unreachableRevisions: 2,
  records: 1000,
  unreferencedRecords: 100,
  auditEntries: 10_000,
};
const STAMP_VERSION = 1;
const GENESIS = `sha256-${"0".repeat(64)}`;
const TWO_DAYS_AGO = () => new Date(Date.now() - 2 * 24 * 3600 * 1000);

function instanceRecord(ref, n) {
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: `bench-${n}` },
    source: null,
    artifacts: {
      [ref.key]: {
        artifact: ref,
        package: { id: ref.key, source: `path:/bench/${ref.key}`, version: "1.0.0", commit: null, integrity: null },
        legacyIntegrity: null,
      },
    },
    config: {
      "/bench/n": { value: n, origin: { kind: "operator", ref: "bench/plan.yaml" }, constraints: [], considered: [] },
    },
    bindings: {},
    messaging: null,
    entrypoints: { run: { artifact: ref, path: "bin/run", args: [], role: "command" } },
    capture: null,
    evidence: [],
    unresolved: [],
  };
}

/**
 * The scope of the gc goal: GC_SCOPE.revisions revisions of
 * CAPTURE.files files (each the capture data set with one file changed),
 * GC_SCOPE.records records, GC_SCOPE.auditEntries audit entries. All but
 * GC_SCOPE.unreferencedRecords records are named by an instance reference;
 * the rest, and GC_SCOPE.unreachableRevisions revisions, are unreachable and
 * two days old, so the dry run has something to verify and list. Built once
 * (a stamp), since a dry run changes nothing.
 */
async function gcScope() {
  const scope = join(WORK, "gc-scope");
  const stamp = join(WORK, "gc-scope.stamp.json");
  const want = JSON.stringify({ version: STAMP_VERSION, ...GC_SCOPE, capture: CAPTURE });
  if (existsSync(stamp) && readFileSync(stamp, "utf8") === want && existsSync(scope)) return scope;
  const started = performance.now();
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  const source = join(WORK, "gc-variant");
  removeTree(source);
  cpSync(dataset("capture"), source, { recursive: true });
  const refs = [];
  for (let i = 0; i < GC_SCOPE.revisions; i++) {
    writeFileSync(join(source, "variant.txt"), `variant ${i}\n`);
    const receipt = await retainTree(scope, {
      kind: "capability",
      key: `bench.gc-${String(i).padStart(2, "0")}`,
      source,
    });
    refs.push({
      kind: "capability",
      key: receipt.key,
      integrity: { format: receipt.execIntegrity.format, value: receipt.execIntegrity.value },
      dir: receipt.dir,
    });
  }
  removeTree(source);
  const reachable = refs.slice(0, GC_SCOPE.revisions - GC_SCOPE.unreachableRevisions);
  for (const ref of refs.slice(reachable.length)) utimesSync(ref.dir, TWO_DAYS_AGO(), TWO_DAYS_AGO());
  for (let n = 0; n < GC_SCOPE.records; n++) {
    const { dir, ...ref } = reachable[n % reachable.length];
    const { id, path } = writeResolution(scope, instanceRecord(ref, n));
    if (n < GC_SCOPE.records - GC_SCOPE.unreferencedRecords) oats.writeInstanceRef(scope, `bench-${n}`, id);
    else utimesSync(path, TWO_DAYS_AGO(), TWO_DAYS_AGO());
  }
  // The audit log, generated with the public chain rule (10,000 fsync'd appends would take minutes).
  const auditDir = join(scope, ".agents", "audit");
  mkdirSync(auditDir, { recursive: true });
  writeFileSync(join(auditDir, ".gitignore"), "*\n");
  const at = new Date().toISOString();
  const lines = [];
  let prev = GENESIS;
  for (let n = 1; n <= GC_SCOPE.auditEntries; n++) {
    const ref = refs[n % refs.length];
    const entry = {
      seq: n,
      at,
      principal: "bench@host",
      action: "retain",
      subject: { kind: ref.kind, key: ref.key, integrity: `${ref.integrity.format}:${ref.integrity.value}` },
      outcome: "kept",
      details: {},
      prev,
    };
    entry.hash = entryHash(entry);
    prev = entry.hash;
    lines.push(canonicalJson(entry));
  }
  writeFileSync(join(auditDir, "audit.jsonl"), lines.join(""));
  writeFileSync(stamp, want);
  log(`built the gc scope in ${fmtMs(performance.now() - started)}`);
  return scope;
}

async function benchGc() {
  console.error(
    `\n[13] gc --dry-run of a scope with ${GC_SCOPE.records} records, ` +
      `${GC_SCOPE.auditEntries} audit entries and ${GC_SCOPE.revisions} ` +
      `revisions of ${CAPTURE.files} files`,
  );
  const scope = await gcScope();
  warm(join(scope, ".agents"));
  const expected = GC_SCOPE.unreachableRevisions + GC_SCOPE.unreferencedRecords;
  const check = (report) => {
    if (report.collect.length !== expected || report.kept.records !== GC_SCOPE.records - GC_SCOPE.unreferencedRecords) {
      throw new Error(
        `gc listed ${report.collect.length} items (expected ${expected}) and kept ${report.kept.records} records`,
      );
    }
  };
  const inProcess = [];
  for (let round = 0; round < options.runs; round++) {
    const started = performance.now();
    check(await oats.gc(scope));
    inProcess.push(performance.now() - started);
  }
  let cli = null;
  if (await cliWorks("13", ["--version"])) {
    cli = [];
    for (let round = 0; round < options.runs; round++) {
      const result = await run(process.execPath, [CLI, "--json", "--scope", scope, "gc", "--dry-run"]);
      check(JSON.parse(result.stdout).result);
      cli.push(result.ms);
      log(`oats gc --dry-run: ${fmtMs(result.ms)}`);
    }
  }
  const ours = cli ? median(cli) : median(inProcess);
  addRow({
    id: "13",
    what:
      `\`oats gc --dry-run\` ` +
      `(${cli ? "CLI, process start included" : "library"}): ` +
      `${GC_SCOPE.records} records, ${GC_SCOPE.auditEntries} audit entries, ` +
      `${GC_SCOPE.revisions} revisions of ${CAPTURE.files} files ` +
      `(${GC_SCOPE.unreachableRevisions} unreachable revisions verified)`,
    headline: true,
    ours: fmtMs(ours),
    baseline: "-",
    ratio: "-",
    goal: "< 1 s",
    pass: ours < 1000,
  });
  notes.push(
    `[13] gc dry run in-process (library) median ` +
      `${fmtMs(median(inProcess))}; it reads every root and record, and ` +
      `verifies only the unreachable revisions older than the grace period.`,
  );
}

export const parts = { gc: benchGc };
