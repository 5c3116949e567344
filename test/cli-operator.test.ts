/**
 * Operator experience through real child processes (dist/cli/bin.js; `npm
 * run build` first): refusal codes an operator meets first, the remedy line
 * chosen by what actually failed, every validation problem listed, `-` for
 * stdin/stdout, completion, help and version, and `oats ls` details.
 */
import assert from "node:assert/strict";
import { cpSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { FIXTURE_PAYLOAD, runOats, snapshotTree, tempDir } from "./helpers.js";

type Envelope = {
  schemaVersion: number;
  ok: boolean;
  command: string | null;
  result?: Record<string, any>;
  error?: { code: string; kind: string; message: string; details: Record<string, any> };
};

type RunOptions = Parameters<typeof runOats>[1];

export function runJson(args: string[], options: RunOptions = {}) {
  const run = runOats(["--json", ...args], options);
  assert.match(run.stdout, /^[^\n]+\n$/, `exactly one line on stdout, got ${JSON.stringify(run.stdout)} (stderr ${run.stderr})`);
  return { ...run, envelope: JSON.parse(run.stdout) as Envelope };
}

function refusal(args: string[], code: string, exit: number, options: RunOptions = {}) {
  const run = runJson(args, options);
  assert.equal(run.status, exit, run.stdout + run.stderr);
  assert.equal(run.envelope.ok, false);
  assert.equal(run.envelope.error!.code, code, run.stdout);
  return run.envelope.error!;
}

function sourceWith(make: (dir: string) => void): string {
  const dir = join(tempDir("oats-src-"), "tree");
  cpSync(FIXTURE_PAYLOAD, dir, { recursive: true, verbatimSymlinks: true });
  make(dir);
  return dir;
}

describe("symlinks in a source: absolute ones are artifact-not-contained, as upstream expects", () => {
  for (const [name, target] of [
    ["pointing back into the tree", (dir: string) => join(dir, "oats.json")],
    ["pointing outside", () => "/etc/hostname"],
  ] as const) {
    test(`an absolute symlink ${name} is refused (exit 4, reason absolute-symlink) and nothing is stored`, () => {
      const source = sourceWith((dir) => symlinkSync(target(dir), join(dir, "abs-link")));
      const scope = tempDir("oats-scope-");
      const before = snapshotTree(scope);
      const error = refusal(["--scope", scope, "retain", source, "--id", "demo.abs", "--kind", "capture"], "artifact-not-contained", 4);
      assert.equal(error.details["reason"], "absolute-symlink");
      assert.equal(error.details["path"], "abs-link");
      assert.deepEqual(snapshotTree(scope), before);
    });
  }
});
