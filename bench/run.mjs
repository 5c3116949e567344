#!/usr/bin/env node
/**
 * oats performance benchmark: a report, not a timed test.
 *
 *   npm run bench                      # build dist/, then run everything (~5-8 min on 2 cores)
 *   node --expose-gc bench/run.mjs     # without rebuilding
 *   node bench/run.mjs --clean         # remove the bench work dir and exit
 *
 * Options:
 *   --dir DIR      work dir for data sets, scopes and copies (default
 *                  $OATS_BENCH_DIR or /tmp/oats-bench). Data sets are generated
 *                  deterministically the first time and reused afterwards.
 *   --runs N       timed runs per side for the digest comparisons (default 7)
 *   --only LIST    comma-separated subset: big,small,retain,fsync,fsync-big,rss,start,alt,resolution,dispatch,tarball,bundle
 *   --json FILE    also write the results as JSON
 *
 * Every figure is a ratio against a baseline measured in the same run, on the
 * same data, with the page cache warmed for both sides: each side is run once
 * untimed, then the sides alternate (A B, B A, ...) and the medians are
 * compared. The process always exits 0; PASS/MISS is printed per goal.
 *
 * Data sets (under <dir>/data):
 *   big    8 files x 128 MiB (AES-CTR keystream, so incompressible)
 *   small  20,000 files of 100..4096 bytes in 350 directories, 1 in 10 mode 0755
 *   huge   one 2 GiB file
 *   caps   50 capability trees of 200 files (100..4096 bytes) each, for the
 *          resolution rows
 * The CLI figures use dist/cli/bin.js; when it does not exist yet those rows
 * say so and the rest still runs.
 */
import { spawn } from "node:child_process";
import { createCipheriv, createHash } from "node:crypto";
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
  statSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const DIST = join(REPO, "dist");
const CLI = join(DIST, "cli", "bin.js");
const TREE_EXEC = "oats.tree-exec.v1";
const MiB = 1 << 20;
const GiB = 1 << 30;

// ---------------------------------------------------------------- arguments

function parseArgs(argv) {
  const options = { dir: process.env.OATS_BENCH_DIR || "/tmp/oats-bench", runs: 7, only: null, clean: false, json: null };
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
      console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("*/")[0]);
      process.exit(0);
    } else throw new Error(`unknown argument ${arg}`);
  }
  return options;
}

const options = parseArgs(process.argv.slice(2));
const WORK = options.dir;
const DATA = join(WORK, "data");
const wants = (part) => !options.only || options.only.has(part);

if (options.clean) {
  rmSync(WORK, { recursive: true, force: true });
  console.log(`removed ${WORK}`);
  process.exit(0);
}

