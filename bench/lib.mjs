/** Shared machinery of the benchmark: options, helpers, data sets, the library under test, the results table. */
import { spawn } from "node:child_process";
import { CAPS, CAPTURE, DATASETS, DATA_VERSION, SMALL, TARBALL } from "./datasets.mjs";
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const DIST = join(REPO, "dist");
export const CLI = join(DIST, "cli", "bin.js");
export const TREE_EXEC = "oats.tree-exec.v1";
export const MiB = 1 << 20;
export const GiB = 1 << 30;

// ---------------------------------------------------------------- arguments

export function parseArgs(argv) {
  const options = {
    dir: process.env.OATS_BENCH_DIR || "/tmp/oats-bench",
    runs: 7,
    only: null,
    clean: false,
    json: null,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === "--clean") options.clean = true;
    else if (arg === "--dir") options.dir = resolve(value());
    else if (arg === "--runs") options.runs = Math.max(1, Number.parseInt(value(), 10) || 1);
    else if (arg === "--only") options.only = new Set(value().split(","));
    else if (arg === "--json") options.json = resolve(value());
    else if (arg === "--help" || arg === "-h") {
      console.log(readFileSync(join(dirname(fileURLToPath(import.meta.url)), "run.mjs"), "utf8").split("*/")[0]);
      process.exit(0);
    } else throw new Error(`unknown argument ${arg}`);
  }
  return options;
}

export const options = parseArgs(process.argv.slice(2));
export const WORK = options.dir;
export const DATA = join(WORK, "data");
export const wants = (part) => !options.only || options.only.has(part);
// The operator's private chain-log state (checkpoints, indexes) of every bench scope goes under the work dir,
// fresh for each run: the sections remove and recreate their scopes, and a new scope that gets a removed
// one's inode would otherwise meet the old one's checkpoint and be refused as a rolled-back log.
if (!process.env.OATS_STATE_DIR) {
  process.env.OATS_STATE_DIR = join(WORK, "state");
  if (!options.clean) rmSync(process.env.OATS_STATE_DIR, { recursive: true, force: true });
}

if (options.clean) {
  rmSync(WORK, { recursive: true, force: true });
  console.log(`removed ${WORK}`);
  process.exit(0);
}

// ---------------------------------------------------------------- helpers

export const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
export const fmtMs = (ms) =>
  ms >= 10_000
    ? `${(ms / 1000).toFixed(1)} s`
    : ms >= 1000
      ? `${(ms / 1000).toFixed(2)} s`
      : `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;
export const fmtRate = (bytes, ms) => `${(bytes / MiB / (ms / 1000)).toFixed(0)} MiB/s`;
export const log = (...args) => console.error("  ..", ...args);
export const gc = globalThis.gc ?? (() => {});

/** Run a command without a shell; resolves with wall time (spawn to close) and output. */
export function run(file, args, { cwd, capture = true, allowFail = false } = {}) {
  return new Promise((resolvePromise, reject) => {
    const started = performance.now();
    const child = spawn(file, args, { cwd, stdio: ["ignore", capture ? "pipe" : "ignore", "pipe"] });
    const out = [];
    const err = [];
    child.stdout?.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      const ms = performance.now() - started;
      const result = { ms, code, signal, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
      if ((code !== 0 || signal) && !allowFail) {
        reject(
          new Error(`${file} ${args.join(" ")} failed (${signal ?? code}): ${result.stderr.trim().slice(0, 500)}`),
        );
      } else resolvePromise(result);
    });
  });
}

/**
 * Time sides against each other: one untimed warm-up each, then `runs`
 * rounds in alternating order. A side is { name, prepare?, run, cleanup?,
 * inProcess? }; only run() is timed. Returns { name: [ms...] }.
 */
export async function interleave(sides, runs) {
  for (const side of sides) {
    await side.prepare?.(-1);
    await side.run(-1);
    await side.cleanup?.(-1);
  }
  const times = Object.fromEntries(sides.map((side) => [side.name, []]));
  for (let round = 0; round < runs; round++) {
    const order = round % 2 ? [...sides].reverse() : sides;
    for (const side of order) {
      await side.prepare?.(round);
      // A young-generation collection before an in-process side, so it does not pay for the garbage of the others;
      // not before a child process, which a concurrent sweep here would compete with. Not a full one: a forced full
      // collection (gc()) drops the optimized code of the walk and the hash (about 22 functions recompiled on the
      // next run, against 0-5 after a minor or a natural major collection), so every timed run re-ran the JIT on a
      // background thread, which on two cores competes with a side that keeps both busy (docs/design/performance.md,
      // "How the bench measures").
      if (side.inProcess) gc({ type: "minor" });
      const started = performance.now();
      await side.run(round);
      times[side.name].push(performance.now() - started);
      log(`${side.name}: ${fmtMs(times[side.name].at(-1))}`);
      await side.cleanup?.(round);
    }
  }
  return times;
}

/** Read every file of a tree once so that both sides start from a warm page cache. */
export function warm(dir) {
  const buffer = Buffer.allocUnsafe(8 * MiB);
  let bytes = 0;
  const visit = (path) => {
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const child = join(path, entry.name);
      if (entry.isDirectory()) visit(child);
      else if (entry.isFile()) {
        const fd = openSync(child, "r");
        let got;
        while ((got = readSync(fd, buffer, 0, buffer.length, null)) > 0) bytes += got;
        closeSync(fd);
      }
    }
  };
  visit(dir);
  return bytes;
}

export function removeTree(path) {
  if (!existsSync(path)) return;
  try {
    rmSync(path, { recursive: true, force: true });
  } catch {
    // Retained revisions keep their source's directory modes; make them writable first.
    const fix = (p) => {
      chmodSync(p, 0o700);
      for (const entry of readdirSync(p, { withFileTypes: true })) if (entry.isDirectory()) fix(join(p, entry.name));
    };
    fix(path);
    rmSync(path, { recursive: true, force: true });
  }
}

/** Flush dirty pages left by setup or cleanup so they are not charged to the next timed run. */
export const settle = () => run("sync", []);
// Copies made by the retain and staging comparisons are all removed at the end
// of their section, not between runs: deleting a GiB on a filesystem mounted
// with online discard slows the writes that follow it for seconds, and would
// land on whichever side ran next.

// ---------------------------------------------------------------- data sets (datasets.mjs)

export { CAPS, CAPTURE, DATASETS, DATA_VERSION, SMALL, TARBALL, keystream, prng, writeBigFile } from "./datasets.mjs";

/** Generate a data set unless a stamp says the same version is already there. */
export function dataset(name) {
  const dir = join(DATA, name);
  const stamp = join(DATA, `${name}.stamp.json`);
  const want = JSON.stringify({
    version: DATA_VERSION,
    name,
    small: name === "small" ? SMALL : undefined,
    caps: name === "caps" ? CAPS : undefined,
    capture: name === "capture" ? CAPTURE : undefined,
    tarball: name === "tarball" ? TARBALL : undefined,
  });
  if (existsSync(stamp) && readFileSync(stamp, "utf8") === want && existsSync(dir)) return dir;
  log(`generating ${name} (${DATASETS[name].describe}) in ${dir}`);
  const started = performance.now();
  rmSync(stamp, { force: true });
  removeTree(dir);
  mkdirSync(dir, { recursive: true });
  DATASETS[name].generate(dir);
  writeFileSync(stamp, want);
  log(`generated ${name} in ${fmtMs(performance.now() - started)}`);
  return dir;
}

// ---------------------------------------------------------------- library (dist)

if (!existsSync(join(DIST, "index.js"))) {
  console.error(`dist/ is not built: run \`npm run bench\` (which builds) or \`npm run build\` first`);
  process.exit(0);
}
export const oats = await import(join(DIST, "index.js"));
export const { digestTree, retainTree, verifyTree, readResolution, writeResolution } = oats;
export const { StagingWriter } = await import(join(DIST, "retention", "store", "staging-writer.js"));
export const { digestListing } = await import(join(DIST, "retention", "digest", "tree.js"));
export const { walkTree } = await import(join(DIST, "retention", "digest", "walk.js"));
export const { readRecordBytes } = await import(join(DIST, "resolution", "store.js"));
export const cliExists = () => existsSync(CLI);
export const oneLine = (text) => text.trim().split("\n")[0].slice(0, 160);

