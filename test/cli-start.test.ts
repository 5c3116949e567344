/**
 * The CLI's fixed start cost (docs/design/performance.md, "The CLI's start: bundles and code caches"):
 * dist/cli/bin.js runs a one-script bundle `npm run build` makes (the whole
 * program's, dist/cli/bundle/oats.cjs, or verify's or digest's own) with the
 * V8 code cache an earlier run wrote (test/code-cache.test.ts: where and
 * when), a command opens no other module of the package, and what the
 * bundle starts from tsc's files (the digest workers, from a bundle of their
 * own) still resolves. The files a real child process opens are read from
 * strace; without a working strace those tests skip by name.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, readFileSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { fastCommandOf } from "../src/cli/load-bundle.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, REPO, fixtureCopy, runOats, tempDir } from "./helpers.js";

const BUNDLE = join(REPO, "dist/cli/bundle");
const PACKAGE_VERSION = (JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { version: string }).version;
const EXEC = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
/** Unbundled, `oats digest` opened 75 files of the package and `oats verify` 221; now these, with the bundle of every
 * command (oats.cjs) or the command's own, and its code cache (in the package's directory: this checkout is writable;
 * traced below as `<node>` and `<digest>`). */
const startedWith = (bundle: string) =>
  [
    "dist/cli/bin.js",
    `dist/cli/bundle/${bundle}`,
    `dist/code-cache/<node>/${bundle.slice(0, -".cjs".length)}-<digest>.cache`,
    "dist/cli/load-bundle.js",
    "dist/cli/support/version.js",
    "package.json",
  ].sort();
/** A command that reads a tree also loads the small-file reads in C (src/engine/native-reads.ts). */
const readingWith = (bundle: string) => [...startedWith(bundle), "dist/native/oats.node"].sort();
const STARTED = startedWith("oats.cjs");

const straceWorks =
  spawnSync("strace", ["-f", "-e", "trace=openat", "-o", "/dev/null", process.execPath, "-e", "0"]).status === 0;

/** Run the built CLI (of `root`: the repository, or a copy of its build) under strace; the package files, relative to
 * `root`, it opened. */
function traced(
  t: TestContext,
  args: string[],
  root = REPO,
  env: NodeJS.ProcessEnv = process.env,
): { status: number | null; stdout: string; stderr: string; opened: string[] } | undefined {
  if (!straceWorks) {
    t.skip("strace is missing or cannot trace here (no ptrace): the files a CLI run opens cannot be observed");
    return undefined;
  }
  // A run first, untraced, so that the code cache it may write is there and the traced run only reads it.
  spawnSync(process.execPath, [join(root, "dist/cli/bin.js"), ...args], { cwd: root, env, input: "" });
  const traces = tempDir("oats-strace-");
  // -ff: one file per thread. In one file, a call another thread interrupts is split over two lines
  // ("<unfinished ...>",
  // then "<... openat resumed>") and its path and result are never on one line: a worker's open went unseen now
  // and then.
  const run = spawnSync(
    "strace",
    [
      "-ff",
      "-qq",
      "-e",
      "trace=open,openat,openat2",
      "-o",
      join(traces, "trace"),
      process.execPath,
      join(root, "dist/cli/bin.js"),
      ...args,
    ],
    { cwd: root, env, encoding: "utf8", input: "" },
  );
  const opened = new Set<string>();
  const lines = readdirSync(traces).flatMap((name) => readFileSync(join(traces, name), "utf8").split("\n"));
  for (const line of lines) {
    const match = /open(?:at2?)?\((?:[^,]*, )?"([^"]+)".*\) = (-?\d+)/.exec(line);
    if (!match || Number(match[2]) < 0) continue;
    const rel = relative(root, match[1]!).replace(
      /^(dist\/code-cache\/)node-[^/]+(\/oats(?:-\w+)?-)[0-9a-f]{16}(\.cache)$/,
      "$1<node>$2<digest>$3",
    );
    if (!rel.startsWith("..") && /^(dist|node_modules)\/|^package\.json$/.test(rel)) opened.add(rel);
  }
  return { status: run.status, stdout: run.stdout, stderr: run.stderr, opened: [...opened].sort() };
}

