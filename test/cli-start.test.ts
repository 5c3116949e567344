/**
 * The CLI's fixed start cost (docs/design/performance.md, "Cold start"):
 * dist/cli/bin.js runs the bundle `npm run build` makes (dist/cli/bundle),
 * a command opens only the chunks its imports reach, and what the bundle
 * starts from tsc's files (the digest workers) still resolves. The files a
 * real child process opens are read from strace; without a working strace
 * those tests skip by name.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, REPO, fixtureCopy, runOats, tempDir } from "./helpers.js";

const BIN = join(REPO, "dist/cli/bin.js");
const BUNDLE = join(REPO, "dist/cli/bundle");
const EXEC = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
/** Unbundled, `oats digest` opened 75 files of the package and `oats verify` 221. */
const MAX_FILES = 40;

const straceWorks = spawnSync("strace", ["-f", "-e", "trace=openat", "-o", "/dev/null", process.execPath, "-e", "0"]).status === 0;

/** Run the built CLI under strace; the package files (relative to the repository) it opened. */
function traced(t: TestContext, args: string[]): { status: number | null; stdout: string; stderr: string; opened: string[] } | undefined {
  if (!straceWorks) {
    t.skip("strace is missing or cannot trace here (no ptrace): the files a CLI run opens cannot be observed");
    return undefined;
  }
  const log = join(tempDir("oats-strace-"), "trace");
  const run = spawnSync("strace", ["-f", "-qq", "-e", "trace=open,openat,openat2", "-o", log, process.execPath, BIN, ...args], { cwd: REPO, encoding: "utf8", input: "" });
  const opened = new Set<string>();
  for (const line of readFileSync(log, "utf8").split("\n")) {
    const match = /open(?:at2?)?\((?:[^,]*, )?"([^"]+)".*\) = (-?\d+)/.exec(line);
    if (!match || Number(match[2]) < 0) continue;
    const rel = relative(REPO, match[1]!);
    if (!rel.startsWith("..") && /^(dist|node_modules)\/|^package\.json$/.test(rel)) opened.add(rel);
  }
  return { status: run.status, stdout: run.stdout, stderr: run.stderr, opened: [...opened].sort() };
}

/** A bundle chunk's text holds the paths of the modules it was made from (esbuild's `// node_modules/...` lines). */
function chunkHolds(rel: string, module: string): boolean {
  return rel.startsWith("dist/cli/bundle/") && readFileSync(join(REPO, rel), "utf8").includes(`// ${module}`);
}

function retainedScope(): string {
  const scope = tempDir("oats-start-");
  const other = fixtureCopy();
  writeFileSync(join(other, "extra"), "another revision\n");
  for (const args of [["--lock", FIXTURE_LOCK, FIXTURE_PAYLOAD, "--id", "demo.hello"], [other, "--id", "demo.other"], [FIXTURE_PAYLOAD, "--id", "demo.third"]]) {
    const run = runOats(["--scope", scope, "retain", ...args]);
    assert.equal(run.status, 0, run.stderr);
  }
  return scope;
}

