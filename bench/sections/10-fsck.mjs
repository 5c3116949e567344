import { createHash } from "node:crypto";
import { mkdirSync, realpathSync } from "node:fs";
import { join } from "node:path";
import {
  CAPTURE,
  CLI,
  WORK,
  cliExists,
  dataset,
  fmtMs,
  interleave,
  log,
  median,
  oats,
  options,
  removeTree,
  run,
  timeRow,
  verifyTree,
  warm,
  writeResolution,
} from "../lib.mjs";

// ---------------------------------------------------------------- 12. whole-scope fsck

const REVISIONS = 50;
const RECORDS = 1000;
const INSTANCES = 100;
const AUDIT_ENTRIES = 10_000;

/** A small complete instance record running `bin/run` of one retained revision; `n` makes each one distinct. */
function record(ref, n) {
  const key = ref.key;
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: `bench-${String(n).padStart(4, "0")}` },
    source: null,
    artifacts: {
      [key]: {
        artifact: ref,
        package: { id: key, source: `path:/bench/${key}`, version: "1.0.0", commit: null, integrity: null },
        legacyIntegrity: null,
      },
    },
    config: {
      [`/settings/${key}/n`]: {
        value: n,
        origin: { kind: "operator", ref: "bench/plan.yaml" },
        constraints: [],
        considered: [],
      },
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
 * `oats fsck` (fsckScope, in process) of a scope holding REVISIONS revisions
 * of a CAPTURE.files-file tree, RECORDS records (each naming one revision),
 * INSTANCES instance refs and AUDIT_ENTRIES audit entries, against verifyTree
 * of those revisions alone: everything but the revisions must cost little.
 * The scope is built through the library: retainTree, writeResolution,
 * writeInstanceRef and the chain log's appendEntry.
 */
async function benchFsck() {
  console.error(
    `\n[12] fsck of a scope with ${REVISIONS} revisions of ${CAPTURE.files} ` +
      `files, ${RECORDS} records and ${AUDIT_ENTRIES} audit entries vs ` +
      `verifying the revisions alone`,
  );
  const tree = dataset("capture");
  const scope = join(WORK, "fsck-scope");
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  // The operator's chain state of an earlier run's scope at this path would refuse the new audit
  // log (src/ledger/chain-state.ts).
  removeTree(
    join(process.env.OATS_STATE_DIR, "scopes", createHash("sha256").update(realpathSync(scope), "utf8").digest("hex")),
  );
  let started = performance.now();
  const refs = [];
  for (let i = 0; i < REVISIONS; i++) {
    const receipt = await oats.retainTree(scope, {
      kind: "capability",
      key: `bench.fsck-${String(i).padStart(2, "0")}`,
      source: tree,
    });
    refs.push({
      kind: "capability",
      key: receipt.key,
      integrity: { format: receipt.execIntegrity.format, value: receipt.execIntegrity.value },
    });
  }
  log(`retained ${REVISIONS} revisions in ${fmtMs(performance.now() - started)}`);
  started = performance.now();
  const ids = [];
  for (let n = 0; n < RECORDS; n++) ids.push(writeResolution(scope, record(refs[n % refs.length], n)).id);
  for (let n = 0; n < INSTANCES; n++) oats.writeInstanceRef(scope, `bench-${String(n).padStart(4, "0")}`, ids[n]);
  log(`wrote ${RECORDS} records and ${INSTANCES} instance refs in ${fmtMs(performance.now() - started)}`);
  started = performance.now();
  for (let n = 0; n < AUDIT_ENTRIES; n++) {
    await oats.appendEntry(scope, oats.CHAIN_LOGS.audit, {
      principal: "bench@host",
      action: "queue",
      subject: { job: `bench-${n}` },
      outcome: "ok",
      details: {},
    });
  }
  log(`appended ${AUDIT_ENTRIES} audit entries in ${fmtMs(performance.now() - started)}`);
  warm(join(scope, ".agents"));

  const check = (report) => {
    if (
      !report.ok ||
      report.counts.revisions !== REVISIONS ||
      report.counts.records !== RECORDS ||
      report.counts.audit !== AUDIT_ENTRIES
    ) {
      throw new Error(
        `fsck did not check the whole scope cleanly: ${JSON.stringify(report.counts)}, worst ${report.worst?.message}`,
      );
    }
  };
  const sides = [
    {
      name: "verify",
      inProcess: true,
      run: async () => {
        for (const ref of refs) await verifyTree(scope, ref);
      },
    },
    { name: "fsck", inProcess: true, run: async () => check(await oats.fsckScope(scope)) },
  ];
  // Each side re-hashes 100,000 files: three rounds keep the section within a few minutes.
  const times = await interleave(sides, Math.min(options.runs, 3));
  timeRow({
    id: "12",
    what:
      `fsckScope of ${REVISIONS} x ${CAPTURE.files}-file revisions + ` +
      `${RECORDS} records + ${INSTANCES} instance refs + ${AUDIT_ENTRIES} ` +
      `audit entries vs verifyTree of the revisions`,
    oursMs: median(times.fsck),
    baseMs: median(times.verify),
    goal: 1.2,
    baseExtra: " verify",
  });
  if (cliExists()) {
    const cli = await run(process.execPath, [CLI, "--scope", scope, "--json", "fsck"]);
    if (!JSON.parse(cli.stdout).ok) throw new Error(`oats fsck refused: ${cli.stdout.slice(0, 300)}`);
    timeRow({
      id: "12b",
      what: "the same through `oats --json fsck` (one run, process start included) vs the verify median (info)",
      oursMs: cli.ms,
      baseMs: median(times.verify),
      goal: null,
      headline: false,
      baseExtra: " verify",
    });
  }
  removeTree(scope);
}

export const parts = { fsck: benchFsck };
