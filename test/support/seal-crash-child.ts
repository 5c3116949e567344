/**
 * A dispatcher that dies by SIGKILL in the middle of its seal: after the
 * footer is on the log and before the record is linked (the `record` fault
 * point), the one window a crash leaves a footer without a record.
 *
 *   node --import tsx test/support/seal-crash-child.ts '<json request>'
 *
 * Request: { scope, job }. The child resolves the queued job with --exec and
 * runs it with evidence; it never returns normally.
 */
import { planQueuedRun, runDispatchPlanWithEvidence } from "../../src/index.js";
import { setFaultHook } from "../../src/retention/store/faults.js";

const request = JSON.parse(process.argv[2] ?? "{}") as { scope: string; job: string };

setFaultHook((step) => {
  if (step === "record") process.kill(process.pid, "SIGKILL");
});
const plan = await planQueuedRun(request.scope, request.job);
await runDispatchPlanWithEvidence(request.scope, plan, { output: "quiet" });
process.stdout.write("sealed: the fault point was never reached\n");