// ---------------------------------------------------------------- helpers

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};
const fmtMs = (ms) => (ms >= 10_000 ? `${(ms / 1000).toFixed(1)} s` : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(ms < 10 ? 1 : 0)} ms`);
const fmtRate = (bytes, ms) => `${((bytes / MiB) / (ms / 1000)).toFixed(0)} MiB/s`;
const log = (...args) => console.error("  ..", ...args);
const gc = globalThis.gc ?? (() => {});

/** Run a command without a shell; resolves with wall time (spawn to close) and output. */
function run(file, args, { cwd, capture = true, allowFail = false } = {}) {
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
        reject(new Error(`${file} ${args.join(" ")} failed (${signal ?? code}): ${result.stderr.trim().slice(0, 500)}`));
      } else resolvePromise(result);
    });
  });
}

/**
 * Time sides against each other: one untimed warm-up each, then `runs`
 * rounds in alternating order. A side is { name, prepare?, run, cleanup?,
 * inProcess? }; only run() is timed. Returns { name: [ms...] }.
 */
async function interleave(sides, runs) {
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
      // A collection before an in-process side, so it does not pay for the garbage of the others;
      // not before a child process, which a concurrent sweep here would compete with.
      if (side.inProcess) gc();
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
function warm(dir) {
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

function removeTree(path) {
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
const settle = () => run("sync", []);
// Copies made by the retain and staging comparisons are all removed at the end
// of their section, not between runs: deleting a GiB on a filesystem mounted
// with online discard slows the writes that follow it for seconds, and would
// land on whichever side ran next.

// ---------------------------------------------------------------- data sets

const DATA_VERSION = 1;

/** Deterministic incompressible bytes: the AES-256-CTR keystream under a key derived from `label`. */
function keystream(label) {
  const key = createHash("sha256").update(`oats-bench:${label}`).digest();
  const cipher = createCipheriv("aes-256-ctr", key, Buffer.alloc(16));
  const zeros = Buffer.alloc(8 * MiB);
  return (length) => {
    const parts = [];
    let left = length;
    while (left > 0) {
      const n = Math.min(left, zeros.length);
      parts.push(cipher.update(zeros.subarray(0, n)));
      left -= n;
    }
    return parts.length === 1 ? parts[0] : Buffer.concat(parts);
  };
}

/** mulberry32: a small seeded PRNG for sizes and layout. */
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function writeBigFile(path, size, label) {
  const next = keystream(label);
  const fd = openSync(path, "w", 0o644);
  try {
    for (let done = 0; done < size; ) {
      const chunk = next(Math.min(8 * MiB, size - done));
      let written = 0;
      while (written < chunk.length) written += writeSync(fd, chunk, written);
      done += chunk.length;
    }
  } finally {
    closeSync(fd);
  }
}

const SMALL = { files: 20_000, top: 10, perTop: 34, minSize: 100, maxSize: 4096 }; // 10 + 10*34 = 350 directories
const CAPS = { capabilities: 50, files: 200, dirs: 8, minSize: 100, maxSize: 4096 };
const CAPTURE = { files: 2000, dirs: 20, minSize: 100, maxSize: 4096 };
const TARBALL = { files: 5000, dirs: 50, size: 10_000 }; // ~50 MB of incompressible content

const DATASETS = {
  big: {
    describe: "8 files x 128 MiB",
    generate(dir) {
      for (let i = 0; i < 8; i++) writeBigFile(join(dir, `blob-${i}.bin`), 128 * MiB, `big-${i}`);
    },
  },
  small: {
    describe: "20,000 files of 100-4096 bytes in 350 directories",
    generate(dir) {
      const random = prng(20_000);
      const next = keystream("small");
      const dirs = [];
      for (let t = 0; t < SMALL.top; t++) {
        const top = join(dir, `pkg-${String(t).padStart(2, "0")}`);
        mkdirSync(top);
        dirs.push(top);
        for (let s = 0; s < SMALL.perTop; s++) {
          const sub = join(top, `mod-${String(s).padStart(2, "0")}`);
          mkdirSync(sub);
          dirs.push(sub);
        }
      }
      for (let i = 0; i < SMALL.files; i++) {
        const where = dirs[i % dirs.length];
        const size = SMALL.minSize + Math.floor(random() * (SMALL.maxSize - SMALL.minSize + 1));
        const path = join(where, `file-${String(i).padStart(5, "0")}.${["js", "json", "md", "ts"][i % 4]}`);
        writeFileSync(path, next(size));
        chmodSync(path, i % 10 === 0 ? 0o755 : 0o644);
      }
    },
  },
  caps: {
    describe: `${CAPS.capabilities} capability trees of ${CAPS.files} files each`,
    generate(dir) {
      for (let c = 0; c < CAPS.capabilities; c++) {
        const name = `cap-${String(c).padStart(2, "0")}`;
        const random = prng(1000 + c);
        const next = keystream(`caps-${c}`);
        const root = join(dir, name);
        const dirs = ["bin", ...Array.from({ length: CAPS.dirs - 1 }, (_, d) => `lib/mod-${d}`)].map((sub) => join(root, sub));
        for (const sub of dirs) mkdirSync(sub, { recursive: true });
        writeFileSync(join(root, "bin", "run.mjs"), `#!/usr/bin/env node\nconsole.log(${JSON.stringify(name)});\n`);
        chmodSync(join(root, "bin", "run.mjs"), 0o755);
        for (let i = 1; i < CAPS.files; i++) {
          const size = CAPS.minSize + Math.floor(random() * (CAPS.maxSize - CAPS.minSize + 1));
          writeFileSync(join(dirs[i % dirs.length], `file-${String(i).padStart(3, "0")}.js`), next(size));
        }
      }
    },
  },
  capture: {
    describe: `one capture tree of ${CAPTURE.files} files`,
    generate(dir) {
      const random = prng(2000);
      const next = keystream("capture");
      const dirs = ["bin", ...Array.from({ length: CAPTURE.dirs - 1 }, (_, d) => `lib/mod-${String(d).padStart(2, "0")}`)].map((sub) => join(dir, sub));
      for (const sub of dirs) mkdirSync(sub, { recursive: true });
      writeFileSync(join(dir, "bin", "run"), "#!/bin/sh\necho captured\n");
      chmodSync(join(dir, "bin", "run"), 0o755);
      for (let i = 1; i < CAPTURE.files; i++) {
        const size = CAPTURE.minSize + Math.floor(random() * (CAPTURE.maxSize - CAPTURE.minSize + 1));
        writeFileSync(join(dirs[i % dirs.length], `file-${String(i).padStart(4, "0")}.js`), next(size));
      }
    },
  },
  tarball: {
    describe: `a package/ tree of ${TARBALL.files} files of ${TARBALL.size} bytes`,
    generate(dir) {
      const next = keystream("tarball");
      const root = join(dir, "package");
      const dirs = ["bin", ...Array.from({ length: TARBALL.dirs - 1 }, (_, d) => `lib/mod-${String(d).padStart(2, "0")}`)].map((sub) => join(root, sub));
      for (const sub of dirs) mkdirSync(sub, { recursive: true });
      for (let i = 0; i < TARBALL.files; i++) {
        const path = join(dirs[i % dirs.length], `file-${String(i).padStart(4, "0")}.js`);
        writeFileSync(path, next(TARBALL.size));
        chmodSync(path, i % 50 === 0 ? 0o755 : 0o644);
      }
    },
  },
  huge: {
    describe: "one 2 GiB file",
    generate(dir) {
      writeBigFile(join(dir, "huge.bin"), 2 * GiB, "huge");
    },
  },
};

