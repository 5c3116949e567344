/**
 * One side of gc races in its own OS process, for
 * test/lifecycle-races.test.ts: a worker (workers.ts) that loads once and
 * then runs one request a line, each a deleting gc or one publisher or
 * dispatcher.
 *
 *   node --import tsx test/support/race-child.ts   (requests on stdin)
 *
 * Request: {op, scope, delayMs?, ...} where op is one of
 *   gc                 gc --delete with no grace
 *   prepare            prepare(scope, plan)
 *   capture-prepare    prepareCapture(scope, spec)
 *   retain             retainTree(scope, {kind: "capture", key, source})
 *   retain-tarball     retainTarball(scope, tarball, {kind: "capture", key})
 *   import             importBundle(scope, bundle)
 *   queue              addJob(scope, {job, resolution}, {replace: true})
 *   pin                pin(scope, ref)
 *   repair             repair(scope, ref, {from})
 *   put-blob           putBlob(scope, text)
 *   dispatch           resolveQueuedCapture(scope, job), the plan discarded (dispatch without --exec)
 *   dispatch-exec      planQueuedRun then runDispatchPlanWithEvidence (dispatch --exec), output discarded
 * `delayMs` starts a request that much later. Outcome: one JSON line on
 * stdout a request, {"ok":true,...} or {"ok":false,"error":{...}}.
 */
import {
  addJob,
  discardDispatchPlan,
  gc,
  importBundle,
  pin,
  planQueuedRun,
  prepare,
  prepareCapture,
  putBlob,
  repair,
  resolveQueuedCapture,
  retainTarball,
  retainTree,
  runDispatchPlanWithEvidence,
} from "../../src/index.js";
import { errorPayload } from "./child-outcome.js";
import { serveRequests } from "./workers.js";
import type { JsonValue } from "../../src/core/index.js";

interface Request {
  op: string;
  scope: string;
  delayMs?: number;
  plan?: JsonValue;
  spec?: string;
  key?: string;
  source?: string;
  tarball?: string;
  bundle?: string;
  job?: string;
  resolution?: string;
  ref?: string;
  from?: string;
  text?: string;
}

async function run(request: Request): Promise<Record<string, unknown>> {
  const { scope } = request;
  switch (request.op) {
    case "gc": {
      const report = await gc(scope, { delete: true, graceMs: 0 });
      return { deleted: report.collect.map((item) => item.ref), missing: report.roots.missing };
    }
    case "prepare":
      return { id: (await prepare(scope, request.plan!)).id };
    case "capture-prepare":
      return { id: (await prepareCapture(scope, request.spec!)).id };
    case "retain":
      return { dir: (await retainTree(scope, { kind: "capture", key: request.key!, source: request.source! })).dir };
    case "retain-tarball":
      return { dir: (await retainTarball(scope, request.tarball!, { kind: "capture", key: request.key! })).dir };
    case "import": {
      const report = await importBundle(scope, request.bundle!);
      return { resolutions: report.resolutions.map((each) => each.id) };
    }
    case "queue":
      await addJob(scope, { job: request.job!, resolution: request.resolution! }, { replace: true });
      return {};
    case "pin":
      return { status: (await pin(scope, request.ref!)).status };
    case "repair":
      return { dir: (await repair(scope, request.ref!, { from: request.from! })).dir };
    case "put-blob":
      return { digest: putBlob(scope, Buffer.from(request.text!)).digest };
    case "dispatch": {
      const plan = await resolveQueuedCapture(scope, request.job!);
      await discardDispatchPlan(plan);
      return { resolution: plan.resolution };
    }
    case "dispatch-exec": {
      const plan = await planQueuedRun(scope, request.job!);
      const outcome = await runDispatchPlanWithEvidence(scope, plan, { output: "quiet" });
      return { resolution: plan.resolution, handle: outcome.handle, runId: outcome.runId, exit: outcome.exitCode };
    }
    default:
      throw new Error(`unknown op ${request.op}`);
  }
}

await serveRequests(async (request: Request) => {
  // A stagger, so that across rounds each side is sometimes first and sometimes caught in the middle of the other.
  if (request.delayMs) await new Promise((resolve) => setTimeout(resolve, request.delayMs));
  try {
    return { ok: true, ...(await run(request)) };
  } catch (error) {
    return { ok: false, error: errorPayload(error) };
  }
});
