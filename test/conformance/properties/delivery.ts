/**
 * Property 9: the finished log reaches the far side, read back from the
 * receiving end, never from the local run directory. While the far side is
 * read, the whole scope is moved away, so a reader that looked locally
 * finds nothing; the record's id and the log's digest are computed here from
 * the bytes the far side returned.
 */
import assert from "node:assert/strict";
import { renameSync } from "node:fs";
import type { DeliveredRun, DispatchOutcome, DriverScope, FarSide } from "../driver.js";
import { assertRan, captureName, digestHex, parseLogBytes, sh, sha256Hex, texts, type Property } from "./support.js";

async function readAway(
  scope: DriverScope,
  far: FarSide,
  runIds: readonly string[],
): Promise<Array<DeliveredRun | null>> {
  const away = `${scope.dir}.away`;
  renameSync(scope.dir, away);
  try {
    return await Promise.all(runIds.map((runId) => scope.readDelivered(far, runId)));
  } finally {
    renameSync(away, scope.dir);
  }
}

export const farSideDelivery: Property = {
  name: "far-side-delivery",
  title:
    "9. the finished log reaches the far side, read back from the receiving end, never from the local run directory",
  async run(context) {
    const scope = await context.scope();
    const far = await context.driver.transport.farSide();
    try {
      const passing = await scope.queue({
        name: captureName("deliver-ok"),
        script: sh("echo 'first line'", "echo 'to stderr' >&2", "printf 'last line'"),
      });
      const failing = await scope.queue({
        name: captureName("deliver-failed"),
        script: sh("echo 'failing soon'", "exit 7"),
      });
      const runs: Array<Extract<DispatchOutcome, { kind: "ran" }>> = [];
      for (const capture of [passing, failing]) {
        const outcome = await scope.dispatch(capture).done;
        assertRan(outcome, capture.name);
        runs.push(outcome);
      }
      const pushed = await scope.push(far);
      for (const run of runs)
        assert.ok(
          pushed.delivered.includes(run.runId),
          `push says it delivered ${run.runId}: ${JSON.stringify(pushed)}`,
        );

      const delivered = await readAway(
        scope,
        far,
        runs.map((run) => run.runId),
      );
      const expected = [
        { out: ["first line", "last line"], err: ["to stderr"], result: "RESULT: OK" },
        { out: ["failing soon"], err: [], result: "RESULT: FAILED" },
      ];
      delivered.forEach((copy, index) => {
        const runId = runs[index]!.runId;
        assert.ok(copy, `the far side has run ${runId}`);
        assert.equal(
          sha256Hex(copy.recordBytes),
          digestHex(runId),
          "the far side's record is the sealed record: its bytes hash to the run id",
        );
        const record = JSON.parse(copy.recordBytes.toString("utf8")) as { log: { digest: string; lines: number } };
        assert.equal(
          sha256Hex(copy.log),
          digestHex(record.log.digest),
          "the far side's log is the sealed log: its bytes hash to the record's log digest",
        );
        const log = parseLogBytes(copy.log);
        assert.deepEqual(texts(log.lines, "out"), expected[index]!.out, "the far side's log holds the lines");
        assert.deepEqual(texts(log.lines, "err"), expected[index]!.err);
        assert.equal(log.lines.length, record.log.lines);
        assert.equal(log.footer[log.footer.length - 1], expected[index]!.result, "and the footer");
      });

      // Pushing again delivers nothing new and loses nothing.
      const again = await scope.push(far);
      assert.deepEqual(again.delivered, [], `nothing is left to deliver: ${JSON.stringify(again)}`);
      const still = await readAway(
        scope,
        far,
        runs.map((run) => run.runId),
      );
      assert.ok(
        still.every((copy) => copy !== null),
        "the far side still has both runs",
      );
    } finally {
      await far.cleanup();
    }
  },
};