/** Generate a data set unless a stamp says the same version is already there. */
function dataset(name) {
  const dir = join(DATA, name);
  const stamp = join(DATA, `${name}.stamp.json`);
  const want = JSON.stringify({ version: DATA_VERSION, name, small: name === "small" ? SMALL : undefined, caps: name === "caps" ? CAPS : undefined, capture: name === "capture" ? CAPTURE : undefined, tarball: name === "tarball" ? TARBALL : undefined });
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
const oats = await import(join(DIST, "index.js"));
const { digestTree, retainTree, verifyTree, readResolution, writeResolution } = oats;
const { StagingWriter } = await import(join(DIST, "retention", "store", "staging-writer.js"));
const { digestListing } = await import(join(DIST, "retention", "digest", "tree.js"));
const { walkTree } = await import(join(DIST, "retention", "digest", "walk.js"));
const { readRecordBytes } = await import(join(DIST, "resolution", "store.js"));
const cliExists = () => existsSync(CLI);
const oneLine = (text) => text.trim().split("\n")[0].slice(0, 160);

/** Whether `node dist/cli/bin.js ...args` runs; if not, a note says why and the CLI rows are left out. */
async function cliWorks(section, args) {
  if (!cliExists()) {
    notes.push(`[${section}] dist/cli/bin.js is not built; CLI figures left out`);
    return false;
  }
  const probe = await run(process.execPath, [CLI, ...args], { allowFail: true });
  if (probe.code === 0) return true;
  notes.push(`[${section}] \`oats ${args.join(" ")}\` exited ${probe.code}: ${oneLine(probe.stderr)}`);
  return false;
}

const digestOf = async (dir) => (await digestTree(dir, [TREE_EXEC]))[TREE_EXEC];
const digestInOutput = (text) => text.match(/sha256-[0-9a-f]{64}/)?.[0] ?? null;

// ---------------------------------------------------------------- results

const rows = [];
const notes = [];
/**
 * kind "ratio-min": ratio = baseline/ours as throughput (bigger is better), goal is a floor.
 * kind "ratio-max": ratio = ours/baseline as time (smaller is better), goal is a ceiling.
 * kind "abs-max": a value with a ceiling, no baseline.
 * kind "info": shown, not judged.
 */
function addRow(row) {
  rows.push(row);
  const verdict = row.pass === undefined ? "" : row.pass ? "PASS" : "MISS";
  console.error(`  => ${row.id} ${row.what}: ours ${row.ours} | baseline ${row.baseline} | ${row.ratio} (goal ${row.goal}) ${verdict}`);
}

function timeRow({ id, what, oursMs, baseMs, goal, kind = "ratio-max", headline = true, oursExtra = "", baseExtra = "", bytes }) {
  if (kind === "ratio-min") {
    const ratio = baseMs / oursMs; // throughput ratio for the same bytes
    addRow({
      id, what, headline,
      ours: `${fmtMs(oursMs)} (${fmtRate(bytes, oursMs)})${oursExtra}`,
      baseline: `${fmtMs(baseMs)} (${fmtRate(bytes, baseMs)})${baseExtra}`,
      ratio: `${ratio.toFixed(2)}x`, ratioValue: ratio,
      goal: goal === null ? "-" : `>= ${goal}x`,
      pass: goal === null ? undefined : ratio >= goal,
    });
  } else {
    const ratio = oursMs / baseMs;
    addRow({
      id, what, headline,
      ours: `${fmtMs(oursMs)}${oursExtra}`,
      baseline: `${fmtMs(baseMs)}${baseExtra}`,
      ratio: `${ratio.toFixed(2)}x`, ratioValue: ratio,
      goal: goal === null ? "-" : `<= ${goal}x`,
      pass: goal === null ? undefined : ratio <= goal,
    });
  }
}

function missingRow(id, what, goal, why) {
  addRow({ id, what, headline: true, ours: `n/a (${why})`, baseline: "-", ratio: "-", goal, pass: undefined });
}

// ---------------------------------------------------------------- 1. large files vs openssl

async function benchBig() {
  console.error("\n[1] digest of 8 x 128 MiB vs openssl dgst -sha256");
  const dir = dataset("big");
  const files = readdirSync(dir).sort().map((name) => join(dir, name));
  const bytes = files.reduce((sum, file) => sum + statSync(file).size, 0);
  warm(dir);
  let oursDigest;
  const sides = [
    { name: "oats (library, in-process)", inProcess: true, run: async () => void (oursDigest = await digestOf(dir)) },
    { name: "openssl dgst -sha256", run: () => run("openssl", ["dgst", "-sha256", ...files], { capture: false }) },
  ];
  if (await cliWorks("1", ["digest", dir])) sides.push({ name: "oats digest (CLI)", run: () => run(process.execPath, [CLI, "digest", dir], { capture: false }) });
  const times = await interleave(sides, Math.max(3, Math.min(options.runs, 5)));
  const [ours, base, cli] = sides.map((side) => median(times[side.name]));
  timeRow({ id: "1", what: "digest 8 x 128 MiB, library vs openssl dgst (throughput)", oursMs: ours, baseMs: base, goal: 0.9, kind: "ratio-min", bytes });
  if (cli !== undefined) timeRow({ id: "1b", what: "same, CLI `oats digest` end to end (info)", oursMs: cli, baseMs: base, goal: null, kind: "ratio-min", bytes, headline: false });
  return oursDigest;
}

// ---------------------------------------------------------------- 2. many small files vs sha256sum

const PIPELINE = "find . -type f | sort | xargs sha256sum";

async function benchSmall() {
  console.error(`\n[2] digest of 20,000 small files vs \`${PIPELINE}\``);
  const dir = dataset("small");
  warm(dir);
  const expected = await digestOf(dir);
  // The digest module alone in a fresh process: node start, cold JIT, no CLI.
  const leanScript = [
    `const { digestTree } = await import(${JSON.stringify(join(DIST, "retention", "digest", "tree.js"))});`,
    `const digests = await digestTree(process.argv[1]);`,
    `process.stdout.write(digests[${JSON.stringify(TREE_EXEC)}] + "\\n");`,
  ].join("\n");
  const sides = [
    { name: "pipeline", run: () => run("sh", ["-c", PIPELINE], { cwd: dir, capture: false }) },
    { name: "library", inProcess: true, run: () => digestOf(dir) },
    { name: "fresh", run: () => run(process.execPath, ["--input-type=module", "-e", leanScript, dir], { capture: false }) },
  ];
  let cliNote = null;
  if (cliExists()) {
    const probe = await run(process.execPath, [CLI, "digest", dir], { allowFail: true });
    const shown = digestInOutput(probe.stdout);
    if (probe.code !== 0) cliNote = `CLI exited ${probe.code}: ${oneLine(probe.stderr)}`;
    else if (shown !== expected) cliNote = `CLI printed ${shown}, library computed ${expected}`;
    if (cliNote) notes.push(`[2] ${cliNote}`);
    else sides.push({ name: "cli", run: () => run(process.execPath, [CLI, "digest", dir], { capture: false }) });
  } else cliNote = "dist/cli/bin.js not built";
  // What the CLI costs before it reads a byte: start node, load the CLI and the library, digest an empty tree.
  const empty = join(WORK, "empty-tree");
  mkdirSync(empty, { recursive: true });
  if (sides.some((side) => side.name === "cli")) {
    sides.push({ name: "cli-empty", run: () => run(process.execPath, [CLI, "digest", empty], { capture: false }) });
    sides.push({ name: "node", run: () => run(process.execPath, ["-e", "0"], { capture: false }) });
  }
  const times = await interleave(sides, options.runs);
  const base = median(times.pipeline);
  if (times.cli) timeRow({ id: "2", what: "digest 20k small files, CLI `oats digest` end to end vs pipeline", oursMs: median(times.cli), baseMs: base, goal: 1.0 });
  else missingRow("2", "digest 20k small files, CLI `oats digest` end to end vs pipeline", "<= 1.0x", "CLI not usable, see notes");
  timeRow({ id: "2b", what: "same, library call in-process", oursMs: median(times.library), baseMs: base, goal: 1.0, headline: false });
  timeRow({ id: "2d", what: "same, digest module alone in a fresh `node` process (info)", oursMs: median(times.fresh), baseMs: base, goal: null, headline: false });
  if (times["cli-empty"]) {
    timeRow({
      id: "2c",
      what: "CLI fixed cost: `oats digest <empty dir>` vs `node -e 0` (info)",
      oursMs: median(times["cli-empty"]),
      baseMs: median(times.node),
      goal: null,
      headline: false,
    });
  }
  return expected;
}

// ---------------------------------------------------------------- 3. retain vs cp -a + sync -f + digest

async function benchRetain(name, runs) {
  console.error(`\n[3] retainTree (capture) of ${name} vs cp -a + sync -f + digest of the copy`);
  const source = dataset(name);
  warm(source);
  const scopes = join(WORK, "scopes");
  const copies = join(WORK, "copies");
  removeTree(scopes);
  removeTree(copies);
  mkdirSync(scopes, { recursive: true });
  mkdirSync(copies, { recursive: true });
  const scopeOf = (round) => join(scopes, `scope-${round + 1}`);
  const copyOf = (round) => join(copies, `copy-${round + 1}`);
  const digests = new Set();
  const sides = [
    {
      name: "oats",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(scopeOf(round));
        await settle();
      },
      run: async (round) => {
        const receipt = await retainTree(scopeOf(round), { kind: "capture", key: `bench-${name}`, source });
        if (receipt.status !== "retained") throw new Error(`expected a fresh retain, got ${receipt.status}`);
        digests.add(receipt.integrity.value);
      },
    },
    {
      name: "baseline",
      inProcess: true, // its digest of the copy
      prepare: settle,
      run: async (round) => {
        await run("cp", ["-a", source, copyOf(round)], { capture: false });
        await run("sync", ["-f", copyOf(round)], { capture: false });
        digests.add(await digestOf(copyOf(round)));
      },
    },
  ];
  const times = await interleave(sides, runs);
  removeTree(scopes);
  removeTree(copies);
  await settle();
  if (digests.size !== 1) notes.push(`[3] ${name}: retained and copied digests differ: ${[...digests].join(", ")}`);
  const label = name === "small" ? "20k small files" : "8 x 128 MiB";
  timeRow({ id: name === "small" ? "3a" : "3b", what: `retainTree ${label} vs cp -a + sync -f + digest`, oursMs: median(times.oats), baseMs: median(times.baseline), goal: 2.0 });
}

