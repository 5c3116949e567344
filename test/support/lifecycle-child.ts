/**
 * gc or prepare in its own OS process, for the gc race test.
 *
 *   node --import tsx test/support/lifecycle-child.ts '<json request>'
 *
 * Request: {op: "gc", scope} (gc --delete with no grace) or
 * {op: "prepare", scope, plan} or {op: "retain", scope, source, key} (a capture tree);
 * `delayMs` starts it that much after the others. The child loads everything, says
 * "ready"
 * and waits for the start line (go.ts), so both start at the same moment.
 * Outcome: one JSON line on stdout, {"ok":true,...} or {"ok":false,"error":{...}}.
 */
import { gc, prepare, retainTree } from "../../src/index.js";
import { waitForGo } from "./go.js";
import { reportFailure } from "./child-outcome.js";
import type { JsonValue } from "../../src/core/index.js";

const request = JSON.parse(process.argv[2] ?? "{}") as {
  op: "gc" | "prepare" | "retain";
  scope: string;
  plan?: JsonValue;
  source?: string;
  key?: string;
  delayMs?: number;
};

await waitForGo();
// A stagger, so that across rounds each side is sometimes first and sometimes caught in the middle of the other.
if (request.delayMs) await new Promise((resolve) => setTimeout(resolve, request.delayMs));
try {
  if (request.op === "gc") {
    const report = await gc(request.scope, { delete: true, graceMs: 0 });
    process.stdout.write(`${JSON.stringify({ ok: true, deleted: report.collect.map((item) => item.ref) })}\n`);
  } else if (request.op === "retain") {
    const receipt = await retainTree(request.scope, { kind: "capture", key: request.key!, source: request.source! });
    process.stdout.write(`${JSON.stringify({ ok: true, status: receipt.status, dir: receipt.dir })}\n`);
  } else {
    const result = await prepare(request.scope, request.plan!);
    process.stdout.write(`${JSON.stringify({ ok: true, id: result.id, status: result.status })}\n`);
  }
} catch (error) {
  reportFailure(error);
}
