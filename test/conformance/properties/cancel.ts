/**
 * Property 8: a cancelled run keeps what it captured. Cancel (the `run
 * cancel` command, SIGINT or SIGTERM to the dispatcher) takes the whole
 * process tree, a grandchild started after the run began included; the log
 * stops growing, which is proved here by watching the file's size through
 * the path the driver gives, not by asking the driver; and the run ends
 * with RESULT: CANCELLED, keeping the lines captured before.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { CancelVia, DriverScope } from "../driver.js";
import {
  alive,
  assertRan,
  captureName,
  fileSize,
  readPid,
  sh,
  shQuote,
  texts,
  waitFor,
  within,
  type Property,
  type PropertyContext,
} from "./support.js";

/** How long after the cancel is asked for the log must have stopped growing (a `run cancel` is a process start, slow
 * on a loaded machine). */
const SETTLE_MS = 15_000;
/** The grandchild ticks for about 40 s, so a tree that was not taken keeps the log growing well past SETTLE_MS. */
const TICKS = 400;

async function cancelled(context: PropertyContext, scope: DriverScope, via: CancelVia): Promise<void> {
  const dir = context.tempDir("oats-conf-cancel-");
  const grandchildPid = join(dir, "grandchild.pid");
  const capture = await scope.queue({
    name: captureName(`cancel-${via.toLowerCase()}`),
    script: sh(
      "echo started",
      "sleep 0.3",
      // Started after the run began; a background job of a non-interactive shell stays in its process group.
      `( i=0; while [ $i -lt ${TICKS} ]; do echo "tick $i"; i=$((i+1)); sleep 0.1; done ) &`,
      `echo $! > ${shQuote(grandchildPid)}`,
      "wait",
      "echo finished",
    ),
  });
  const dispatch = scope.dispatch(capture);
  let pid: number | null = null;
  try {
    const log = await within(`${via}: the run's log`, dispatch.logPath(), 30_000);
    pid = await waitFor(`${via}: the grandchild's pid`, () => readPid(grandchildPid));
    await waitFor(`${via}: the grandchild's ticks in the log`, () => readFileSync(log, "utf8").includes("tick 3"));
    const growing = fileSize(log);
    await waitFor(`${via}: the log to grow before the cancel`, () => fileSize(log) > growing, 10_000);

    // Watched from the moment the cancel is asked for (a `run cancel` may wait for the seal before it returns).
    const cancelling = dispatch.cancel(via);
    cancelling.catch(() => undefined); // awaited below; a failure before then must not go unhandled
    // Stopped: two samples a second apart agree, within SETTLE_MS of the cancel.
    const deadline = Date.now() + SETTLE_MS;
    let settled = false;
    let last = fileSize(log);
    while (Date.now() < deadline) {
      await sleep(1_000);
      const now = fileSize(log);
      if (now === last) {
        settled = true;
        break;
      }
      last = now;
    }
    assert.ok(settled, `${via}: the log still grew ${SETTLE_MS} ms after the cancel`);
    await within(`${via}: the cancel to return`, cancelling, 60_000);

    const outcome = await within(`${via}: the dispatch to end`, dispatch.done, 30_000);
    assertRan(outcome, `${via}: the cancelled dispatch`);
    await waitFor(`${via}: the grandchild to be gone`, () => !alive(pid!), 5_000);
    const sealed = fileSize(log);
    await sleep(1_000);
    assert.equal(fileSize(log), sealed, `${via}: once sealed, the log never grows`);

    assert.equal(outcome.result, "CANCELLED", `${via}: the dispatch says CANCELLED`);
    const run = await scope.readRun(outcome.runId);
    assert.equal(run.result, "CANCELLED", `${via}: the run says CANCELLED`);
    assert.equal(
      run.footer[run.footer.length - 1],
      "RESULT: CANCELLED",
      `${via}: the footer ends with RESULT: CANCELLED`,
    );
    const out = texts(run.lines, "out");
    assert.equal(out[0], "started", `${via}: the lines before the cancel are kept`);
    assert.ok(out.includes("tick 3"), `${via}: the grandchild's lines before the cancel are kept`);
    assert.equal(out.includes("finished"), false, `${via}: the child did not run on after the cancel`);
    assert.ok(!out.includes(`tick ${TICKS - 1}`), `${via}: the grandchild did not tick to its end`);
  } finally {
    // The suite's own hygiene, whatever the implementation did: only the pid this test's script recorded.
    if (pid !== null && alive(pid)) process.kill(pid, "SIGKILL");
    await dispatch.done.catch(() => undefined);
  }
}

export const cancelTakesTree: Property = {
  name: "cancel-takes-tree",
  title:
    "8. cancel (run cancel, SIGINT or SIGTERM to the dispatcher) takes the " +
    "whole process tree, the log stops growing (watched by size), and it " +
    "ends RESULT: CANCELLED keeping what it captured",
  async run(context) {
    context.diagnostic(`signals go to: ${context.driver.dispatcher}`);
    const scope = await context.scope();
    const vias: CancelVia[] = ["command", "SIGINT", "SIGTERM"];
    const results = await Promise.allSettled(vias.map((via) => cancelled(context, scope, via)));
    const failures = results.flatMap((result, index) =>
      result.status === "rejected" ? [`${vias[index]}: ${(result.reason as Error).message}`] : [],
    );
    assert.deepEqual(failures, [], failures.join("\n"));
  },
};
