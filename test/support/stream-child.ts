import { readFileSync, writeFileSync } from "node:fs";
import { pushEvidence, receiveRun } from "../../src/index.js";

/**
 * One push (the outbox sweep included: the sealed run is queued, then put and
 * read back) or one pull of a run, in a process of its own, reporting how far
 * its peak resident set grew while it ran: the peak is reset just before
 * (`5` to /proc/self/clear_refs), so the growth is the operation's own.
 *
 *   stream-child.ts push <scope> <to>
 *   stream-child.ts pull <scope> <from> <run id>
 */

const [mode, scope, to, runId] = process.argv.slice(2) as [string, string, string, string?];

function status(field: "VmRSS" | "VmHWM"): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(readFileSync("/proc/self/status", "utf8"));
  return Number(match![1]) * 1024;
}

globalThis.gc?.();
writeFileSync("/proc/self/clear_refs", "5");
const before = status("VmRSS");
let outcome: unknown;
if (mode === "push") {
  const result = await pushEvidence(scope, { to, allowSameFilesystem: true, insecure: true });
  outcome = { delivered: result.delivered.length, refused: result.refused.length };
} else {
  const report = await receiveRun(scope, to, runId!, { insecure: true });
  outcome = { status: report.status };
}
const peak = status("VmHWM");
process.stdout.write(`${JSON.stringify({ outcome, before, peak, growth: peak - before })}\n`);