// ---------------------------------------------------------------- 3c. durability: per-file fsync vs one syncfs

/**
 * The staging copy alone (copy + hash + making it durable, no verify, no
 * rename), once with an fsync of every file as it is written and once with one
 * syncfs at the end, on the same tree: the figures behind PER_FILE_FSYNC_LIMIT.
 */
async function benchDurability(name, id, runs) {
  const label = name === "small" ? "20k small files" : "8 x 128 MiB";
  console.error(`\n[${id}] staging ${label}: per-file fsync vs one syncfs (\`sync -f\`)`);
  const source = dataset(name);
  warm(source);
  const listing = await walkTree(source);
  const stage = join(WORK, "stage");
  removeTree(stage);
  mkdirSync(stage, { recursive: true });
  const side = (durability) => ({
    name: durability,
    inProcess: true,
    prepare: async (round) => {
      mkdirSync(join(stage, `${durability}-${round + 1}`));
      await settle();
    },
    run: async (round) => {
      const writer = new StagingWriter(join(stage, `${durability}-${round + 1}`), listing, { durability });
      writer.prepareDirectories();
      try {
        await digestListing(listing, [TREE_EXEC], { sink: writer, sinkOrder: "bytes" });
      } finally {
        writer.abort();
      }
      await writer.flush();
    },
  });
  const times = await interleave([side("syncfs"), side("per-file")], runs);
  removeTree(stage);
  await settle();
  timeRow({
    id,
    what: `stage ${label} (copy + hash + durable): per-file fsync vs one syncfs (info)`,
    oursMs: median(times["per-file"]),
    baseMs: median(times.syncfs),
    goal: null,
    headline: false,
    oursExtra: " per-file",
    baseExtra: " syncfs",
  });
}

