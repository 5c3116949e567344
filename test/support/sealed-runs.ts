import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { audit } from "../../src/ledger/audit.js";
import { bytesDigest } from "../../src/core/canonical-json.js";
import { sealRecord, type RunRecord } from "../../src/evidence/run-record.js";

/**
 * A sealed run written the way the run store writes one
 * (`.agents/runs/<handle>/{log,record.json}`, a record run-record.ts seals,
 * run-start / dispatch / run-end audit entries in a real chain), without
 * running a child: the delivery tests need many runs and exact control of
 * their bytes. test/evidence-delivery-runs.test.ts delivers real runs.
 */
export async function makeSealedRun(
  scope: string,
  options: {
    index?: number;
    lines?: string[];
    logBytes?: Buffer;
    /** Write the log at this path instead (a large one, in pieces); says what it wrote. */
    writeLog?: (path: string) => { digest: string; bytes: number; lines: number };
  } = {},
) {
  const index = options.index ?? 1;
  const handle = `20261201T0340${String(index % 60).padStart(2, "0")}Z-${(0x1000_0000 + index).toString(16).slice(-8)}`;
  const job = `job-${index}`;
  const resolution = `sha256-${"ab".repeat(32)}`;
  const dispatch = await audit(scope, {
    action: "dispatch",
    subject: { job, resolution },
    outcome: "ok",
    details: { exec: true },
  });
  const start = await audit(scope, {
    action: "run-start",
    subject: { handle, job, resolution },
    outcome: "ok",
    details: { dispatchAudit: { seq: dispatch.seq, hash: dispatch.hash } },
  });
  const lines = options.lines ?? [`line one of run ${index}`, `line two of run ${index}`];
  const dir = join(scope, ".agents", "runs", handle);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(join(scope, ".agents", "runs"), 0o700);
  const written = options.writeLog?.(join(dir, "log"));
  // A log written by writeLog is on disk only: the record seals what writeLog says of it.
  const log = written
    ? Buffer.alloc(0)
    : (options.logBytes ??
      Buffer.from(
        `${lines.map((text, n) => `2026-12-01T03:40:0${n}.00000${index % 10}Z out ${text}\n`).join("")}# ` +
          `exit: code 0\n# RESULT: OK\n`,
        "utf8",
      ));
  const record: RunRecord = {
    format: "oats.run.v1",
    handle,
    job,
    resolution,
    composition: { kind: "composition", key: "probe", integrity: `oats.json.v1:sha256-${"cd".repeat(32)}` },
    approval: { seq: 1, hash: `sha256-${"ef".repeat(32)}` },
    dispatchAudit: { seq: dispatch.seq, hash: dispatch.hash },
    startAudit: { seq: start.seq, hash: start.hash },
    principal: "root@test",
    harness: null,
    classification: "public",
    environment: ["PATH"],
    startedAt: "2026-12-01T03:40:00.000000Z",
    endedAt: "2026-12-01T03:40:02.000000Z",
    exit: { code: 0, signal: null },
    result: "OK",
    log: written ?? { digest: bytesDigest(log), lines: lines.length, bytes: log.length },
    redactions: [],
    evidence: { required: ["log"], captured: ["log"], gaps: [], status: "complete" },
    delivery: { posture: "none", to: null },
  };
  const { bytes: recordBytes, id: runId } = sealRecord(record);
  if (!written) writeFileSync(join(dir, "log"), log);
  writeFileSync(join(dir, "record.json"), recordBytes);
  const end = await audit(scope, {
    action: "run-end",
    subject: { handle, job, resolution },
    outcome: "ok",
    details: { runId, exit: { code: 0, signal: null }, result: "OK" },
  });
  return { handle, runId, dir, recordBytes, log, seqs: [dispatch.seq, start.seq, end.seq] };
}
