/**
 * A dispatcher in its own OS process, for the captures scenario "two
 * dispatchers resolving the same job at once".
 *
 *   node --import tsx test/support/dispatch-child.ts '<json request>'
 *
 * Request: { scope, job, lockWaitMs? }. The child loads everything, writes
 * "ready" on stderr and waits for a line on stdin (test/support/go.ts), so a
 * test can release several children at once; then it calls
 * resolveQueuedCapture (it never runs the plan, and discards its run copy). Credentials come from this
 * process's own environment. The outcome is one JSON line on stdout:
 * {"ok":true,"plan":{...}} (exit 0) or {"ok":false,"error":{...}} (exit 1).
 */
import { discardDispatchPlan, resolveQueuedCapture } from "../../src/index.js";
import { waitForGo } from "./go.js";
import { reportFailure } from "./child-outcome.js";

interface Request {
  scope: string;
  job: string;
  lockWaitMs?: number;
}

const request = JSON.parse(process.argv[2] ?? "{}") as Request;

async function main(): Promise<void> {
  await waitForGo();
  try {
    const plan = await resolveQueuedCapture(
      request.scope,
      request.job,
      request.lockWaitMs === undefined ? {} : { lockWaitMs: request.lockWaitMs },
    );
    // Never run: the plan's private copy is discarded, as the CLI does without --exec.
    await discardDispatchPlan(plan);
    process.stdout.write(`${JSON.stringify({ ok: true, plan })}\n`);
  } catch (error) {
    reportFailure(error);
  }
}

await main();
