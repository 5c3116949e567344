/**
 * The tools people would use instead of oats, for the comparison
 * sections 13-15: finding or installing them, a cold page cache, a real
 * node_modules tree, and running a command with its own environment.
 */
import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, lstatSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DATA, REPO, log, notes, removeTree } from "./lib.mjs";

const isRoot = process.getuid?.() === 0;
const found = new Map();

const onPath = (command) => spawnSync("sh", ["-c", 'command -v "$1"', "sh", command], { stdio: "ignore" }).status === 0;

/**
 * Whether `command` can run here: found on PATH, or installed from the Debian
 * package `aptPackage` when we are root. A tool that cannot be had is noted
 * once, and the caller skips its rows by name.
 */
export function haveTool(command, aptPackage, section) {
  if (found.has(command)) return found.get(command);
  let ok = onPath(command);
  if (!ok && isRoot && aptPackage && onPath("apt-get")) {
    log(`installing ${aptPackage} for ${command}`);
    const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
    spawnSync("apt-get", ["install", "-y", "-q", aptPackage], { stdio: "ignore", env });
    ok = onPath(command);
    if (!ok) {
      spawnSync("apt-get", ["update", "-q"], { stdio: "ignore", env });
      spawnSync("apt-get", ["install", "-y", "-q", aptPackage], { stdio: "ignore", env });
      ok = onPath(command);
    }
  }
  if (!ok)
    notes.push(
      `[${section}] \`${command}\` is not ` +
        `installed${aptPackage ? ` and apt-get could not install ${aptPackage}` : ""}: ` +
        `its rows are skipped`,
    );
  found.set(command, ok);
  return ok;
}

let dropWorks = null;

/** Drop the page cache (root only: `sync; echo 3 > /proc/sys/vm/drop_caches`); false when this machine does not allow
 * it. */
export function dropCaches() {
  if (dropWorks === false) return false;
  spawnSync("sync");
  try {
    writeFileSync("/proc/sys/vm/drop_caches", "3\n");
    dropWorks = true;
  } catch {
    dropWorks = false;
  }
  return dropWorks;
}

/** Whether cold rows can be cold here; says so in a note once if not. */
export function coldPossible(section) {
  const ok = dropCaches();
  if (!ok && !notes.some((note) => note.includes("drop_caches")))
    notes.push(
      `[${section}] cannot write /proc/sys/vm/drop_caches (not root?): the "cold" rows ran with a warm page cache`,
    );
  return ok;
}

/**
 * The certificate file this process's caller gave node (NODE_EXTRA_CA_CERTS),
 * or undefined. Node 20 reads and parses it, with its own root certificates,
 * at every start, before any script runs and whether or not the process ever
 * makes a TLS connection: 40-70 ms of a bare start, and about 50 ms of a cold
 * verify, on the AMD EPYC machine measured (docs/design/performance.md, "The
 * CLI's start: bundles and code caches"). The bench's own
 * caller may set it (a sandbox's proxy does); rows 5b and 20ax-20cx show what
 * it costs the CLI, beside rows that keep the caller's environment.
 */
export const extraCaCerts = process.env.NODE_EXTRA_CA_CERTS || undefined;

/** Run a command without a shell, with extra environment (`unset`: names removed from it); resolves with wall time
 * (spawn to close). */
export function runEnv(file, args, { cwd, env = {}, unset = [], allowFail = false, capture = false } = {}) {
  return new Promise((resolvePromise, reject) => {
    const started = performance.now();
    const childEnv = { ...process.env, ...env };
    for (const name of unset) delete childEnv[name];
    const child = spawn(file, args, { cwd, env: childEnv, stdio: ["ignore", capture ? "pipe" : "ignore", "pipe"] });
    const out = [];
    const err = [];
    child.stdout?.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      const ms = performance.now() - started;
      const result = { ms, code, signal, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() };
      if ((code !== 0 || signal) && !allowFail)
        reject(
          new Error(`${file} ${args.join(" ")} failed (${signal ?? code}): ${result.stderr.trim().slice(0, 500)}`),
        );
      else resolvePromise(result);
    });
  });
}

/** A chroot nix store under `root` (no daemon): the environment for nix-store. */
export const nixEnv = (root) => ({ NIX_REMOTE: `local?root=${root}`, NIX_CONFIG: "sandbox = false" });

/** Make a tree writable again and remove it (nix stores and retained revisions are read-only). */
export function removeReadOnly(path) {
  if (!existsSync(path)) return;
  spawnSync("chmod", ["-R", "u+w", path], { stdio: "ignore" });
  removeTree(path);
}

// ---------------------------------------------------------------- a real node_modules

export const NODE_MODULES_SOURCES = [
  { from: join(REPO, "node_modules"), to: "node_modules" },
  // Node's own bundled npm and corepack: real published packages, so the tree is a few thousand files.
  { from: "/usr/lib/node_modules", to: "lib/node_modules" },
];

function countFiles(dir) {
  let files = 0;
  let links = 0;
  const visit = (path) => {
    for (const name of readdirSync(path)) {
      const child = join(path, name);
      const stats = lstatSync(child);
      if (stats.isDirectory()) visit(child);
      else if (stats.isSymbolicLink()) links += 1;
      else if (stats.isFile()) files += 1;
    }
  };
  visit(dir);
  return { files, links };
}

/**
 * A copy of real node_modules trees (this repository's, symlinks kept, and
 * Node's bundled npm and corepack), made once and reused while its stamp
 * matches: the copy, not the live tree, so an `npm install` elsewhere does
 * not change the workload under a run.
 */
export function nodeModulesTree() {
  const dir = join(DATA, "nodemods");
  const stamp = join(DATA, "nodemods.stamp.json");
  if (existsSync(stamp) && existsSync(dir)) return { dir, ...JSON.parse(readFileSync(stamp, "utf8")) };
  rmSync(stamp, { force: true });
  removeTree(dir);
  mkdirSync(dir, { recursive: true });
  const used = [];
  for (const { from, to } of NODE_MODULES_SOURCES) {
    if (!existsSync(from)) continue;
    mkdirSync(join(dir, to, ".."), { recursive: true });
    cpSync(from, join(dir, to), { recursive: true, verbatimSymlinks: true, preserveTimestamps: true });
    used.push(from);
  }
  const counts = countFiles(dir);
  const info = { sources: used, ...counts };
  writeFileSync(stamp, JSON.stringify(info));
  log(`copied ${used.join(" + ")} into ${dir}: ${counts.files} files, ${counts.links} symlinks`);
  return { dir, ...info };
}

export const describeNodeModules = (tree) =>
  `a real node_modules (${tree.files.toLocaleString("en-US")} files: ${tree.sources.join(" + ")})`;