/**
 * An environment whose private state holds no anchored manifest of the scope's revisions, so that fsck re-hashes
 * them in its digest workers rather than checking their structure against the anchored manifests.
 */
const unanchored = (): NodeJS.ProcessEnv => ({ ...process.env, OATS_STATE_DIR: tempDir("oats-start-state-") });

function retainedScope(): string {
  const scope = tempDir("oats-start-");
  const other = fixtureCopy();
  writeFileSync(join(other, "extra"), "another revision\n");
  for (const args of [
    ["--lock", FIXTURE_LOCK, FIXTURE_PAYLOAD, "--id", "demo.hello"],
    [other, "--id", "demo.other"],
    [FIXTURE_PAYLOAD, "--id", "demo.third"],
  ]) {
    const run = runOats(["--scope", scope, "retain", ...args]);
    assert.equal(run.status, 0, run.stderr);
  }
  return scope;
}

describe("the built CLI runs from its bundle", () => {
  const BUNDLES = ["oats.cjs", "oats-digest.cjs", "oats-verify.cjs"];
  const inputs = (bundle = "oats.cjs") =>
    (JSON.parse(readFileSync(join(REPO, "dist/cli/bundle-inputs.json"), "utf8")) as Record<string, string[]>)[bundle]!;
  const commandModules = (bundle: string) => inputs(bundle).filter((input) => input.startsWith("src/cli/commands/"));

  test(
    "npm run build made the bundle of every command, digest's and verify's " +
      "own and the digest worker's bundle, and no code cache (made on first " +
      "use); the whole one holds commander, zod and proper-lockfile",
    () => {
      assert.deepEqual(readdirSync(BUNDLE).sort(), [
        "digest-worker.cjs",
        "oats-digest.cjs",
        "oats-verify.cjs",
        "oats.cjs",
      ]);
      for (const module of ["node_modules/commander/", "node_modules/zod/v4/core/", "node_modules/proper-lockfile/"])
        assert.ok(
          inputs().some((input) => input.startsWith(module)),
          `${module} is bundled`,
        );
      // A require or import of a dependency would be resolved from node_modules at run time: no bundle has one.
      const dependencies = Object.keys(
        (JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { dependencies: Record<string, string> })
          .dependencies,
      );
      assert.ok(dependencies.includes("zod"));
      for (const bundle of BUNDLES) {
        const text = readFileSync(join(BUNDLE, bundle), "utf8");
        for (const name of dependencies)
          assert.doesNotMatch(
            text,
            new RegExp(`(?:from|import\\(|require\\()\\s*["']${name}(?:/[^"']*)?["']`),
            `${bundle}: ${name}`,
          );
      }
    },
  );

  test(
    "a command's own bundle holds that command's module and no other " +
      "command's, and is well under half the whole one",
    () => {
      assert.deepEqual(commandModules("oats-verify.cjs"), ["src/cli/commands/shared.ts", "src/cli/commands/verify.ts"]);
      assert.deepEqual(commandModules("oats-digest.cjs"), ["src/cli/commands/digest.ts"]);
      assert.ok(commandModules("oats.cjs").length > 30);
      const size = (name: string) => statSync(join(BUNDLE, name)).size;
      for (const bundle of ["oats-digest.cjs", "oats-verify.cjs"])
        assert.ok(size(bundle) < size("oats.cjs") / 2.5, `${bundle}: ${size(bundle)} against ${size("oats.cjs")}`);
    },
  );

  test("zod's locales stay out of every bundle: only English, which zod itself registers", () => {
    for (const bundle of ["oats.cjs", "oats-verify.cjs"]) {
      const locales = inputs(bundle)
        .map((input) => /^node_modules\/zod\/v4\/locales\/([\w-]+)\.js$/.exec(input)?.[1])
        .filter((name) => name !== undefined && name !== "index");
      assert.deepEqual(locales, ["en"], bundle);
    }
  });

  test("every bundle is ASCII only, the condition for reading it as latin1 (load-bundle.ts)", () => {
    for (const bundle of BUNDLES)
      assert.equal(
        readFileSync(join(BUNDLE, bundle)).findIndex((byte) => byte > 0x7f),
        -1,
        bundle,
      );
  });

  test(
    "a command's own bundle is taken by its first word, --scope's value and " +
      "options skipped, unless help is asked for; any other run takes the " +
      "whole program",
    () => {
      const cases: [string[], string | undefined][] = [
        [["digest", "dir"], "digest"],
        [["--json", "digest", "dir"], "digest"],
        [["--scope", "/s", "--quiet", "verify", "key"], "verify"],
        [["--scope=/s", "verify", "key"], "verify"],
        [["verify", "digest"], "verify"],
        [["verify", "key", "--", "--help"], "verify"],
        [["--scope", "digest", "ls"], undefined],
        [["ls", "digest"], undefined],
        [["--", "digest"], undefined],
        [["--help"], undefined],
        [["--help", "verify"], undefined],
        [["-h", "digest"], undefined],
        [["verify", "key", "--help"], undefined],
        [["digest", "dir", "-h"], undefined],
        [["verify", "key", "-Vh"], undefined],
        [["help", "verify"], undefined],
        [[], undefined],
      ];
      for (const [argv, expected] of cases) assert.equal(fastCommandOf(argv), expected, argv.join(" "));
    },
  );

  test("a build without a command's own bundle runs that command from the bundle of every command", () => {
    const copy = tempDir("oats-no-fast-bundle-");
    cpSync(join(REPO, "dist"), join(copy, "dist"), { recursive: true });
    cpSync(join(REPO, "package.json"), join(copy, "package.json"));
    rmSync(join(copy, "dist/cli/bundle/oats-digest.cjs"));
    const run = spawnSync(process.execPath, [join(copy, "dist/cli/bin.js"), "digest", FIXTURE_PAYLOAD], {
      encoding: "utf8",
    });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, `${EXEC}\n`);
  });

  test(
    "`oats digest` opens bin.js, the loader, its own bundle and that " +
      "bundle's cache, version.js, package.json and the native reads: no " +
      "node_modules, no tsc module tree",
    (t) => {
      const run = traced(t, ["digest", FIXTURE_PAYLOAD]);
      if (!run) return;
      assert.equal(run.status, 0, run.stderr);
      assert.equal(run.stdout, `${EXEC}\n`);
      assert.deepEqual(run.opened, readingWith("oats-digest.cjs"));
    },
  );

  test("`oats --help` opens the same files, with the bundle of every command", (t) => {
    const run = traced(t, ["--help"]);
    if (!run) return;
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^Usage: oats /);
    assert.deepEqual(run.opened, STARTED);
  });

  test(
    "`oats verify` and a refusal open verify's own bundle, `oats ls` the " +
      "bundle of every command, and nothing else: the library and zod come " +
      "from the bundle",
    (t) => {
      const scope = retainedScope();
      for (const args of [
        ["--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK],
        ["--scope", scope, "--json", "ls"],
        ["--scope", scope, "verify", "demo.hello", "--integrity", `sha256-${"0".repeat(64)}`],
      ]) {
        const run = traced(t, args);
        if (!run) return;
        assert.equal(run.status, args.includes("--integrity") ? 3 : 0, run.stderr);
        const bundle = args.includes("verify") ? "oats-verify.cjs" : "oats.cjs";
        // Only the verify that reads the stored tree loads the reader; ls and the refusal never get that far.
        assert.deepEqual(
          run.opened,
          args.includes("--lock") ? readingWith(bundle) : startedWith(bundle),
          args.join(" "),
        );
      }
    },
  );

  test(
    "the digest workers the bundle starts come from their own one-file " +
      "bundle (dist/cli/bundle/digest-worker.cjs), not tsc's module tree: " +
      "`oats fsck` of three revisions",
    (t) => {
      const scope = retainedScope();
      const run = traced(t, ["--scope", scope, "--json", "fsck"], REPO, unanchored());
      if (!run) return;
      assert.equal(run.status, 0, run.stderr);
      const envelope = JSON.parse(run.stdout) as {
        ok: boolean;
        result: { ok: boolean; counts: { revisions: number } };
      };
      assert.equal(envelope.ok, true);
      assert.equal(envelope.result.ok, true);
      assert.equal(envelope.result.counts.revisions, 3);
      assert.ok(run.opened.includes("dist/cli/bundle/digest-worker.cjs"), run.opened.join("\n"));
      // Nothing of tsc's output but the loader pieces every command opens: the workers loaded no module tree of
      // their own.
      assert.deepEqual(
        run.opened.filter(
          (path) => path.startsWith("dist/") && !path.startsWith("dist/cli/") && !path.startsWith("dist/code-cache/"),
        ),
        ["dist/native/oats.node"],
        run.opened.join("\n"),
      );
    },
  );

  test(
    "a worker bundle older than tsc's worker (tsc run alone since the build) " +
      "is passed over: the workers load tsc's module",
    (t) => {
      const copy = tempDir("oats-stale-bundle-");
      cpSync(join(REPO, "dist"), join(copy, "dist"), { recursive: true });
      cpSync(join(REPO, "package.json"), join(copy, "package.json"));
      const compiled = statSync(join(copy, "dist/retention/parallel/digest-worker.js")).mtime;
      const stale = new Date(compiled.getTime() - 3_600_000);
      utimesSync(join(copy, "dist/cli/bundle/digest-worker.cjs"), stale, stale);
      const run = traced(t, ["--scope", retainedScope(), "--json", "fsck"], copy, unanchored());
      if (!run) return;
      assert.equal(run.status, 0, run.stderr);
      assert.equal((JSON.parse(run.stdout) as { result: { ok: boolean } }).result.ok, true);
      assert.ok(run.opened.includes("dist/retention/parallel/digest-worker.js"), run.opened.join("\n"));
      assert.ok(!run.opened.includes("dist/cli/bundle/digest-worker.cjs"), run.opened.join("\n"));
    },
  );

  test(
    "npm run build bundled the digest worker: one file, its native reads and " + "read-ahead found from tsc's paths",
    () => {
      const worker = readFileSync(join(BUNDLE, "digest-worker.cjs"), "utf8");
      assert.ok(worker.includes("markLaneWorker"));
      // import.meta.url spelled from the bundle's own location (scripts/bundle-cli.mjs, sourceUrls): the addon resolves
      // as from tsc's file.
      assert.ok(
        worker.includes('new URL("../../engine/native-reads.js",require("node:url").pathToFileURL(__filename)).href'),
      );
      assert.doesNotMatch(worker, /\brequire\("\.\.?\//, "a relative require would load tsc's modules");
    },
  );

  /** The builtins `args` made node load (process.moduleLoadList, written at exit by a preload), by name. */
  function builtinsLoaded(args: string[]): { status: number | null; stderr: string; builtins: string[] } {
    const dir = tempDir("oats-builtins-");
    const preload = join(dir, "record.cjs");
    const out = join(dir, "loaded.json");
    writeFileSync(
      preload,
      `process.on("exit", () => ` +
        `require("node:fs").writeFileSync(${JSON.stringify(out)}, ` +
        `JSON.stringify(process.moduleLoadList)));\n`,
    );
    const run = spawnSync(process.execPath, ["--require", preload, join(REPO, "dist/cli/bin.js"), ...args], {
      encoding: "utf8",
      input: "",
      env: { ...process.env, NODE_OPTIONS: "" },
    });
    const list = JSON.parse(readFileSync(out, "utf8")) as string[];
    return {
      status: run.status,
      stderr: run.stderr,
      builtins: list
        .filter((entry) => entry.startsWith("NativeModule "))
        .map((entry) => entry.slice("NativeModule ".length)),
    };
  }

  // Loaded where they are used (scripts/bundle-cli.mjs, lazyChildProcess and the createRequire rewrite), a few ms of
  // every start.
  const UNUSED_BY_READS = ["child_process", "worker_threads", "assert", "perf_hooks"];

  test(
    "`oats verify` and `oats digest` load none of child_process, " +
      "worker_threads, assert (proper-lockfile's) and perf_hooks; a retain, " +
      "which locks, loads proper-lockfile and its assert",
    () => {
      const scope = retainedScope();
      for (const args of [
        ["--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK],
        ["digest", FIXTURE_PAYLOAD],
      ]) {
        const run = builtinsLoaded(args);
        assert.equal(run.status, 0, run.stderr);
        assert.ok(run.builtins.includes("crypto"), "the run hashed");
        for (const name of UNUSED_BY_READS) assert.ok(!run.builtins.includes(name), `${args.join(" ")} loaded ${name}`);
      }
      const retain = builtinsLoaded(["--scope", scope, "retain", fixtureCopy(), "--id", "demo.fourth"]);
      assert.equal(retain.status, 0, retain.stderr);
      assert.ok(
        retain.builtins.includes("assert"),
        "the publish lock loaded proper-lockfile, whose graceful-fs and signal-exit load assert",
      );
      assert.ok(
        !retain.builtins.includes("child_process"),
        "a retain of a few files syncs them one by one, without `sync -f`",
      );
    },
  );

  test(
    "a bundle without the wrapper the build writes around it is refused, " +
      "naming the fix, instead of running half-loaded",
    () => {
      const copy = tempDir("oats-unwrapped-bundle-");
      cpSync(join(REPO, "dist"), join(copy, "dist"), { recursive: true });
      cpSync(join(REPO, "package.json"), join(copy, "package.json"));
      const file = join(copy, "dist/cli/bundle/oats.cjs");
      const text = readFileSync(file, "latin1");
      assert.ok(
        text.startsWith("(function (exports, require, module, __filename, __dirname) {"),
        "the build wraps the bundle",
      );
      writeFileSync(file, text.slice(text.indexOf("{") + 1, -"\n})".length), "latin1");
      const verifyFile = join(copy, "dist/cli/bundle/oats-verify.cjs");
      writeFileSync(verifyFile, `${readFileSync(verifyFile, "latin1")}\n`, "latin1");
      for (const args of [
        ["--json", "ls"],
        ["--json", "verify", "demo.hello"],
      ]) {
        const run = spawnSync(process.execPath, [join(copy, "dist/cli/bin.js"), ...args], {
          encoding: "utf8",
          input: "",
        });
        assert.equal(run.status, 1, run.stderr);
        const envelope = JSON.parse(run.stdout) as { ok: boolean; error: { code: string; message: string } };
        assert.equal(envelope.ok, false);
        assert.equal(envelope.error.code, "internal-error");
        assert.match(
          envelope.error.message,
          new RegExp(
            `${args.includes("ls") ? "oats" : "oats-verify"}\\.cjs is not wrapped as ` +
              `the build wraps it; run npm run build`,
          ),
        );
      }
    },
  );

  test("--version still answers without the bundle", (t) => {
    const run = traced(t, ["--version"]);
    if (!run) return;
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, `${PACKAGE_VERSION}\n`);
    assert.deepEqual(run.opened, ["dist/cli/bin.js", "dist/cli/support/version.js", "package.json"]);
  });
});