// ---------------------------------------------------------------- 4. peak RSS on a 2 GiB file

async function peakRss(file, args) {
  const viaTime = existsSync("/usr/bin/time");
  const result = viaTime ? await run("/usr/bin/time", ["-f", "maxrss-kib=%M", file, ...args]) : await run(file, args);
  const fromTime = result.stderr.match(/maxrss-kib=(\d+)/);
  const fromChild = result.stdout.match(/"maxRSS":(\d+)/);
  const kib = fromTime ? Number(fromTime[1]) : fromChild ? Number(fromChild[1]) : NaN;
  return { kib, ms: result.ms, stdout: result.stdout };
}

async function benchRss() {
  console.error("\n[4] peak RSS while digesting one 2 GiB file");
  const dir = dataset("huge");
  warm(dir);
  const script = [
    `const { digestTree } = await import(${JSON.stringify(join(DIST, "retention", "digest", "tree.js"))});`,
    `const digests = await digestTree(${JSON.stringify(dir)}, [${JSON.stringify(TREE_EXEC)}]);`,
    `console.log(JSON.stringify({ digest: digests[${JSON.stringify(TREE_EXEC)}], maxRSS: process.resourceUsage().maxRSS }));`,
  ].join("\n");
  const empty = await peakRss(process.execPath, ["-e", "0"]);
  const library = await peakRss(process.execPath, ["--input-type=module", "-e", script]);
  const goal = 150 * 1024;
  const show = (kib) => `${(kib / 1024).toFixed(1)} MiB`;
  addRow({
    id: "4",
    what: "peak RSS, digest of one 2 GiB file (library in a child process)",
    headline: true,
    ours: `${show(library.kib)} (${fmtRate(2 * GiB, library.ms)})`,
    baseline: `node -e 0: ${show(empty.kib)}`,
    ratio: "-",
    goal: "<= 150 MiB",
    pass: library.kib <= goal,
  });
  if (await cliWorks("4", ["--version"])) {
    const cli = await peakRss(process.execPath, [CLI, "digest", dir]);
    addRow({
      id: "4b",
      what: "same, CLI `oats digest`",
      headline: false,
      ours: `${show(cli.kib)} (${fmtRate(2 * GiB, cli.ms)})`,
      baseline: `node -e 0: ${show(empty.kib)}`,
      ratio: "-",
      goal: "<= 150 MiB",
      pass: cli.kib <= goal,
    });
  }
}

// ---------------------------------------------------------------- 5. cold start

async function benchStart() {
  console.error("\n[5] `oats --version` cold start vs `node -e 0`");
  if (!(await cliWorks("5", ["--version"]))) return missingRow("5", "`oats --version` cold start vs `node -e 0`", "<= 3x", "CLI not usable, see notes");
  const times = await interleave(
    [
      { name: "node", run: () => run(process.execPath, ["-e", "0"], { capture: false }) },
      { name: "oats", run: () => run(process.execPath, [CLI, "--version"], { capture: false }) },
    ],
    15,
  );
  timeRow({ id: "5", what: "`oats --version` cold start vs `node -e 0` (15 runs each)", oursMs: median(times.oats), baseMs: median(times.node), goal: 3.0 });
}

// ---------------------------------------------------------------- 6. design alternatives (info)

async function benchAlternatives() {
  console.error("\n[6] reading many small files: synchronous vs thread pool vs worker threads (bench/alternatives.mjs)");
  const dir = dataset("small");
  warm(dir);
  const script = join(REPO, "bench", "alternatives.mjs");
  const expected = new Set();
  const mode = (name, limit) => {
    const results = [];
    return {
      name: limit ? `${name}@${limit}` : name,
      results,
      run: async () => {
        const out = await run(process.execPath, [script, name, dir, ...(limit ? [String(limit)] : [])]);
        const parsed = JSON.parse(out.stdout);
        if (!limit) expected.add(parsed.digest);
        results.push(parsed);
      },
    };
  };
  // The thread-pool modes cost hundreds of microseconds a file here: timed on the first 2,000 files.
  const part = 2000;
  const sides = [mode("sync"), mode("sync", part), mode("async", part), mode("async16", part), mode("workers1"), mode("workers2")];
  await interleave(sides, 3);
  if (expected.size !== 1) notes.push(`[6] the alternatives disagree on the digest: ${[...expected].join(", ")}`);
  const timed = (side) => side.results.slice(1); // the first was the warm-up
  const perFile = (side) => median(timed(side).map((r) => (r.afterListingMs * 1000) / r.files));
  const total = (side) => median(timed(side).map((r) => r.ms));
  const [sync, syncPart, async1, async16, workers1, workers2] = sides;
  const us = (value) => `${value.toFixed(1)} us/file`;
  const rowPerFile = (id, what, side) =>
    addRow({ id, what, headline: false, ours: us(perFile(side)), baseline: `${us(perFile(syncPart))} sync`, ratio: `${(perFile(side) / perFile(syncPart)).toFixed(2)}x`, goal: "-" });
  rowPerFile("6a", "small-file reads through the thread pool, one file at a time, vs synchronous (info)", async1);
  rowPerFile("6b", "same, 16 files in flight (info)", async16);
  const rowTotal = (id, what, side) =>
    timeRow({ id, what, oursMs: total(side), baseMs: total(sync), goal: null, headline: false, baseExtra: " sync" });
  rowTotal("6c", "list + read + hash 20k files: 1 worker thread reading ahead vs synchronous (info)", workers1);
  rowTotal("6d", "same, 2 worker threads (info)", workers2);
}

// ---------------------------------------------------------------- 7. resolution records