describe("the built CLI runs from its bundle", () => {
  test("npm run build made dist/cli/bundle/oats.mjs, and it holds commander, zod and proper-lockfile", () => {
    const files = readdirSync(BUNDLE);
    assert.ok(files.includes("oats.mjs"));
    const text = files.map((name) => readFileSync(join(BUNDLE, name), "utf8")).join("\n");
    for (const module of ["node_modules/commander/", "node_modules/zod/v4/core/", "node_modules/proper-lockfile/"]) assert.ok(text.includes(`// ${module}`), `${module} is bundled`);
    // An import of a dependency would be resolved from node_modules at run time: the bundle has none.
    const dependencies = Object.keys((JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { dependencies: Record<string, string> }).dependencies);
    assert.ok(dependencies.includes("zod"));
    for (const name of dependencies) assert.doesNotMatch(text, new RegExp(`(?:from|import\\(|require\\()\\s*["']${name}(?:/[^"']*)?["']`), name);
  });

  test("zod's locales stay out of the bundle: only English, which zod itself registers", () => {
    const text = readdirSync(BUNDLE).map((name) => readFileSync(join(BUNDLE, name), "utf8")).join("\n");
    const locales = [...text.matchAll(/\/\/ node_modules\/zod\/v4\/locales\/([\w-]+)\.js/g)].map((match) => match[1]);
    assert.deepEqual(locales, ["en"]);
  });

  test("`oats digest` opens bin.js, version.js, package.json and bundle chunks only: no node_modules, no tsc module tree, no zod, no lock library", (t) => {
    const run = traced(t, ["digest", FIXTURE_PAYLOAD]);
    if (!run) return;
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, `${EXEC}\n`);
    assert.ok(run.opened.includes("dist/cli/bundle/oats.mjs"), run.opened.join("\n"));
    assert.deepEqual(run.opened.filter((rel) => !/^dist\/cli\/(bin\.js|version\.js|bundle\/[\w-]+\.mjs)$|^package\.json$/.test(rel)), []);
    assert.ok(run.opened.length <= MAX_FILES, `${run.opened.length} files`);
    assert.deepEqual(run.opened.filter((rel) => chunkHolds(rel, "node_modules/zod/") || chunkHolds(rel, "node_modules/proper-lockfile/")), []);
  });

  test("`oats --help` loads neither zod nor the store either", (t) => {
    const run = traced(t, ["--help"]);
    if (!run) return;
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^Usage: oats /);
    assert.deepEqual(run.opened.filter((rel) => chunkHolds(rel, "node_modules/zod/") || chunkHolds(rel, "src/retention/store/")), []);
    assert.ok(run.opened.length <= MAX_FILES, `${run.opened.length} files`);
  });

  test("`oats verify`, `oats ls` and a refusal open at most a few dozen files, none outside the bundle", (t) => {
    const scope = retainedScope();
    for (const args of [
      ["--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK],
      ["--scope", scope, "--json", "ls"],
      ["--scope", scope, "verify", "demo.hello", "--integrity", `sha256-${"0".repeat(64)}`],
    ]) {
      const run = traced(t, args);
      if (!run) return;
      assert.equal(run.status, args.includes("--integrity") ? 3 : 0, run.stderr);
      // zod is loaded where the command needs it: the laziness checks above can see it.
      assert.ok(run.opened.some((rel) => chunkHolds(rel, "node_modules/zod/")), `zod loaded by ${args.join(" ")}`);
      assert.deepEqual(run.opened.filter((rel) => !/^dist\/cli\/(bin\.js|version\.js|bundle\/[\w-]+\.mjs)$|^package\.json$/.test(rel)), []);
      assert.ok(run.opened.length <= MAX_FILES, `${args.join(" ")}: ${run.opened.length} files`);
    }
  });

  test("the digest workers the bundle starts come from tsc's files (dist/retention/parallel/digest-worker.js): `oats fsck` of three revisions", (t) => {
    const scope = retainedScope();
    const run = traced(t, ["--scope", scope, "--json", "fsck"]);
    if (!run) return;
    assert.equal(run.status, 0, run.stderr);
    const envelope = JSON.parse(run.stdout) as { ok: boolean; result: { ok: boolean; counts: { revisions: number } } };
    assert.equal(envelope.ok, true);
    assert.equal(envelope.result.ok, true);
    assert.equal(envelope.result.counts.revisions, 3);
    assert.ok(run.opened.includes("dist/retention/parallel/digest-worker.js"), run.opened.join("\n"));
  });

  test("--version and -V still answer without the bundle", (t) => {
    const run = traced(t, ["--version"]);
    if (!run) return;
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(run.opened, ["dist/cli/bin.js", "dist/cli/version.js", "package.json"]);
  });
});
