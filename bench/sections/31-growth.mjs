import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CLI,
  WORK,
  addRow,
  cliWorks,
  fmtMs,
  interleave,
  log,
  median,
  notes,
  oats,
  options,
  removeTree,
  retainTree,
  run,
  warm,
} from "../lib.mjs";

// ---------------------------------------------------------------- 31. growth: 10,000 revisions against 1,000

/**
 * Scopes of many small revisions: each revision is a two-file tree (one
 * file shared by all, one naming the revision), retained under a key of
 * its own (a retain into a key that has revisions reads the newest one
 * too, the kept retain's hint: ten times the cost of building the scope);
 * one revision in GROWTH.pinEvery is pinned. `oats ls`, `oats gc
 * --dry-run` (every revision unreachable but young, or pinned), `oats
 * fsck` and `oats pins` of the large scope are timed against the same
 * commands on the small one: ten times the revisions may cost at most 11
 * times the time (linear, with some slack for a fixed start), and no
 * command's peak RSS may pass 150 MiB.
 */
const GROWTH = { small: 1000, large: 10_000, pinEvery: 10 };
const STAMP_VERSION = 1;
const RSS_GOAL_MIB = 150;
const TIME_GOAL = 11;

/**
 * Build (or reuse, while its stamp matches) the scope of `count` revisions,
 * through the library in this process: about 10 ms a revision, so the large
 * scope takes a few minutes once and is reused across runs.
 */
async function growthScope(count) {
  const scope = join(WORK, `growth-${count}`);
  const stamp = join(WORK, `growth-${count}.stamp.json`);
  const want = JSON.stringify({ version: STAMP_VERSION, count, pinEvery: GROWTH.pinEvery });
  if (existsSync(stamp) && readFileSync(stamp, "utf8") === want && existsSync(scope)) return scope;
  const started = performance.now();
  rmSync(stamp, { force: true });
  removeTree(scope);
  mkdirSync(scope, { recursive: true });
  const source = join(WORK, `growth-${count}-source`);
  removeTree(source);
  mkdirSync(source, { recursive: true });
  writeFileSync(join(source, "shared.txt"), "the same in every revision\n");
  for (let i = 0; i < count; i++) {
    writeFileSync(join(source, "revision.txt"), `revision ${i}\n`);
    const receipt = await retainTree(scope, {
      kind: "capture",
      key: `grow-${String(i).padStart(5, "0")}`,
      source,
    });
    if (i % GROWTH.pinEvery === 0)
      await oats.pin(scope, `capture:${receipt.key}@${receipt.integrity.format}:${receipt.integrity.value}`);
    if (i % 1000 === 999) log(`growth-${count}: ${i + 1} revisions`);
  }
  removeTree(source);
  writeFileSync(stamp, want);
  log(`built the ${count}-revision scope in ${fmtMs(performance.now() - started)}`);
  return scope;
}

/** One CLI run under /usr/bin/time: wall time (spawn to exit) and peak RSS in KiB. */
async function timed(args) {
  const result = await run("/usr/bin/time", ["-f", "oats-bench-maxrss %M", process.execPath, CLI, ...args]);
  const rss = Number(/oats-bench-maxrss (\d+)/.exec(result.stderr)?.[1]);
  return { ms: result.ms, rssKiB: rss, stdout: result.stdout };
}

const COMMANDS = {
  ls: ["--json", "ls"],
  gc: ["--json", "gc", "--dry-run"],
  fsck: ["--json", "fsck"],
  pins: ["--json", "pins"],
};

async function benchGrowth() {
  console.error(
    `\n[31] growth: oats ls, gc --dry-run, fsck and pins of ${GROWTH.large.toLocaleString("en-US")} ` +
      `small revisions vs ${GROWTH.small.toLocaleString("en-US")}, time and peak RSS`,
  );
  if (!existsSync("/usr/bin/time")) {
    notes.push("[31] /usr/bin/time is not installed (apt-get install time): the growth rows are skipped");
    return;
  }
  if (!(await cliWorks("31", ["--version"]))) return;
  const small = await growthScope(GROWTH.small);
  const large = await growthScope(GROWTH.large);
  warm(small);
  warm(large);
  const rss = {};
  const sides = [];
  for (const [name, args] of Object.entries(COMMANDS)) {
    for (const [size, scope] of [
      ["small", small],
      ["large", large],
    ]) {
      const key = `${name} ${size}`;
      rss[key] = [];
      sides.push({
        name: key,
        run: async () => {
          const result = await timed(["--scope", scope, ...args]);
          rss[key].push(result.rssKiB);
          if (name === "fsck" && !JSON.parse(result.stdout).ok) throw new Error(`oats fsck of ${scope} found damage`);
        },
      });
    }
  }
  const times = await interleave(sides, Math.min(options.runs, 3));
  for (const [index, name] of Object.keys(COMMANDS).entries()) {
    const large = median(times[`${name} large`]);
    const smallMs = median(times[`${name} small`]);
    const ratio = large / smallMs;
    const peak = Math.max(...rss[`${name} large`]) / 1024;
    const letter = String.fromCharCode(97 + index);
    addRow({
      id: `31${letter}`,
      what:
        `\`oats ${COMMANDS[name].slice(1).join(" ")}\` (CLI) of ${GROWTH.large.toLocaleString("en-US")} small ` +
        `revisions vs ${GROWTH.small.toLocaleString("en-US")} (time)`,
      headline: true,
      ours: fmtMs(large),
      baseline: `${fmtMs(smallMs)} ${GROWTH.small}`,
      ratio: `${ratio.toFixed(2)}x`,
      ratioValue: ratio,
      goal: `<= ${TIME_GOAL}x`,
      pass: ratio <= TIME_GOAL,
    });
    addRow({
      id: `31${letter}2`,
      what: `same, peak RSS of \`oats ${COMMANDS[name].slice(1).join(" ")}\` over ${GROWTH.large} revisions`,
      headline: true,
      ours: `${peak.toFixed(0)} MiB`,
      baseline: `${(Math.max(...rss[`${name} small`]) / 1024).toFixed(0)} MiB ${GROWTH.small}`,
      ratio: "-",
      goal: `<= ${RSS_GOAL_MIB} MiB`,
      pass: peak <= RSS_GOAL_MIB,
    });
  }
}

export const parts = { growth: benchGrowth };