/**
 * A complete instance record selecting every capability of `caps`, one entry
 * point into each, and `configEntries` config choices (their size is what
 * makes a record large; they reference no artifact).
 */
function benchRecord(refs, configEntries) {
  const artifacts = {};
  const entrypoints = {};
  for (const ref of refs) {
    artifacts[ref.key] = {
      artifact: ref,
      package: { id: ref.key, source: `path:/bench/${ref.key}`, version: "1.0.0", commit: null, integrity: null },
      legacyIntegrity: null,
    };
    entrypoints[`${ref.key}.run`] = { artifact: ref, path: "bin/run.mjs", args: ["--bench"], role: "command" };
  }
  const config = {};
  for (let i = 0; i < configEntries; i++) {
    const capability = refs[i % refs.length].key;
    config[`/settings/${capability}/option-${String(i).padStart(4, "0")}`] = {
      value: { enabled: i % 2 === 0, level: i % 7, label: `setting number ${i} of ${capability}` },
      origin: { kind: i % 3 === 0 ? "soul-default" : "operator", ref: "bench/plan.yaml" },
      constraints: i % 5 === 0 ? [{ kind: "maximum", value: 10, origin: { kind: "soul-requirement", ref: "bench/soul.yaml" } }] : [],
      considered: [],
    };
  }
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: "bench" },
    source: null,
    artifacts,
    config,
    bindings: {},
    messaging: null,
    entrypoints,
    capture: null,
    evidence: [],
    unresolved: [],
  };
}

async function benchResolution() {
  console.error(`\n[7] resolution records: verify ${CAPS.capabilities} capabilities of ${CAPS.files} files through the record vs directly; read a ~100 KB record`);
  const dir = dataset("caps");
  const scope = join(WORK, "resolution-scope");
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  const started = performance.now();
  const refs = [];
  for (const name of readdirSync(dir).sort()) {
    const receipt = await retainTree(scope, { kind: "capability", key: `bench.${name}`, source: join(dir, name) });
    refs.push({ kind: "capability", key: receipt.key, integrity: { format: receipt.execIntegrity.format, value: receipt.execIntegrity.value } });
  }
  log(`retained ${refs.length} capabilities in ${fmtMs(performance.now() - started)}`);
  warm(join(scope, ".agents"));

  // (a) verification through the record vs the same artifacts verified directly.
  const { id } = writeResolution(scope, benchRecord(refs, 0));
  const sides = [
    { name: "direct", inProcess: true, run: async () => { for (const ref of refs) await verifyTree(scope, ref); } },
    {
      name: "record",
      inProcess: true,
      run: async () => {
        const read = await readResolution(scope, id, { verify: true });
        if (!read.verified || Object.keys(read.entrypoints).length !== refs.length) throw new Error("the record did not verify every artifact");
      },
    },
  ];
  const times = await interleave(sides, options.runs);
  timeRow({
    id: "7a",
    what: `readResolution(verify) of a record naming ${CAPS.capabilities} x ${CAPS.files}-file capabilities vs verifyTree on each`,
    oursMs: median(times.record),
    baseMs: median(times.direct),
    goal: 1.1,
    baseExtra: " direct",
  });

  // (b) a ~100 KB record read and checked without artifact verification.
  let entries = 300;
  let record = benchRecord(refs, entries);
  const size = (value) => Buffer.byteLength(JSON.stringify(value));
  while (size(record) < 100 * 1024) record = benchRecord(refs, (entries += 25));
  const big = writeResolution(scope, record);
  const bytes = statSync(big.path).size;
  const reads = 50;
  const sample = async (fn) => {
    for (let i = 0; i < 5; i++) await fn(); // warm-up
    gc();
    const samples = [];
    for (let i = 0; i < reads; i++) {
      const t0 = performance.now();
      await fn();
      samples.push(performance.now() - t0);
    }
    return samples;
  };
  const samples = await sample(() => readResolution(scope, big.id));
  // Where the time goes: the record alone (bounded read, digest, canonical check, schema), without resolving the entry points.
  const recordOnly = await sample(() => readRecordBytes(scope, big.id));
  const ms = median(samples);
  addRow({
    id: "7b",
    what: `read + check a ${(bytes / 1024).toFixed(0)} KB record (${entries} config entries, ${refs.length} entry points), no artifact verification; median of ${reads}`,
    headline: true,
    ours: `${ms.toFixed(2)} ms (min ${Math.min(...samples).toFixed(2)}, max ${Math.max(...samples).toFixed(2)})`,
    baseline: "-",
    ratio: "-",
    goal: "<= 5 ms",
    pass: ms <= 5,
  });
  addRow({
    id: "7c",
    what: `same record, its bytes only (read, digest, canonical check, schema; entry points not resolved) (info)`,
    headline: false,
    ours: `${median(recordOnly).toFixed(2)} ms`,
    baseline: "-",
    ratio: "-",
    goal: "-",
  });
  removeTree(scope);
}

// ---------------------------------------------------------------- 8. capture dispatch

/**
 * resolveQueuedCapture (without --exec) of a capture whose executable tree has
 * CAPTURE.files files, against verifyTree of that tree alone. Dispatch adds
 * reading the job and record, the ledger, the pinned blobs, the current
 * config, the entry point, and one fsync'd audit append.
 */
