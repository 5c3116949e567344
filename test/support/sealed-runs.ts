import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { audit, type AuditAction } from "../../src/captures/audit.js";
import { bytesDigest, canonicalJsonBytes } from "../../src/retention/digest/json.js";

/**
 * A sealed run built to the shared plan's documented shape
 * (notes/evidence-api.md: `.agents/runs/<handle>/{log,record.json}`, a
 * canonical oats.run.v1 record whose digest is the run id, run-start /
 * dispatch / run-end audit entries), for delivery tests that must not
 * depend on the run path. Real files and a real audit chain.
 */
export async function makeSealedRun(scope: string, options: { index?: number; lines?: string[]; logBytes?: Buffer } = {}) {
  const index = options.index ?? 1;
  const handle = `20261201T0340${String(index % 60).padStart(2, "0")}Z-${(0x1000_0000 + index).toString(16).slice(-8)}`;
  const job = `job-${index}`;
  const resolution = `sha256-${"ab".repeat(32)}`;
  const start = await audit(scope, { action: "run-start" as AuditAction, subject: { handle, job, resolution }, outcome: "ok" });
  const dispatch = await audit(scope, { action: "dispatch", subject: { job, resolution }, outcome: "ok", details: { exec: true } });
  const lines = options.lines ?? [`line one of run ${index}`, `line two of run ${index}`];
  const log =
    options.logBytes ??
    Buffer.from(`${lines.map((text, n) => `2026-12-01T03:40:0${n}.00000${index % 10}Z out ${text}\n`).join("")}# exit: code 0\n# RESULT: OK\n`, "utf8");
  const record = {
    format: "oats.run.v1",
    handle,
    job,
    resolution,
    composition: `sha256-${"cd".repeat(32)}`,
    approval: { seq: 1, hash: `sha256-${"ef".repeat(32)}` },
    dispatchAudit: { seq: dispatch.seq, hash: dispatch.hash },
    startAudit: { seq: start.seq, hash: start.hash },
    principal: "root@test",
    harness: null,
    startedAt: "2026-12-01T03:40:00.000000Z",
    endedAt: "2026-12-01T03:40:02.000000Z",
    exit: { code: 0, signal: null },
    result: "OK",
    log: { digest: bytesDigest(log), lines: lines.length, bytes: log.length },
    redactions: [],
    evidence: { required: ["log"], captured: ["log"], gaps: [], status: "complete" },
    delivery: { posture: "none", to: null },
  };
  const recordBytes = canonicalJsonBytes(record);
  const runId = `oats.json.v1:${bytesDigest(recordBytes).slice("sha256-".length)}`;
  const dir = join(scope, ".agents", "runs", handle);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(join(scope, ".agents", "runs"), 0o700);
  writeFileSync(join(dir, "log"), log);
  writeFileSync(join(dir, "record.json"), recordBytes);
  const end = await audit(scope, { action: "run-end" as AuditAction, subject: { handle, run: runId }, outcome: "ok", details: { exit: { code: 0, signal: null }, result: "OK" } });
  return { handle, runId, dir, recordBytes, log, seqs: [start.seq, dispatch.seq, end.seq] };
}
