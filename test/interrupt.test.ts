import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { existsSync, readdirSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { REPO, runOats, snapshotTree, tempDir } from "./helpers.js";
import { makeBigTree, runOatsPty } from "./support/big-tree.js";

// Ctrl-C during retain, import and export, for real: the built CLI under a
// pseudo-terminal, SIGINT from the terminal's line discipline.

// Large enough that the copy outlasts its first progress line (drawn after 250 ms) by far: Ctrl-C is typed when
// that line appears, and a copy that ends before the signal is handled would draw the next phase's line.
// At 4,000 files, once the native reads took runs across directories, a loaded machine met that race.
const source = makeBigTree(join(tempDir(), "src"), 120, 100);

/** A scope whose stores already hold something, so "as before" is not just "empty". */
function populatedScope(): string {
  const scope = tempDir();
  const small = join(tempDir(), "small");
  mkdirSync(small);
  execFileSync("sh", ["-c", 'printf one > "$1/a"; printf two > "$1/b"', "sh", small]);
  const retained = runOats(["--scope", scope, "retain", small, "--kind", "capture", "--id", "small"]);
  assert.equal(retained.status, 0, retained.stderr);
  return scope;
}

function removedPaths(output: string, what: string): string[] {
  return [...output.matchAll(new RegExp(`oats: interrupted: removed ${what} (\\S+)`, "g"))].map((match) => match[1]!);
}

test(
  "Ctrl-C during retain of a directory removes the staging, says so, exits " + "130 and leaves the store as it was",
  async () => {
    const scope = populatedScope();
    const before = snapshotTree(scope);
    const run = await runOatsPty(["--scope", scope, "retain", source, "--kind", "capture", "--id", "big"], {
      interruptOn: "read-copy",
    });
    assert.equal(run.status, 130, run.output);
    const removed = removedPaths(run.output, "staging");
    assert.equal(removed.length, 1, run.output);
    assert.match(removed[0]!, /\/\.agents\/captures\/artifacts\/big\/tree-exec-v1\/\.staging-/);
    assert.equal(existsSync(removed[0]!), false);
    // It stopped at the next file: after the terminal echoed the Ctrl-C, no further progress was drawn (updates are 250
    // ms apart; a file takes microseconds).
    const echoed = run.output.indexOf("^C");
    assert.ok(echoed > 0, run.output);
    assert.doesNotMatch(run.output.slice(echoed), /oats: retain big: /);
    // The progress line was cleared before the message.
    assert.match(run.output, /\r\x1b\[2Koats: interrupted: removed staging /);
    assert.deepEqual(snapshotTree(scope), before);
  },
);

test("Ctrl-C pressed twice during retain still removes the whole staging and exits 130", async () => {
  const scope = populatedScope();
  const before = snapshotTree(scope);
  const run = await runOatsPty(["--scope", scope, "retain", source, "--kind", "capture", "--id", "big"], {
    interruptOn: "read-copy",
    twice: true,
  });
  assert.equal(run.status, 130, run.output);
  assert.equal(removedPaths(run.output, "staging").length, 1, run.output);
  assert.deepEqual(snapshotTree(scope), before);
});

/** The built CLI retaining the big tree into `scope`, stopped by `signal` once its staging directory exists. */
async function retainStoppedBy(
  scope: string,
  signal: "SIGINT" | "SIGTERM" | "SIGHUP",
  json: boolean,
): Promise<{ status: number | null; stdout: string; stderr: string; parent: string }> {
  const child = spawn(
    process.execPath,
    [
      join(REPO, "dist/cli/bin.js"),
      ...(json ? ["--json"] : []),
      "--scope",
      scope,
      "retain",
      source,
      "--kind",
      "capture",
      "--id",
      "big",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => (stdout += chunk));
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const parent = join(scope, ".agents/captures/artifacts/big/tree-exec-v1");
  // Wait for the staging directory to appear, then stop the command.
  while (!(existsSync(parent) && readdirSync(parent).some((name) => name.startsWith(".staging-")))) {
    assert.equal(child.exitCode, null, `finished before staging appeared: ${stdout}${stderr}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  child.kill(signal);
  const status = await new Promise<number | null>((resolve) => child.on("close", resolve));
  return { status, stdout, stderr, parent };
}

for (const [signal, exit] of [
  ["SIGINT", 130],
  ["SIGTERM", 143],
  ["SIGHUP", 129],
] as const) {
  const title = `${signal} under --json: one envelope, error interrupted naming the signal and what it removed`;
  test(`${title}, exit ${exit}`, async () => {
    const scope = populatedScope();
    const before = snapshotTree(scope);
    const { status, stdout, stderr, parent } = await retainStoppedBy(scope, signal, true);
    assert.equal(status, exit, stderr);
    const lines = stdout.trim().split("\n");
    assert.equal(lines.length, 1, stdout);
    const envelope = JSON.parse(lines[0]!);
    assert.equal(envelope.ok, false);
    assert.equal(envelope.command, "retain");
    assert.equal(envelope.error.code, "interrupted");
    assert.equal(envelope.error.kind, "interrupted");
    assert.equal(envelope.error.details.signal, signal);
    assert.equal(envelope.error.details.removed.length, 1);
    assert.equal(envelope.error.details.removed[0].what, "staging");
    assert.ok(envelope.error.details.removed[0].path.startsWith(parent));
    assert.deepEqual(snapshotTree(scope), before);
  });
}

test("SIGTERM and SIGHUP without --json say what they removed, as Ctrl-C does, store as it was", async () => {
  for (const [signal, exit] of [
    ["SIGTERM", 143],
    ["SIGHUP", 129],
  ] as const) {
    const scope = populatedScope();
    const before = snapshotTree(scope);
    const { status, stdout, stderr } = await retainStoppedBy(scope, signal, false);
    assert.equal(status, exit, `${signal}: ${stdout}${stderr}`);
    assert.equal(removedPaths(stderr, "staging").length, 1, stderr);
    assert.deepEqual(snapshotTree(scope), before, signal);
  }
});

test("Ctrl-C during retain of a package tarball removes the extraction directory", async () => {
  const scope = populatedScope();
  const work = tempDir();
  mkdirSync(join(work, "package"));
  execFileSync("cp", ["-a", `${source}/.`, join(work, "package")]);
  const tarball = join(work, "big.tgz");
  execFileSync("tar", ["-czf", tarball, "-C", work, "package"]);
  const before = snapshotTree(scope);
  const run = await runOatsPty(["--scope", scope, "retain", tarball, "--kind", "capture", "--id", "big"], {
    interruptOn: "extract",
  });
  assert.equal(run.status, 130, run.output);
  const removed = removedPaths(run.output, "extraction");
  assert.equal(removed.length, 1, run.output);
  assert.match(removed[0]!, /\/\.agents\/extract\/\.staging-/);
  assert.deepEqual(snapshotTree(scope), before);
});

test(
  "Ctrl-C during export removes the temporary bundle file and writes no " +
    "bundle; during import, the extraction directory",
  async () => {
    const from = tempDir();
    const retained = runOats(["--json", "--scope", from, "retain", source, "--kind", "capture", "--id", "big"]);
    assert.equal(retained.status, 0, retained.stderr);
    const integrity = JSON.parse(retained.stdout).result.integrity as { format: string; value: string };
    const ref = `capture:big@${integrity.format}:${integrity.value}`;
    const out = tempDir();
    const bundle = join(out, "big.tar");

    const beforeExport = snapshotTree(from);
    const interrupted = await runOatsPty(["--scope", from, "export", ref, "-o", bundle], { interruptOn: "export" });
    assert.equal(interrupted.status, 130, interrupted.output);
    const temp = removedPaths(interrupted.output, "temp");
    assert.equal(temp.length, 1, interrupted.output);
    assert.match(temp[0]!, /\/\.big\.tar\.partial-/);
    assert.deepEqual(readdirSync(out), []);
    assert.deepEqual(snapshotTree(from), beforeExport);

    const exported = runOats(["--scope", from, "export", ref, "-o", bundle]);
    assert.equal(exported.status, 0, exported.stderr);
    const scope = populatedScope();
    const before = snapshotTree(scope);
    const run = await runOatsPty(["--scope", scope, "import", bundle], { interruptOn: "extract" });
    assert.equal(run.status, 130, run.output);
    const removed = removedPaths(run.output, "extraction");
    assert.equal(removed.length, 1, run.output);
    assert.deepEqual(snapshotTree(scope), before);
  },
);