async function benchDispatch() {
  console.error(`\n[8] dispatch of a queued capture (${CAPTURE.files}-file executable tree) vs verifying that tree alone`);
  const tree = dataset("capture");
  const scope = join(WORK, "dispatch-scope");
  const inputs = join(WORK, "dispatch-inputs");
  removeTree(scope);
  removeTree(inputs);
  mkdirSync(scope, { recursive: true });
  mkdirSync(inputs, { recursive: true });
  writeFileSync(join(inputs, "class.yaml"), "schemaVersion: 1\nwings: {bench: internal}\nrepos: {}\ndefaults: []\nfallback: confidential\nprincipals: {}\n");
  writeFileSync(
    join(inputs, "spec.yaml"),
    `name: bench-capture\nexecutable: {tree: ${JSON.stringify(tree)}, path: bin/run, args: [--bench]}\ntarget: {wing: bench}\nclassification: internal\nclassificationConfig: ./class.yaml\nenv: {PATH: /usr/bin:/bin}\ncredentials: [BENCH_TOKEN]\n`,
  );
  const prepared = await oats.prepareCapture(scope, join(inputs, "spec.yaml"));
  await oats.approve(scope, prepared.subject, { reason: "bench" });
  await oats.addJob(scope, { job: "bench-job", resolution: prepared.id });
  const ref = { kind: prepared.subject.kind, key: prepared.subject.key, integrity: prepared.subject.integrity };
  warm(join(scope, ".agents"));
  const sides = [
    { name: "verify", inProcess: true, run: async () => void (await verifyTree(scope, ref)) },
    {
      name: "dispatch",
      inProcess: true,
      run: async () => {
        const plan = await oats.resolveQueuedCapture(scope, "bench-job", { env: { BENCH_TOKEN: "x" } });
        if (plan.verified.length !== 1 || plan.executable.subject.integrity !== prepared.subject.integrity) throw new Error("dispatch did not verify the executable tree");
      },
    },
  ];
  const times = await interleave(sides, Math.max(options.runs, 9));
  timeRow({
    id: "8",
    what: `resolveQueuedCapture (no --exec) of a ${CAPTURE.files}-file capture vs verifyTree of that tree alone`,
    oursMs: median(times.dispatch),
    baseMs: median(times.verify),
    goal: 1.2,
    baseExtra: " verify",
  });
  const verdict = oats.verifyAudit(scope);
  if (!verdict.ok) throw new Error(`audit chain broken after the dispatch bench: ${JSON.stringify(verdict.brokenAt)}`);
  removeTree(scope);
  removeTree(inputs);
}

// ---------------------------------------------------------------- 9. retain from a package tarball

/**
 * retainTarball of a ~50 MB .tgz holding TARBALL.files files vs `tar xzf`
 * into a fresh directory, `sync -f` and the digest of what it wrote: both
 * sides end with a durable, hashed tree.
 */
async function benchTarball() {
  console.error(`\n[9] retain from a ${TARBALL.files}-file .tgz vs tar xzf + sync -f + digest`);
  if (typeof oats.retainTarball !== "function") return missingRow("9", "retain from a 50 MB .tgz vs tar xzf + digest", "<= 1.5x", "retainTarball is not built");
  const tree = dataset("tarball");
  const tgz = join(WORK, "bench-package.tgz");
  removeTree(tgz);
  await run("tar", ["-C", tree, "-czf", tgz, "package"], { capture: false });
  const bytes = statSync(tgz).size;
  const scopes = join(WORK, "tgz-scopes");
  const outs = join(WORK, "tgz-out");
  for (const dir of [scopes, outs]) {
    removeTree(dir);
    mkdirSync(dir, { recursive: true });
  }
  const digests = new Set();
  const sides = [
    {
      name: "oats",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(join(scopes, `scope-${round + 1}`));
        await settle();
      },
      run: async (round) => {
        const receipt = await oats.retainTarball(join(scopes, `scope-${round + 1}`), tgz, { kind: "capture", key: "bench-tgz" });
        digests.add(receipt.execIntegrity.value);
      },
    },
    {
      name: "baseline",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(join(outs, `out-${round + 1}`));
        await settle();
      },
      run: async (round) => {
        const out = join(outs, `out-${round + 1}`);
        await run("tar", ["-C", out, "-xzf", tgz], { capture: false });
        await run("sync", ["-f", out], { capture: false });
        digests.add(await digestOf(join(out, "package")));
      },
    },
  ];
  const times = await interleave(sides, 5);
  removeTree(scopes);
  removeTree(outs);
  removeTree(tgz);
  if (digests.size !== 1) notes.push(`[9] the retained and extracted digests differ: ${[...digests].join(", ")}`);
  timeRow({
    id: "9",
    what: `retainTarball of a ${(bytes / MiB).toFixed(0)} MiB .tgz (${TARBALL.files} files) vs tar xzf + sync -f + digest`,
    oursMs: median(times.oats),
    baseMs: median(times.baseline),
    goal: 1.5,
  });
}

// ---------------------------------------------------------------- 10. export and import

