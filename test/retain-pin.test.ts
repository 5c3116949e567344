/**
 * What a user retains by hand is kept: an explicit `oats retain` pins the revision it names, so `gc --delete` never
 * removes it, and `--no-pin` leaves it to gc as before.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { test } from "node:test";
import { fixtureCopy, runOats, tempDir } from "./helpers.js";

function retain(scope: string, extra: string[]): { ref: string; dir: string; pinned: unknown } {
  const run = runOats([
    "--json",
    "--scope",
    scope,
    "retain",
    fixtureCopy(),
    "--kind",
    "capture",
    "--id",
    "kept",
    ...extra,
  ]);
  assert.equal(run.status, 0, run.stderr);
  const result = JSON.parse(run.stdout).result;
  return {
    ref: `capture:kept@${result.integrity.format}:${result.integrity.value}`,
    dir: result.dir,
    pinned: result.pinned,
  };
}

test("an explicit retain pins its revision: gc --delete --grace 0 keeps it until it is unpinned", () => {
  const scope = tempDir();
  const { ref, dir, pinned } = retain(scope, []);
  assert.equal(pinned, true);
  const pins = runOats(["--quiet", "--scope", scope, "pins"]);
  assert.equal(pins.stdout.trim(), ref);
  const gc = runOats(["--scope", scope, "gc", "--delete", "--grace", "0"]);
  assert.equal(gc.status, 0, gc.stderr);
  assert.ok(existsSync(dir), "a pinned revision survives gc");
  assert.equal(runOats(["--scope", scope, "unpin", ref]).status, 0);
  assert.equal(runOats(["--scope", scope, "gc", "--delete", "--grace", "0"]).status, 0);
  assert.equal(existsSync(dir), false, "once unpinned, gc collects it");
});

test("retain --no-pin leaves the revision to gc; the human output says what was pinned", () => {
  const scope = tempDir();
  const { dir, pinned } = retain(scope, ["--no-pin"]);
  assert.equal(pinned, false);
  assert.equal(runOats(["--quiet", "--scope", scope, "pins"]).stdout.trim(), "");
  assert.equal(runOats(["--scope", scope, "gc", "--delete", "--grace", "0"]).status, 0);
  assert.equal(existsSync(dir), false);
  const human = runOats(["--scope", tempDir(), "retain", fixtureCopy(), "--kind", "capture", "--id", "kept"]);
  assert.equal(human.status, 0, human.stderr);
  assert.match(
    human.stdout,
    /\n {2}pinned {4}capture:kept@oats\.tree-exec\.v1:sha256-[0-9a-f]{64} \(oats unpin lets gc/,
  );
});
