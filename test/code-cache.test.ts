/**
 * The CLI's V8 code caches (src/cli/load-bundle.ts): none ships, the first
 * run of a bundle writes one after its command, where the running user may
 * write (the package's dist/code-cache/<node>/, else
 * $XDG_CACHE_HOME/oats-retention/<version>/<node>/), whole or not at all,
 * and later runs hand it to V8, which takes it. A cache V8 rejects, one in a
 * place others may write, one of another build's text or of other node
 * options is never what a run takes, and none of it prints anything.
 * Each test runs a copy of the built package (dist/ and package.json).
 */
import assert from "node:assert/strict";
import { spawnSync, type SpawnSyncOptions } from "node:child_process";
import {
  chmodSync,
  chownSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import { CACHE_MAGIC } from "../src/cli/load-bundle.js";
import { FIXTURE_PAYLOAD, REPO, tempDir } from "./helpers.js";

const EXEC = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
const VERSION = (JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { version: string }).version;
/** The directory of this Node, run with no options: what every run below is. */
const NODE = `node-${process.version}-${process.platform}-${process.arch}`;
const NOBODY = 65534;

/** Runs with no node options, as `oats` is run: the cache's key has none. */
const ENV = Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== "NODE_OPTIONS"));

function packageCopy(): string {
  const copy = tempDir("oats-code-cache-package-");
  chmodSync(copy, 0o755); // readable by another user (the read-only install below)
  // Without the caches runs of this checkout wrote: the package as installed has none.
  const caches = join(REPO, "dist/code-cache");
  cpSync(join(REPO, "dist"), join(copy, "dist"), { recursive: true, filter: (path) => !path.startsWith(caches) });
  cpSync(join(REPO, "package.json"), join(copy, "package.json"));
  return copy;
}

function oats(root: string, args: string[], options: SpawnSyncOptions & { nodeArgs?: string[] } = {}) {
  const { nodeArgs = [], ...rest } = options;
  return spawnSync(process.execPath, [...nodeArgs, join(root, "dist/cli/bin.js"), ...args], {
    input: "",
    env: ENV,
    ...rest,
    encoding: "utf8",
  });
}

/** A digest that must come out exactly as without any cache: the digest on stdout, nothing on stderr. */
function digestRuns(root: string, options: Parameters<typeof oats>[2] = {}): void {
  const run = oats(root, ["digest", FIXTURE_PAYLOAD], options);
  assert.equal(run.stderr, "", "nothing is printed about the cache");
  assert.equal(run.status, 0);
  assert.equal(run.stdout, `${EXEC}\n`);
}

/** What loadBundle of `root` does with the cache of `command`'s bundle, in a plain child (no node options). */
function cacheUse(root: string, command?: string, options: SpawnSyncOptions = {}): { state: string; file?: string } {
  const script = join(tempDir("oats-code-cache-probe-"), "probe.mjs");
  chmodSync(join(script, ".."), 0o755);
  writeFileSync(
    script,
    `const { loadBundle } = await import(${JSON.stringify(pathToFileURL(join(root, "dist/cli/load-bundle.js")).href)});
console.log(JSON.stringify(loadBundle({ command: ${JSON.stringify(command)} }).codeCache));
`,
  );
  const run = spawnSync(process.execPath, [script], { encoding: "utf8", env: ENV, ...options });
  assert.equal(run.status, 0, String(run.stderr));
  return JSON.parse(String(run.stdout)) as { state: string; file?: string };
}

const CACHE_NAME = /^oats(-digest|-verify)?-[0-9a-f]{16}\.cache$/;