/** Whether `node dist/cli/bin.js ...args` runs; if not, a note says why and the CLI rows are left out. */
export async function cliWorks(section, args) {
  if (!cliExists()) {
    notes.push(`[${section}] dist/cli/bin.js is not built; CLI figures left out`);
    return false;
  }
  const probe = await run(process.execPath, [CLI, ...args], { allowFail: true });
  if (probe.code === 0) return true;
  notes.push(`[${section}] \`oats ${args.join(" ")}\` exited ${probe.code}: ${oneLine(probe.stderr)}`);
  return false;
}

export const digestOf = async (dir) => (await digestTree(dir, [TREE_EXEC]))[TREE_EXEC];
export const digestInOutput = (text) => text.match(/sha256-[0-9a-f]{64}/)?.[0] ?? null;

// ---------------------------------------------------------------- results

export const rows = [];
export const notes = [];
/**
 * kind "ratio-min": ratio = baseline/ours as throughput (bigger is better), goal is a floor.
 * kind "ratio-max": ratio = ours/baseline as time (smaller is better), goal is a ceiling.
 * kind "abs-max": a value with a ceiling, no baseline.
 * kind "info": shown, not judged.
 */
export function addRow(row) {
  rows.push(row);
  const verdict = row.pass === undefined ? "" : row.pass ? "PASS" : "MISS";
  console.error(
    `  => ${row.id} ${row.what}: ours ${row.ours} | baseline ${row.baseline} ` +
      `| ${row.ratio} (goal ${row.goal}) ${verdict}`,
  );
}

export function timeRow({
  id,
  what,
  oursMs,
  baseMs,
  goal,
  kind = "ratio-max",
  headline = true,
  oursExtra = "",
  baseExtra = "",
  bytes,
}) {
  if (kind === "ratio-min") {
    const ratio = baseMs / oursMs; // throughput ratio for the same bytes
    addRow({
      id,
      what,
      headline,
      ours: `${fmtMs(oursMs)} (${fmtRate(bytes, oursMs)})${oursExtra}`,
      baseline: `${fmtMs(baseMs)} (${fmtRate(bytes, baseMs)})${baseExtra}`,
      ratio: `${ratio.toFixed(2)}x`,
      ratioValue: ratio,
      goal: goal === null ? "-" : `>= ${goal}x`,
      pass: goal === null ? undefined : ratio >= goal,
    });
  } else {
    const ratio = oursMs / baseMs;
    addRow({
      id,
      what,
      headline,
      ours: `${fmtMs(oursMs)}${oursExtra}`,
      baseline: `${fmtMs(baseMs)}${baseExtra}`,
      ratio: `${ratio.toFixed(2)}x`,
      ratioValue: ratio,
      goal: goal === null ? "-" : `<= ${goal}x`,
      pass: goal === null ? undefined : ratio <= goal,
    });
  }
}

export function missingRow(id, what, goal, why) {
  addRow({ id, what, headline: true, ours: `n/a (${why})`, baseline: "-", ratio: "-", goal, pass: undefined });
}
