import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import {
  appendFileSync,
  chmodSync,
  closeSync,
  cpSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import type { JsonValue } from "../src/core/index.js";
import { nativeReadsAvailable, nativeReadsStatus } from "../src/engine/native-reads.js";

export const REPO = resolve(import.meta.dirname, "..");

const made: string[] = [];

/**
 * The repository's `fixtures/` as the tests read it: a copy per test process whose files and directories have no
 * group or other write bit. A checkout made under umask 002 has group-writable fixtures, and the store, which
 * never keeps a group or other write bit, would then hold other modes than the fixture a test compares it with.
 * Exec bits and link text are kept as checked out. Readable by every user: attack tests spawn `nobody`.
 */
export const FIXTURES = modeNormalizedFixtures();
export const FIXTURE = join(FIXTURES, "packages/hello");
export const FIXTURE_PAYLOAD = join(FIXTURE, "payload");
export const FIXTURE_LOCK = join(FIXTURE, "oats-lock.json");
export const VECTORS = join(FIXTURES, "vectors");

function modeNormalizedFixtures(): string {
  const root = mkdtempSync(join(tmpdir(), "oats-fixtures-"));
  made.push(root);
  chmodSync(root, 0o755);
  const copy = join(root, "fixtures");
  cpSync(join(REPO, "fixtures"), copy, { recursive: true, verbatimSymlinks: true });
  const clear = (path: string): void => {
    const stat = lstatSync(path);
    if (stat.isSymbolicLink()) return;
    chmodSync(path, stat.mode & 0o7755);
    if (stat.isDirectory()) for (const name of readdirSync(path)) clear(join(path, name));
  };
  clear(copy);
  return copy;
}

/**
 * The operator's private chain-log state (checkpoints, indexes) goes to a
 * temporary directory per test process, never to the real ~/.local/state;
 * child processes inherit it through the environment.
 */
if (!process.env["OATS_STATE_DIR"]) {
  const state = mkdtempSync(join(tmpdir(), "oats-state-"));
  made.push(state);
  process.env["OATS_STATE_DIR"] = state;
}

/**
 * The code caches the CLI writes on first use (src/cli/load-bundle.ts) go to
 * the package's own directory when it is writable and else to the user's
 * cache directory: for a run of the tests, a temporary one, never the real
 * ~/.cache.
 */
if (!process.env["XDG_CACHE_HOME"]?.includes("oats-cache-home-")) {
  const cache = mkdtempSync(join(tmpdir(), "oats-cache-home-"));
  made.push(cache);
  process.env["XDG_CACHE_HOME"] = cache;
}

after(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/**
 * For a test of the native addon itself: false when it loaded here, else
 * why not, as the loader says (src/engine/native-reads.ts), for the test's
 * `skip`. The rest of the suite runs with or without it: the library then
 * reads every file from JavaScript.
 */
export function addonSkip(): string | false {
  if (nativeReadsAvailable()) return false;
  const { state, reason } = nativeReadsStatus();
  return `the native addon is not loaded here (${state}: ${reason}); only the JavaScript reads run`;
}

/**
 * For a test file that drops the page cache or asserts what a warm or a
 * cold one does: `npm test` runs two files at once, and a drop in one makes
 * the other's warm files cold (a retain of a warm source then starts its
 * read-ahead, a warm large file skips the ring). Such a file holds this lock
 * from before its first test to after its last: flock(1) on this test
 * directory, held by a child that ends with this process, so the kernel
 * lets go even of a lock whose test process died. The directory, not a file
 * in the shared temporary directory, where another user could plant a
 * symlink for flock to create through, or hold the lock forever.
 */
export function holdPageCacheLock(): void {
  let holder: ChildProcess | null = null;
  before(async () => {
    const child = spawn("flock", [join(REPO, "test"), "cat"], { stdio: ["pipe", "pipe", "inherit"] });
    const held = new Promise<boolean>((resolve) => {
      child.stdout!.once("data", () => resolve(true));
      child.once("error", () => resolve(false));
      child.once("exit", () => resolve(false));
    });
    child.stdin!.on("error", () => undefined); // no flock: its exit says so
    // cat echoes this line only once flock holds the lock.
    child.stdin!.write("held\n");
    if (await held) holder = child;
    else
      console.error(
        "holdPageCacheLock: flock(1) did not run; this file's page-cache tests may meet another file's drop",
      );
  });
  after(() => {
    holder?.stdin?.end();
  });
}

/**
 * Drop the page cache (`sync; echo 3 > /proc/sys/vm/drop_caches`), or skip
 * the test by name where that is not allowed (it needs root; CI is root).
 * Returns whether the cache was dropped.
 */
export function dropPageCache(t: { skip(message: string): void }): boolean {
  try {
    execFileSync("sync");
    writeFileSync("/proc/sys/vm/drop_caches", "3\n");
    return true;
  } catch (error) {
    t.skip(`cannot drop the page cache here (needs root): ${String(error)}`);
    return false;
  }
}

/** One file's pages out of the page cache (written back first), the rest of the cache left alone. */
export function dropFromCache(path: string): void {
  const fd = openSync(path, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  execFileSync("dd", [`if=${path}`, "iflag=nocache", "count=0", "status=none"]);
}

/** A fresh temporary directory, removed when the test file ends. */
export function tempDir(prefix = "oats-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

/** `size` bytes that differ with `seed` and along the file (no run of 4 KiB repeats), so a piece out of place changes
 * them. */
export function patterned(size: number, seed: number): Buffer {
  const bytes = Buffer.allocUnsafe(size);
  for (let i = 0; i < size; i++) bytes[i] = (i * 131 + seed * 17 + (i >> 10)) & 0xff;
  return bytes;
}

/** A fresh tree of these files (parents made), returned once the coarse timestamp clock has moved on, so a later
 * change moves mtime. */
export async function treeOfFiles(prefix: string, files: Record<string, Buffer>): Promise<string> {
  const root = tempDir(prefix);
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(root, path, ".."), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  await sleep(30);
  return root;
}

/** A fresh directory `tree` (inside a temporary one named by `prefix`) holding these text files, parents made. */
export function makeTree(files: Record<string, string>, prefix = "oats-src-"): string {
  const dir = join(tempDir(prefix), "tree");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

/** Damage a retained (read-only) file: make it writable and append a line. */
export function tamper(file: string): void {
  chmodSync(file, 0o644);
  appendFileSync(file, "tampered\n");
}

/** A copy of the fixture capability's payload that a test may change. */
export function fixtureCopy(): string {
  const dir = join(tempDir("oats-src-"), "payload");
  cpSync(FIXTURE_PAYLOAD, dir, { recursive: true, verbatimSymlinks: true });
  return dir;
}

/** The fixture capability's lock, as the JSON document an oats.lock file holds. */
export function fixtureLock(): JsonValue {
  return JSON.parse(readFileSync(FIXTURE_LOCK, "utf8")) as JsonValue;
}

/**
 * Every entry under `root` with its type, mode, size, content hash or link
 * text: two equal snapshots mean the tree is byte-for-byte as it was.
 */
export function snapshotTree(root: string): string[] {
  const rows: string[] = [];
  const walk = (dir: string, rel: string): void => {
    let names: string[];
    try {
      names = readdirSync(dir).sort();
    } catch {
      return;
    }
    for (const name of names) {
      const path = join(dir, name);
      const relPath = rel ? `${rel}/${name}` : name;
      const stats = lstatSync(path);
      const mode = (stats.mode & 0o7777).toString(8);
      if (stats.isSymbolicLink()) rows.push(`L ${relPath} ${readlinkSync(path)}`);
      else if (stats.isDirectory()) {
        rows.push(`D ${relPath} ${mode}`);
        walk(path, relPath);
      } else if (stats.isFile())
        rows.push(`F ${relPath} ${mode} ${createHash("sha256").update(readFileSync(path)).digest("hex")}`);
      else rows.push(`? ${relPath}`);
    }
  };
  walk(root, "");
  return rows;
}

/** Run the built CLI (dist/) as a real child process. */
export function runOats(args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv; input?: string } = {}) {
  const result = spawnSync(process.execPath, [join(REPO, "dist/cli/bin.js"), ...args], {
    cwd: options.cwd ?? REPO,
    env: { ...process.env, ...options.env },
    encoding: "utf8",
    input: options.input ?? "",
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

export function makeVectorTree(dir: string, exec = false): string {
  execFileSync("sh", [join(VECTORS, "make-tree-t.sh"), dir, ...(exec ? ["exec"] : [])]);
  return dir;
}

/** The CLI's --json envelope (contract section 7). */
export type Envelope = {
  schemaVersion: number;
  ok: boolean;
  command: string | null;
  result?: Record<string, any>;
  error?: { code: string; kind: string; message: string; details: Record<string, any> };
};

/** `oats --json ...args`: exactly one line on stdout, an envelope of exactly the contract's shape. */
export function runJson(args: string[], options: Parameters<typeof runOats>[1] = {}) {
  const run = runOats(["--json", ...args], options);
  assert.match(
    run.stdout,
    /^[^\n]+\n$/,
    `exactly one line on stdout, got ${JSON.stringify(run.stdout)} (stderr ${run.stderr})`,
  );
  const envelope = JSON.parse(run.stdout) as Envelope;
  assert.equal(envelope.schemaVersion, 1);
  assert.deepEqual(
    Object.keys(envelope),
    envelope.ok ? ["schemaVersion", "ok", "command", "result"] : ["schemaVersion", "ok", "command", "error"],
  );
  return { ...run, envelope };
}

type RunOptions = Parameters<typeof runOats>[1];

/** `oats --json ...args` refused: exit status `exit`, `ok: false` and error.code `code`; the run, for more checks. */
export function cliRefusal(args: string[], code: string, exit: number, options: RunOptions = {}) {
  const run = runJson(args, options);
  assert.equal(run.status, exit, run.stdout + run.stderr);
  assert.equal(run.envelope.ok, false);
  assert.equal(run.envelope.error!.code, code, run.stdout);
  return run;
}

/** cliRefusal, and the envelope names `command` (null where no command was parsed). */
export function commandRefusal(
  args: string[],
  code: string,
  exit: number,
  command: string | null,
  options: RunOptions = {},
) {
  const run = cliRefusal(args, code, exit, options);
  assert.equal(run.envelope.command, command);
  return run;
}
