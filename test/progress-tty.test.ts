import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { CLEAR } from "../src/cli/support/progress.js";
import { runOats, tempDir } from "./helpers.js";
import { makeBigTree, runOatsPty } from "./support/big-tree.js";

// The CLI under a real pseudo-terminal: what a person at a terminal sees.

const source = makeBigTree(join(tempDir(), "src"), 20, 100);

function progressWrites(output: string): string[] {
  return output
    .split(CLEAR)
    .slice(1)
    .map((piece) => piece.split(/\r?\n/)[0]!);
}

test(
  "on a terminal, retain shows named phases with files of the total, cut " +
    "to the width, and clears the line before its result",
  async () => {
    const scope = tempDir();
    const run = await runOatsPty(["--scope", scope, "retain", source, "--kind", "capture", "--id", "big"], {
      cols: 60,
    });
    assert.equal(run.status, 0, run.output);
    const lines = progressWrites(run.output).filter((line) => line !== "");
    assert.ok(lines.length > 0, run.output);
    assert.match(lines[0]!, /^oats: retain big: read-copy {2}files 0\/2000 {2}0 B$/);
    for (const phase of ["sync", "verify", "publish"])
      assert.ok(
        lines.some((line) => line.startsWith(`oats: retain big: ${phase}`)),
        `${phase} in ${JSON.stringify(lines)}`,
      );
    for (const line of lines) assert.ok(line.length <= 59, `longer than the terminal: ${JSON.stringify(line)}`);
    // The last thing before the result is the clear sequence: no progress text is left on the screen.
    const result = run.output.indexOf("retained capture big");
    assert.ok(result > 0, run.output);
    assert.ok(
      run.output.slice(0, result).endsWith(CLEAR),
      JSON.stringify(run.output.slice(Math.max(0, result - 80), result)),
    );
  },
);

test("on a terminal, --json and --quiet show no progress line", async () => {
  for (const mode of ["--json", "--quiet"]) {
    const scope = tempDir();
    const run = await runOatsPty([mode, "--scope", scope, "retain", source, "--kind", "capture", "--id", "big"]);
    assert.equal(run.status, 0, run.output);
    assert.ok(!run.output.includes(CLEAR), `${mode}: ${JSON.stringify(run.output.slice(0, 200))}`);
    assert.ok(!run.output.includes("read-copy"), mode);
  }
});

test("with stderr not a terminal there is no progress line", () => {
  const scope = tempDir();
  const run = runOats(["--scope", scope, "retain", source, "--kind", "capture", "--id", "big"]);
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stderr, "");
  assert.ok(!run.stdout.includes(CLEAR));
});
