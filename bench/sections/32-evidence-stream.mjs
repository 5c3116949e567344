import { createHash } from "node:crypto";
import { closeSync, existsSync, mkdirSync, openSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { DIST, GiB, MiB, WORK, addRow, fmtMs, notes, removeTree, run } from "../lib.mjs";
import { registryBinary, startRegistry } from "./13-fleet.mjs";

// ---------------------------------------------------------------- 32. push of a run whose log is 3 GiB

const LOG_BYTES = 3 * GiB;
const GOAL_MIB = 100;
const dist = (...parts) => JSON.stringify(join(DIST, ...parts));

/**
 * A valid run log of LOG_BYTES at `path`, generated as it is written (8 MiB
 * at a time, never held): lines of ~4 KiB with strictly increasing stamps,
 * then the footer of a run that exited 0. Returns what a record seals of it.
 */
function writeLog(path, formatStamp) {
  const fd = openSync(path, "wx", 0o600);
  const hash = createHash("sha256");
  const start = Date.UTC(2026, 11, 1, 3, 40) * 1000;
  const text = "x".repeat(4000);
  let bytes = 0;
  let lines = 0;
  const put = (chunk) => {
    hash.update(chunk);
    for (let at = 0; at < chunk.length; ) at += writeSync(fd, chunk, at);
    bytes += chunk.length;
  };
  try {
    while (bytes < LOG_BYTES) {
      const batch = [];
      for (let n = 0; n < 2048; n += 1) batch.push(`${formatStamp(start + lines++)} out ${text}\n`);
      put(Buffer.from(batch.join(""), "utf8"));
    }
    put(Buffer.from("# exit: code 0\n# RESULT: OK\n", "utf8"));
  } finally {
    closeSync(fd);
  }
  return { digest: `sha256-${hash.digest("hex")}`, bytes, lines };
}

/**
 * A sealed run as the run store writes one (record, log, run-start /
 * dispatch / run-end audit entries in the scope's real chain), its log
 * written by writeLog; without running a child, which would take minutes to
 * print 3 GiB through the line capture.
 */
async function sealedRun(scope) {
  const { audit } = await import(join(DIST, "ledger", "audit.js"));
  const { sealRecord } = await import(join(DIST, "evidence", "run-record.js"));
  const { formatStamp } = await import(join(DIST, "evidence", "log-format.js"));
  const handle = "20261201T034000Z-10000028";
  const job = "stream-job";
  const resolution = `sha256-${"ab".repeat(32)}`;
  const dispatch = await audit(scope, { action: "dispatch", subject: { job, resolution }, outcome: "ok", details: {} });
  const start = await audit(scope, {
    action: "run-start",
    subject: { handle, job, resolution },
    outcome: "ok",
    details: { dispatchAudit: { seq: dispatch.seq, hash: dispatch.hash } },
  });
  const dir = join(scope, ".agents", "runs", handle);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const log = writeLog(join(dir, "log"), formatStamp);
  const { bytes, id } = sealRecord({
    format: "oats.run.v1",
    handle,
    job,
    resolution,
    composition: { kind: "composition", key: "probe", integrity: `oats.json.v1:sha256-${"cd".repeat(32)}` },
    approval: { seq: 1, hash: `sha256-${"ef".repeat(32)}` },
    dispatchAudit: { seq: dispatch.seq, hash: dispatch.hash },
    startAudit: { seq: start.seq, hash: start.hash },
    principal: "bench@localhost",
    harness: null,
    classification: "public",
    environment: ["PATH"],
    startedAt: "2026-12-01T03:40:00.000000Z",
    endedAt: "2026-12-01T03:40:02.000000Z",
    exit: { code: 0, signal: null },
    result: "OK",
    log,
    redactions: [],
    evidence: { required: ["log"], captured: ["log"], gaps: [], status: "complete" },
    delivery: { posture: "none", to: null },
  });
  writeFileSync(join(dir, "record.json"), bytes);
  await audit(scope, {
    action: "run-end",
    subject: { handle, job, resolution },
    outcome: "ok",
    details: { runId: id, exit: { code: 0, signal: null }, result: "OK" },
  });
  return { runId: id, log };
}

/** `pushEvidence` of the scope to `to` in a child process: its peak RSS (VmHWM at its end) in MiB and its time. */
async function pushInChild(scope, to, runId) {
  const script = [
    `const { readFileSync } = await import("node:fs");`,
    `const { pushEvidence } = await import(${dist("index.js")});`,
    `const result = await pushEvidence(${JSON.stringify(scope)}, ` +
      `{ to: ${JSON.stringify(to)}, allowSameFilesystem: true });`,
    `const hwm = /^VmHWM:\\s+(\\d+) kB$/m.exec(readFileSync("/proc/self/status", "utf8"));`,
    `console.log(JSON.stringify({ delivered: result.delivered.map((entry) => entry.runId), ` +
      `hwmKib: Number(hwm[1]), maxRSS: process.resourceUsage().maxRSS }));`,
  ].join("\n");
  const pushed = await run(process.execPath, ["--input-type=module", "-e", script]);
  const report = JSON.parse(pushed.stdout.trim().split("\n").at(-1));
  if (report.delivered.length !== 1 || report.delivered[0] !== runId)
    throw new Error(`the push to ${to} delivered ${JSON.stringify(report.delivered)}, not ${runId}`);
  return { mib: Math.max(report.hwmKib, report.maxRSS) / 1024, ms: pushed.ms };
}

function rssRow(id, where, mib) {
  addRow({
    id,
    what: `push of a run whose log is ${LOG_BYTES / GiB} GiB to ${where}: peak RSS`,
    headline: true,
    ours: `${mib.toFixed(1)} MiB`,
    baseline: "-",
    ratio: "-",
    goal: `<= ${GOAL_MIB} MiB`,
    pass: mib <= GOAL_MIB,
  });
}

/**
 * - 32: `pushEvidence` of a scope holding one sealed run whose log is 3 GiB
 *   (generated here, removed afterwards) to a `dir:` share, in a child
 *   process: the outbox queues the run (its log copied and checked), puts it
 *   on the share and reads it back; the row is that child's peak RSS
 *   (VmHWM, as the child reads it at its end). Goal: at most 100 MiB.
 * - 32b: the same scope pushed to a loopback docker-registry (when there is
 *   one): the log goes up as a chunked upload from a stream and is read back
 *   as a blob stream. Same goal.
 */
async function benchEvidenceStream() {
  console.error(`\n[32] push of a run whose log is ${LOG_BYTES / GiB} GiB: peak RSS`);
  const base = join(WORK, "evidence-stream");
  removeTree(base);
  const scope = join(base, `scope-${process.pid}`);
  const share = join(base, "share");
  mkdirSync(scope, { recursive: true });
  mkdirSync(share, { recursive: true });
  let registry = null;
  try {
    const made = performance.now();
    const { runId, log } = await sealedRun(scope);
    console.error(`  .. ${(log.bytes / MiB).toFixed(0)} MiB log written in ${fmtMs(performance.now() - made)}`);
    const dirPush = await pushInChild(scope, `dir:${share}`, runId);
    if (!existsSync(join(share, "runs", runId.slice("sha256-".length), "log")))
      throw new Error("the share holds no log");
    rssRow("32", `a \`dir:\` share (queue, put, read back; child process, ${fmtMs(dirPush.ms)})`, dirPush.mib);
    // The same scope to a registry: a destination of its own, so the run goes out again, as a chunked upload.
    const binary = registryBinary();
    if (binary === null) {
      notes.push("[32b] docker-registry is not installed: the registry push of the 3 GiB log is not measured");
      return;
    }
    registry = await startRegistry(binary, join(base, "registry"));
    const ociPush = await pushInChild(scope, `http://${registry.base}/bench/stream`, runId);
    rssRow("32b", `a loopback registry (chunked upload, read back; child process, ${fmtMs(ociPush.ms)})`, ociPush.mib);
  } finally {
    if (registry !== null) {
      registry.child.kill("SIGTERM");
      await new Promise((resolve) => registry.child.once("exit", resolve));
    }
    removeTree(base);
  }
}

export const parts = { "evidence-stream": benchEvidenceStream };