describe("code caches made on first use", () => {
  test(
    "Given an install without caches, When `oats digest` runs twice, Then " +
      "the first writes digest's cache into the package's dist/code-cache/<node>/ " +
      "(0755, 0644, no temporary file left) and prints nothing more, and V8 takes it in the next run",
    () => {
      const copy = packageCopy();
      assert.ok(!existsSync(join(copy, "dist/code-cache")), "no cache comes with the package");
      assert.equal(cacheUse(copy, "digest").state, "missing");
      digestRuns(copy);
      const dir = join(copy, "dist/code-cache", NODE);
      const files = readdirSync(dir);
      assert.equal(files.length, 1, files.join(", "));
      assert.match(files[0]!, /^oats-digest-[0-9a-f]{16}\.cache$/);
      assert.equal(statSync(dir).mode & 0o777, 0o755);
      assert.equal(statSync(join(dir, files[0]!)).mode & 0o777, 0o644);
      const written = statSync(join(dir, files[0]!)).mtimeMs;
      assert.deepEqual(cacheUse(copy, "digest"), {
        state: "accepted",
        file: join(dir, files[0]!),
        commands: ["digest"],
      });
      digestRuns(copy);
      assert.equal(statSync(join(dir, files[0]!)).mtimeMs, written, "a run that took the cache writes none");
      // The whole program's bundle and verify's have caches of their own, each made by its first run.
      assert.equal(oats(copy, ["--json", "ls"]).status, 0);
      assert.equal(
        oats(copy, ["verify", "absent", "--integrity", `sha256-${"0".repeat(64)}`]).stderr.includes("cache"),
        false,
      );
      assert.deepEqual(
        readdirSync(dir)
          .map((name) => name.replace(/[0-9a-f]{16}/, "<digest>"))
          .sort(),
        ["oats-<digest>.cache", "oats-digest-<digest>.cache", "oats-verify-<digest>.cache"],
      );
      assert.equal(cacheUse(copy).state, "accepted");
      assert.equal(cacheUse(copy, "verify").state, "accepted");
    },
  );

  test(
    "Given a cache V8 rejects (the file's line, then garbage), or a file " +
      "that is no cache at all, When oats runs, Then the output is the same, " +
      "nothing is printed, and the cache is replaced by one V8 takes",
    () => {
      const copy = packageCopy();
      digestRuns(copy);
      const dir = join(copy, "dist/code-cache", NODE);
      const [name] = readdirSync(dir);
      for (const garbage of [
        Buffer.concat([Buffer.from(`${CACHE_MAGIC}["digest"]\n`), Buffer.alloc(4096, 0xa5)]),
        Buffer.alloc(4096, 0xa5),
      ]) {
        writeFileSync(join(dir, name!), garbage);
        assert.equal(cacheUse(copy, "digest").state, "rejected");
        digestRuns(copy);
        assert.notDeepEqual(readFileSync(join(dir, name!)), garbage);
        assert.equal(cacheUse(copy, "digest").state, "accepted");
      }
    },
  );

  test(
    "Given the cache of every command made by one command, When another " +
      "command runs, Then it writes the cache again, with both commands' " +
      "functions and names, once: a command it names writes nothing",
    () => {
      const copy = packageCopy();
      const scope = tempDir("oats-code-cache-scope-");
      const run = (...args: string[]) => {
        const ran = oats(copy, ["--scope", scope, ...args]);
        assert.equal(ran.status, 0, ran.stderr);
        assert.equal(ran.stderr, "");
      };
      const dir = join(copy, "dist/code-cache", NODE);
      const whole = () => {
        const name = readdirSync(dir).find((entry) => /^oats-[0-9a-f]{16}\.cache$/.test(entry))!;
        const text = readFileSync(join(dir, name));
        return {
          line: text.toString("latin1", 0, text.indexOf(0x0a)),
          size: text.length,
          at: statSync(join(dir, name)).mtimeMs,
        };
      };
      run("--json", "ls");
      const first = whole();
      assert.equal(first.line, `${CACHE_MAGIC}["ls"]`);
      run("ls");
      assert.deepEqual(whole(), first, "ls is in it: nothing written");
      run("--json", "fsck");
      const grown = whole();
      assert.equal(grown.line, `${CACHE_MAGIC}["ls","fsck"]`);
      assert.ok(grown.size > first.size, `${grown.size} > ${first.size}: fsck's functions were added`);
      run("fsck");
      assert.deepEqual(whole(), grown);
      assert.deepEqual(cacheUse(copy), {
        state: "accepted",
        file: join(dir, readdirSync(dir)[0]!),
        commands: ["ls", "fsck"],
      });
      run("--help");
      assert.equal(whole().line, `${CACHE_MAGIC}["ls","fsck",""]`, "help, no command, has a name too");
    },
  );

  test(
    "Given a cache of another build's text (the stamp the build writes " +
      "changed), When oats runs, Then it is not read, and the new text's cache replaces it",
    () => {
      const copy = packageCopy();
      digestRuns(copy);
      const dir = join(copy, "dist/code-cache", NODE);
      const [old] = readdirSync(dir);
      const bundle = join(copy, "dist/cli/bundle/oats-digest.cjs");
      const text = readFileSync(bundle, "latin1");
      const stamp = /\/\/oats-bundle \S+ ([0-9a-f]{16})\n/.exec(text)!;
      const other = stamp[1] === "0".repeat(16) ? "1".repeat(16) : "0".repeat(16);
      writeFileSync(bundle, text.replace(stamp[0], stamp[0].replace(stamp[1]!, other)), "latin1");
      assert.equal(cacheUse(copy, "digest").state, "missing");
      digestRuns(copy);
      assert.deepEqual(readdirSync(dir), [`oats-digest-${other}.cache`], `${old} was removed`);
    },
  );

  test(
    "Given node run with other options, When oats runs, Then its cache is " +
      "kept in a directory of its own (V8 would reject the other's)",
    () => {
      const copy = packageCopy();
      digestRuns(copy);
      digestRuns(copy, { nodeArgs: ["--stack-size=900"] });
      const dirs = readdirSync(join(copy, "dist/code-cache")).sort();
      assert.equal(dirs.length, 2, dirs.join(", "));
      assert.equal(dirs[0], NODE);
      assert.match(dirs[1]!, new RegExp(`^${NODE.replaceAll(".", "\\.")}-[0-9a-f]{8}$`));
      for (const dir of dirs) assert.match(readdirSync(join(copy, "dist/code-cache", dir))[0]!, CACHE_NAME);
    },
  );

  test(
    "Given a cache that others may write, When oats runs, Then it is not " +
      "read; given a cache directory others may write, Then no cache is written " +
      "there (the user's cache directory takes it), though a cache this user or root owns there is still read",
    () => {
      const copy = packageCopy();
      digestRuns(copy);
      const dir = join(copy, "dist/code-cache", NODE);
      const [name] = readdirSync(dir);
      chmodSync(join(dir, name!), 0o666);
      assert.equal(cacheUse(copy, "digest").state, "missing", "a cache others may write is not read");
      digestRuns(copy);
      assert.equal(statSync(join(dir, name!)).mode & 0o777, 0o644, "it was replaced");
      assert.equal(cacheUse(copy, "digest").state, "accepted");
      chmodSync(dir, 0o777);
      // The file is this user's and no one else may write it: what it holds is what this user wrote.
      assert.equal(cacheUse(copy, "digest").state, "accepted");
      rmSync(join(dir, name!));
      const home = tempDir("oats-code-cache-home-");
      const env = { ...ENV, XDG_CACHE_HOME: home };
      digestRuns(copy, { env });
      assert.deepEqual(readdirSync(dir), [], "nothing was written into the open directory");
      assert.deepEqual(readdirSync(join(home, "oats-retention", VERSION, NODE)), [name]);
      assert.equal(cacheUse(copy, "digest", { env }).file, join(home, "oats-retention", VERSION, NODE, name!));
    },
  );

  test(
    "Given a read-only install (another user runs it), When oats runs, Then " +
      "it writes its cache under $XDG_CACHE_HOME/oats-retention/<version>/<node>/ " +
      "(0700, 0600), prints nothing more, and the next run takes it",
    () => {
      const copy = packageCopy();
      const home = tempDir("oats-code-cache-home-");
      const asRoot = process.getuid?.() === 0;
      const options: SpawnSyncOptions = { env: { ...ENV, XDG_CACHE_HOME: home } };
      if (asRoot) {
        chmodSync(home, 0o755);
        chownSync(home, NOBODY, NOBODY);
        Object.assign(options, { uid: NOBODY, gid: NOBODY });
      } else {
        for (const dir of ["dist", "dist/cli"]) chmodSync(join(copy, dir), 0o555);
      }
      digestRuns(copy, options);
      assert.ok(!existsSync(join(copy, "dist/code-cache")), "nothing was written into the package");
      const dir = join(home, "oats-retention", VERSION, NODE);
      const [name] = readdirSync(dir);
      assert.match(name!, /^oats-digest-[0-9a-f]{16}\.cache$/);
      for (const [path, mode] of [
        [join(home, "oats-retention"), 0o700],
        [dir, 0o700],
        [join(dir, name!), 0o600],
      ] as const) {
        assert.equal(statSync(path).mode & 0o777, mode, path);
        if (asRoot) assert.equal(statSync(path).uid, NOBODY, path);
      }
      assert.deepEqual(cacheUse(copy, "digest", options), {
        state: "accepted",
        file: join(dir, name!),
        commands: ["digest"],
      });
      const doctor = oats(copy, ["--json", "doctor"], options);
      const report = (
        JSON.parse(doctor.stdout) as {
          result: { codeCache: { locations: { kind: string; dir: string }[]; bundles: { cache: string | null }[] } };
        }
      ).result.codeCache;
      assert.deepEqual(report.locations[0], { kind: "user", dir });
      assert.ok(report.bundles.some(({ cache }) => cache === join(dir, name!)));
    },
  );

  test(
    "a directory the cache should go in that cannot be made (a file in its place) " + "costs nothing but the cache",
    () => {
      const copy = packageCopy();
      mkdirSync(join(copy, "dist/code-cache"));
      writeFileSync(join(copy, "dist/code-cache", NODE), "not a directory");
      const home = tempDir("oats-code-cache-home-");
      writeFileSync(join(home, "oats-retention"), "not a directory either");
      digestRuns(copy, { env: { ...ENV, XDG_CACHE_HOME: home } });
      digestRuns(copy, { env: { ...ENV, XDG_CACHE_HOME: home } });
    },
  );
});