/** exportBundle / importBundle of the 1 GiB data set retained, beside tar cf / tar xf of the same revision. */
async function benchBundle() {
  console.error("\n[10] export and import of 1 GiB of retained trees vs tar cf / tar xf");
  if (typeof oats.exportBundle !== "function" || typeof oats.importBundle !== "function") {
    missingRow("10a", "export 1 GiB", "-", "exportBundle is not built");
    return;
  }
  const source = dataset("big");
  const scope = join(WORK, "bundle-scope");
  const bundles = join(WORK, "bundles");
  const targets = join(WORK, "bundle-targets");
  for (const dir of [scope, bundles, targets]) {
    removeTree(dir);
    mkdirSync(dir, { recursive: true });
  }
  const receipt = await retainTree(scope, { kind: "capture", key: "bench-bundle", source });
  const ref = { kind: "capture", key: "bench-bundle", integrity: `${receipt.execIntegrity.format}:${receipt.execIntegrity.value}` };
  const bytes = 8 * 128 * MiB;
  warm(receipt.dir);
  const exportSides = [
    { name: "oats", inProcess: true, prepare: settle, run: async (round) => void (await oats.exportBundle(scope, [ref], join(bundles, `oats-${round + 1}.tar`))), cleanup: (round) => removeTree(join(bundles, `oats-${round + 1}.tar`)) },
    { name: "tar", prepare: settle, run: (round) => run("tar", ["-C", receipt.dir, "-cf", join(bundles, `tar-${round + 1}.tar`), "."], { capture: false }), cleanup: (round) => removeTree(join(bundles, `tar-${round + 1}.tar`)) },
  ];
  const exported = await interleave(exportSides, 3);
  timeRow({ id: "10a", what: "exportBundle of 1 GiB of retained trees (verify + write) vs tar cf of the revision", oursMs: median(exported.oats), baseMs: median(exported.tar), goal: null, kind: "ratio-min", bytes });

  const bundle = join(bundles, "bench.tar");
  const plain = join(bundles, "plain.tar");
  await oats.exportBundle(scope, [ref], bundle);
  await run("tar", ["-C", receipt.dir, "-cf", plain, "."], { capture: false });
  const importSides = [
    {
      name: "oats",
      inProcess: true,
      prepare: async (round) => {
        mkdirSync(join(targets, `scope-${round + 1}`));
        await settle();
      },
      run: async (round) => void (await oats.importBundle(join(targets, `scope-${round + 1}`), bundle)),
      cleanup: (round) => removeTree(join(targets, `scope-${round + 1}`)),
    },
    {
      name: "tar",
      prepare: async (round) => {
        mkdirSync(join(targets, `tar-${round + 1}`));
        await settle();
      },
      run: (round) => run("tar", ["-C", join(targets, `tar-${round + 1}`), "-xf", plain], { capture: false }),
      cleanup: (round) => removeTree(join(targets, `tar-${round + 1}`)),
    },
  ];
  const imported = await interleave(importSides, 3);
  timeRow({ id: "10b", what: "importBundle of the same (extract to staging, verify all, publish durably) vs tar xf", oursMs: median(imported.oats), baseMs: median(imported.tar), goal: null, kind: "ratio-min", bytes });
  for (const dir of [scope, bundles, targets]) removeTree(dir);
}

// ---------------------------------------------------------------- main

function machine() {
  const cpu = cpus();
  let fs = "unknown";
  try {
    const mounts = readFileSync("/proc/mounts", "utf8").split("\n").map((line) => line.split(" "));
    let best = null;
    for (const [device, point, type] of mounts) {
      if (point && (WORK === point || WORK.startsWith(point.endsWith("/") ? point : `${point}/`)) && (!best || point.length > best.point.length)) best = { device, point, type };
    }
    if (best) fs = `${best.type} (${best.device} on ${best.point})`;
  } catch {
    // not Linux
  }
  return {
    date: new Date().toISOString(),
    cpu: `${cpu[0]?.model ?? "?"} x ${cpu.length}`,
    memory: `${(totalmem() / GiB).toFixed(0)} GiB`,
    kernel: release(),
    node: process.version,
    workDir: `${WORK} on ${fs}`,
  };
}

function printTable() {
  const header = ["#", "measurement", "oats", "baseline", "ratio", "goal", "result"];
  const body = rows.map((row) => [row.id, row.what, row.ours, row.baseline, row.ratio, row.goal, row.pass === undefined ? (row.goal === "-" ? "info" : "n/a") : row.pass ? "PASS" : "MISS"]);
  const widths = header.map((cell, i) => Math.max(cell.length, ...body.map((line) => String(line[i]).length)));
  const line = (cells) => `| ${cells.map((cell, i) => String(cell).padEnd(widths[i])).join(" | ")} |`;
  console.log(line(header));
  console.log(`|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`);
  for (const cells of body) console.log(line(cells));
}

const started = performance.now();
const info = machine();
mkdirSync(DATA, { recursive: true });
console.error(`oats benchmark: work dir ${WORK}, ${options.runs} runs per digest comparison`);
const sections = [
  ["big", benchBig],
  ["small", benchSmall],
  ["retain", async () => {
    await benchRetain("small", 5);
    await benchRetain("big", 3);
  }],
  ["fsync", () => benchDurability("small", "3c", 3)],
  ["fsync-big", () => benchDurability("big", "3d", 3)],
  ["rss", benchRss],
  ["start", benchStart],
  ["alt", benchAlternatives],
  ["resolution", benchResolution],
  ["dispatch", benchDispatch],
  ["tarball", benchTarball],
  ["bundle", benchBundle],
];
for (const [part, fn] of sections) {
  if (!wants(part)) continue;
  try {
    await fn();
  } catch (error) {
    notes.push(`[${part}] failed: ${error?.stack ?? error}`);
    console.error(`  !! ${part} failed:`, error);
  }
}
const elapsed = performance.now() - started;

console.log("");
console.log(`oats benchmark, ${info.date}`);
console.log(`machine: ${info.cpu}, ${info.memory} RAM, Linux ${info.kernel}, Node ${info.node}`);
console.log(`data: ${info.workDir}; medians of interleaved runs, page cache warm for both sides`);
console.log("");
printTable();
console.log("");
for (const note of notes) console.log(`note: ${note}`);
const judged = rows.filter((row) => row.pass !== undefined);
console.log(`${judged.filter((row) => row.pass).length}/${judged.length} goals met; total time ${fmtMs(elapsed)}`);
if (options.json) writeFileSync(options.json, `${JSON.stringify({ machine: info, rows, notes, elapsedMs: elapsed }, null, 2)}\n`);
process.exitCode = 0;
