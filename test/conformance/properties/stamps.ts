/**
 * Properties 1 and 2: a stamp per line, taken when the line is read; a real
 * gap in the source is a gap in the log.
 */
import assert from "node:assert/strict";
import type { DriverScope, Script } from "../driver.js";
import { assertRan, captureName, node, sh, stampMicros, texts, type Property } from "./support.js";

async function runLines(scope: DriverScope, prefix: string, script: Script) {
  const capture = await scope.queue({ name: captureName(prefix), script });
  const before = Date.now();
  const outcome = await scope.dispatch(capture).done;
  const after = Date.now();
  assertRan(outcome, prefix);
  const run = await scope.readRun(outcome.runId);
  return { run, before, after };
}

/** Microseconds between consecutive stamps of `lines` whose text is in `wanted`, in order. */
function stampsOf(lines: readonly { at: string; text: string }[], wanted: readonly string[]): number[] {
  return wanted.map((text) => {
    const line = lines.find((candidate) => candidate.text === text);
    assert.ok(line, `the log has the line ${JSON.stringify(text)}; it has ${JSON.stringify(lines.map((l) => l.text))}`);
    return stampMicros(line.at);
  });
}

function assertSpacedBySeconds(stamps: number[], what: string): void {
  for (let i = 1; i < stamps.length; i += 1) {
    const gap = stamps[i]! - stamps[i - 1]!;
    // A second between the writes: a stamp taken when the line is read is
    // about a second after the previous one, one taken at a flush is not.
    // Half a second, not one: under load the earlier line may be read late.
    assert.ok(gap >= 500_000, `${what}: lines written a second apart are stamped ${gap} us apart`);
  }
}

export const stampPerLine: Property = {
  name: "stamp-per-line",
  timing: true,
  title: "1. every captured line carries a distinct UTC stamp, taken when the line is read, not when a buffer flushes",
  async run(context) {
    const scope = await context.scope();
    const [shell, script, burst] = await Promise.all([
      runLines(scope, "stamps-sh", sh("echo one", "sleep 1", "echo two", "sleep 1", "echo three")),
      // Node writes to a pipe asynchronously; each line must still be stamped when it arrives.
      runLines(
        scope,
        "stamps-node",
        node(
          "console.log('one');",
          "setTimeout(() => {",
          "  console.log('two');",
          "  setTimeout(() => console.log('three'), 1000);",
          "}, 1000);",
        ),
      ),
      // 400 lines in one write: they arrive in one chunk and still get 400 different stamps.
      runLines(
        scope,
        "stamps-burst",
        sh(`printf '${Array.from({ length: 400 }, (_, i) => `burst ${i}\\n`).join("")}'`),
      ),
    ]);

    for (const [what, { run, before, after }] of [
      ["sh", shell],
      ["node", script],
    ] as const) {
      assert.deepEqual(texts(run.lines), ["one", "two", "three"], `${what}: exactly the three lines`);
      const stamps = stampsOf(run.lines, ["one", "two", "three"]);
      assertSpacedBySeconds(stamps, what);
      // UTC and in the run's time: within the dispatch's own window (a second of slack each side for
      // clock granularity).
      for (const stamp of stamps) {
        assert.ok(
          stamp >= (before - 1000) * 1000 && stamp <= (after + 1000) * 1000,
          `${what}: stamp ${stamp} us lies within the dispatch (${before}..${after} ms)`,
        );
      }
    }

    const { run } = burst;
    assert.equal(run.lines.length, 400, "all 400 lines of the burst are captured");
    const stamps = run.lines.map((line) => stampMicros(line.at));
    assert.equal(new Set(run.lines.map((line) => line.at)).size, 400, "400 lines, 400 distinct stamps");
    for (let i = 1; i < stamps.length; i += 1)
      assert.ok(
        stamps[i]! > stamps[i - 1]!,
        `stamps strictly increase: line ${i} ${run.lines[i]!.at} after ${run.lines[i - 1]!.at}`,
      );
    assert.deepEqual(
      texts(run.lines),
      Array.from({ length: 400 }, (_, i) => `burst ${i}`),
      "in the order written",
    );
  },
};

export const gapPreserved: Property = {
  name: "gap-preserved",
  timing: true,
  title: "2. a real gap in the source appears as a gap in the log: a 3 s sleep shows as a 3 to 8 s gap",
  async run(context) {
    const scope = await context.scope();
    // A line and a second first: the gap is measured once the run is in its stride, not against its start-up.
    const measure = async () => {
      const { run } = await runLines(
        scope,
        "gap",
        sh("echo warming up", "sleep 1", "echo before", "sleep 3", "echo after"),
      );
      const [before, after] = stampsOf(run.lines, ["before", "after"]);
      return after! - before!;
    };
    // 2.5 s, not 3: a stamp is taken when the dispatcher reads the line, and on
    // an overloaded machine the first line may be read late (seen: 2.86 s at
    // load 60 and 2.33 s at load 80 on 2 cores), so a gap out of bounds is
    // measured once more. A flush-time stamp gives 0 every time.
    const within = (gap: number) => gap >= 2_500_000 && gap <= 8_000_000;
    const first = await measure();
    const gap = within(first) ? first : await measure();
    if (gap !== first) context.diagnostic(`the first gap was ${first / 1e6} s; measured again`);
    assert.ok(
      within(gap),
      `a 3 s sleep shows as a ${gap / 1e6} s gap (3 to 8 s, 2.5 s allowed for a late read; first try ${first / 1e6} s)`,
    );
  },
};
