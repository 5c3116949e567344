import { createHash } from "node:crypto";
import { appendFileSync, cpSync, lstatSync, mkdirSync, readFileSync, readdirSync, realpathSync } from "node:fs";
import { join } from "node:path";
import {
  REPO,
  WORK,
  addRow,
  fmtMs,
  interleave,
  log,
  median,
  oats,
  options,
  removeTree,
  retainTree,
  run,
  timeRow,
  warm,
} from "../lib.mjs";
import { haveTool, runEnv } from "../tools.mjs";

// ---------------------------------------------------------------- 28. store bytes of 50 revisions; 30. their fsck

const REVISIONS = 50;
const STORE_GOAL = 1.1;
const FSCK_GOAL = 1.3;
// For the bench's own peer children only: restic refuses to run without a password, borg asks before using an
// unencrypted repository it has not seen.
const PEER_ENV = {
  RESTIC_PASSWORD: "oats-bench",
  BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK: "yes",
  BORG_RELOCATED_REPO_ACCESS_IS_OK: "yes",
  BORG_BASE_DIR: join(WORK, "store-bytes-borg-home"),
};

/** Disk usage in KiB, each hard-linked file counted once (`du -sk` does). */
async function diskKiB(...paths) {
  const result = await run("du", ["-skc", ...paths]);
  return Number(/^(\d+)\s+total$/m.exec(result.stdout)[1]);
}

/** Regular files of a tree, sorted by path, skipping symlinks. */
function regularFiles(root) {
  const files = [];
  const visit = (dir) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      const stats = lstatSync(path);
      if (stats.isDirectory()) visit(path);
      else if (stats.isFile() && stats.size > 0) files.push(path);
    }
  };
  visit(root);
  return files;
}

const kib = (value) => `${(value / 1024).toFixed(1)} MiB`;

/** The peers, each adding one revision of `source` to its own repository; null when not installed. */
function peers(base, source) {
  const list = [];
  if (haveTool("git", "git", "28")) {
    const gitDir = join(base, "git");
    const git = (...args) => runEnv("git", [`--git-dir=${gitDir}`, `--work-tree=${source}`, ...args], { cwd: source });
    list.push({
      name: "git",
      what: "git (50 commits, `git gc`'d: packed)",
      init: () => runEnv("git", ["init", "-q", "--bare", gitDir]),
      // -f: packages carry .gitignore files of their own, which must not drop their files from the comparison.
      add: async (i) => {
        await git("add", "-A", "-f", ".");
        await git("-c", "user.name=bench", "-c", "user.email=bench@oats", "commit", "-q", "-m", `revision ${i}`);
      },
      finish: () => runEnv("git", [`--git-dir=${gitDir}`, "gc", "-q"]),
      dir: gitDir,
    });
  } else list.push({ name: "git", missing: true });
  if (haveTool("restic", "restic", "28")) {
    const repo = join(base, "restic");
    list.push({
      name: "restic",
      what: "restic (50 snapshots, default compression)",
      init: () => runEnv("restic", ["init", "-q", "--repo", repo], { env: PEER_ENV }),
      add: () => runEnv("restic", ["backup", "-q", "--repo", repo, "."], { cwd: source, env: PEER_ENV }),
      dir: repo,
    });
  } else list.push({ name: "restic", missing: true });
  if (haveTool("borg", "borgbackup", "28")) {
    const repo = join(base, "borg");
    list.push({
      name: "borg",
      what: "borg (50 archives, default lz4)",
      init: () => runEnv("borg", ["init", "--encryption=none", repo], { env: PEER_ENV }),
      add: (i) => runEnv("borg", ["create", `${repo}::revision-${i}`, "."], { cwd: source, env: PEER_ENV }),
      dir: repo,
    });
  } else list.push({ name: "borg", missing: true });
  return list;
}

/**
 * 50 revisions of this repository's node_modules (a copy), each with one
 * more file changed (a line appended), retained into one scope; its disk
 * usage (du: hard-linked files once) against one tree plus the 50 changed
 * files. git, restic and borg store the same 50 revisions beside it. Then
 * fsck of those 50 revisions against fsck of one revision plus hashing the
 * changed files: what a store that shares unchanged files has to read.
 */
async function benchStoreBytes() {
  console.error(
    `\n[28, 30] store bytes of ${REVISIONS} revisions of node_modules (one file changed each) ` +
      `vs one tree + the changed files; fsck of them`,
  );
  const base = join(WORK, "store-bytes");
  removeTree(base);
  mkdirSync(base, { recursive: true });
  const source = join(base, "tree");
  cpSync(realpathSync(join(REPO, "node_modules")), source, { recursive: true, verbatimSymlinks: true });
  const files = regularFiles(source);
  const originalKiB = await diskKiB(source);
  log(`copied node_modules: ${files.length} files, ${kib(originalKiB)}`);
  const changed = Array.from({ length: REVISIONS }, (_, i) => files[Math.floor((i * files.length) / REVISIONS)]);

  const scope = join(base, "scope");
  mkdirSync(scope, { recursive: true });
  const others = peers(base, source);
  for (const peer of others) if (!peer.missing) await peer.init();
  const spent = Object.fromEntries([["oats", 0], ...others.map((peer) => [peer.name, 0])]);
  for (let i = 0; i < REVISIONS; i++) {
    appendFileSync(changed[i], `\n// oats-bench revision ${i}\n`);
    let started = performance.now();
    await retainTree(scope, { kind: "capture", key: "nodemods", source });
    spent.oats += performance.now() - started;
    for (const peer of others) {
      if (peer.missing) continue;
      started = performance.now();
      await peer.add(i);
      spent[peer.name] += performance.now() - started;
    }
    if (i % 10 === 9) log(`${i + 1} revisions`);
  }
  for (const peer of others) if (!peer.missing) await peer.finish?.();
  log(
    `adding the ${REVISIONS} revisions took: ${Object.entries(spent)
      .map(([k, v]) => `${k} ${fmtMs(v)}`)
      .join(", ")}`,
  );

  // The floor: one tree (as it was) and the 50 changed files (as they are now), in disk blocks.
  const floorKiB = originalKiB + (await diskKiB(...changed));
  const oursKiB = await diskKiB(scope);
  const floor = `${kib(floorKiB)} one tree + ${REVISIONS} files`;
  addRow({
    id: "28a",
    what:
      `store bytes (du) of ${REVISIONS} revisions of node_modules, one file changed each, ` +
      `vs one tree + the changed files`,
    headline: true,
    ours: kib(oursKiB),
    baseline: floor,
    ratio: `${(oursKiB / floorKiB).toFixed(2)}x`,
    ratioValue: oursKiB / floorKiB,
    goal: `<= ${STORE_GOAL}x`,
    pass: oursKiB / floorKiB <= STORE_GOAL,
  });
  for (const [index, peer] of others.entries()) {
    const id = `28${String.fromCharCode(98 + index)}`;
    if (peer.missing) {
      addRow({
        id,
        what: `same, peer ${peer.name} (info)`,
        headline: false,
        ours: "peer not installed",
        baseline: floor,
        ratio: "-",
        goal: "-",
      });
      continue;
    }
    const peerKiB = await diskKiB(peer.dir);
    addRow({
      id,
      what: `same, peer ${peer.what} (info)`,
      headline: false,
      ours: kib(peerKiB),
      baseline: floor,
      ratio: `${(peerKiB / floorKiB).toFixed(2)}x`,
      ratioValue: peerKiB / floorKiB,
      goal: "-",
    });
  }
  for (const peer of others) if (!peer.missing) removeTree(peer.dir);
  removeTree(PEER_ENV.BORG_BASE_DIR);

  // 30: fsck of the 50 revisions vs fsck of one revision (the final tree) plus hashing the changed files.
  const one = join(base, "scope-one");
  mkdirSync(one, { recursive: true });
  await retainTree(one, { kind: "capture", key: "nodemods", source });
  warm(scope);
  warm(one);
  const check = (report, revisions) => {
    if (!report.ok || report.counts.revisions !== revisions)
      throw new Error(`fsck: ${JSON.stringify(report.counts)}, worst ${report.worst?.message}`);
  };
  const times = await interleave(
    [
      { name: `fsck ${REVISIONS}`, inProcess: true, run: async () => check(await oats.fsckScope(scope), REVISIONS) },
      {
        name: "fsck 1 + files",
        inProcess: true,
        run: async () => {
          check(await oats.fsckScope(one), 1);
          for (const path of changed) createHash("sha256").update(readFileSync(path)).digest("hex");
        },
      },
    ],
    Math.min(options.runs, 3),
  );
  timeRow({
    id: "30",
    what:
      `fsckScope of the ${REVISIONS} node_modules revisions of 28a vs fsckScope of one + ` +
      `hashing the ${REVISIONS} changed files`,
    oursMs: median(times[`fsck ${REVISIONS}`]),
    baseMs: median(times["fsck 1 + files"]),
    goal: FSCK_GOAL,
    baseExtra: " one + files",
  });
  removeTree(base);
}

export const parts = { "store-bytes": benchStoreBytes };
