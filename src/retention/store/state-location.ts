import { createHash } from "node:crypto";
import { lstatSync, mkdirSync, readlinkSync, type Stats } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, isAbsolute, join } from "node:path";
import { errnoCode } from "../../core/index.js";

/**
 * Where the operator's private state lives, and when it can be trusted: kept
 * OUTSIDE the scope so that a scope writer cannot edit it (the chain logs'
 * checkpoints, ledger/chain-state.ts; the anchored revision manifests,
 * manifest-anchor.ts; queued jobs and run evidence marks, private-state.ts).
 *
 * Location: `$OATS_STATE_DIR`, else `$XDG_STATE_HOME/oats`, else
 * `~/.local/state/oats`; below it `scopes/<sha256 of the scope's realpath>/`.
 * Every ancestor of the state root, from `/`, must be owned by root or this
 * process's euid and writable by no one else unless it is sticky (and then
 * the entry below it is ours or root's): otherwise another local user could
 * rename the state away, or make the state root before we do. The root
 * and every directory below it must be a real directory (not a symlink),
 * owned by the euid and not writable by group or others. When any check
 * fails the state is not used at all: its readers fall back to what needs no
 * state (correct, slower), and the callers that grant something (approve,
 * dispatch) refuse (ledger/approval-check.ts, requireUsableState).
 */
function euid(): number {
  return typeof process.geteuid === "function" ? process.geteuid() : -1;
}

/** The configured state root (not created here). */
export function stateRoot(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env["OATS_STATE_DIR"];
  if (explicit && isAbsolute(explicit)) return join(explicit);
  const xdg = env["XDG_STATE_HOME"];
  if (xdg && isAbsolute(xdg)) return join(xdg, "oats");
  return join(homedir(), ".local", "state", "oats");
}

/** Why a directory on the way to the state cannot be trusted. */
export type StateProblemReason =
  | "owner"
  | "writable"
  | "symlink"
  | "not-a-directory"
  | "unreadable"
  | "symlink-loop"
  | "root-directory";

/** The first directory on the way to the operator's state that another local user could change, and how to fix it. */
export interface StateProblem {
  /** The state root that was asked for (`$OATS_STATE_DIR`, `$XDG_STATE_HOME/oats` or `~/.local/state/oats`). */
  readonly stateDir: string;
  /** The directory (or symlink) at fault. */
  readonly path: string;
  readonly reason: StateProblemReason;
  /** What is wrong with `path`, in words. */
  readonly why: string;
  /** What the operator does about it. */
  readonly fix: string;
  readonly uid?: number;
  readonly mode?: string;
  readonly errno?: string;
}

/** The per-scope state directory, or why there is none that can be trusted. */
export type ScopeState =
  | { readonly usable: true; readonly stateDir: string; readonly dir: string }
  | { readonly usable: false; readonly stateDir: string; readonly problem: StateProblem };

const GROUP_OTHER_WRITE = 0o022;
const STICKY = 0o1000;
const MAX_SYMLINKS = 40;

type Found = Omit<StateProblem, "stateDir" | "fix">;
type Judged = Found | null;

function fixFor(problem: Found, stateDir: string, ancestor: boolean): string {
  const elsewhere =
    "or set OATS_STATE_DIR to a directory of this account's whose every ancestor is owned by root or this " +
    "account and writable by no one else";
  const then =
    "; then check both logs against a head kept elsewhere (`oats audit verify --expect-head`, " +
    "`oats approvals --expect-head`): no checkpoint protected them meanwhile";
  switch (problem.reason) {
    case "owner":
      return ancestor
        ? `${problem.path} belongs to uid ${problem.uid}, who can rename the state away: chown it to root ` +
            `or this account (uid ${euid()}), ${elsewhere}${then}`
        : `${problem.path} was made by uid ${problem.uid}, not this account (uid ${euid()}): move it aside as ` +
            `root and let oats create ${stateDir} again, ${elsewhere}${then}`;
    case "writable":
      return `\`chmod go-w ${problem.path}\` (or make it a sticky directory owned by root), ${elsewhere}${then}`;
    case "symlink":
      return `replace the symlink ${problem.path} with a directory of this account's, ${elsewhere}${then}`;
    default:
      return `make ${problem.path} a directory oats can read, ${elsewhere}${then}`;
  }
}

/**
 * An ancestor of the state: a directory owned by root or this account, writable by neither group nor others unless
 * it is sticky. In a sticky directory only an entry's owner (or the directory's, or root) may rename or remove the
 * entry, and the entry below it is checked next: it must be this account's or root's, as every directory on the path
 * must. So a world-writable sticky `/tmp` may hold the state of whoever made `/tmp/<dir>`, never of anyone else.
 */
function judgeAncestor(path: string, stats: Stats, me: number): Judged {
  const mode = stats.mode & 0o7777;
  const seen = { uid: stats.uid, mode: mode.toString(8) };
  if (!stats.isDirectory()) return { path, reason: "not-a-directory", why: `${path} is not a directory`, ...seen };
  if (stats.uid !== 0 && stats.uid !== me)
    return { path, reason: "owner", why: `${path} is owned by uid ${stats.uid}, neither root nor uid ${me}`, ...seen };
  if ((mode & GROUP_OTHER_WRITE) !== 0 && (mode & STICKY) === 0)
    return {
      path,
      reason: "writable",
      why: `${path} is writable by group or others (mode ${mode.toString(8)}) and not sticky`,
      ...seen,
    };
  return null;
}

/** The state root and everything below it: real directories of this account that nobody else can write. */
function judgePrivate(path: string, stats: Stats, me: number): Judged {
  const mode = stats.mode & 0o7777;
  const seen = { uid: stats.uid, mode: mode.toString(8) };
  if (stats.isSymbolicLink()) return { path, reason: "symlink", why: `${path} is a symlink`, ...seen };
  if (!stats.isDirectory()) return { path, reason: "not-a-directory", why: `${path} is not a directory`, ...seen };
  if (stats.uid !== me)
    return {
      path,
      reason: "owner",
      why: `${path} is owned by uid ${stats.uid}, not this account (uid ${me})`,
      ...seen,
    };
  if ((mode & GROUP_OTHER_WRITE) !== 0)
    return {
      path,
      reason: "writable",
      why: `${path} is writable by group or others (mode ${mode.toString(8)})`,
      ...seen,
    };
  return null;
}

function unreadable(path: string, error: unknown): Found {
  const errno = errnoCode(error) ?? String(error);
  return { path, reason: "unreadable", why: `${path} cannot be inspected or created (${errno})`, errno };
}

/** lstat `path`, creating it (0700) first when it is missing. */
function lstatCreating(path: string): Stats {
  try {
    return lstatSync(path);
  } catch (error) {
    if (errnoCode(error) !== "ENOENT") throw error;
  }
  try {
    mkdirSync(path, { mode: 0o700 });
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") throw error;
  }
  return lstatSync(path);
}

/**
 * Resolve `path` as the kernel would, one entry at a time from `/`, and check every directory met on the way and
 * every symlink followed (an entry of a directory already checked, so its owner decides who may replace it):
 * StrictModes, as OpenSSH checks the path to `authorized_keys`. Missing directories are created 0700. Returns the
 * real path, or the first problem.
 */
function resolveTrusted(path: string, me: number): { real: string } | { problem: Found } {
  let pending = path.split("/").filter((name) => name !== "" && name !== ".");
  let current = "/";
  let links = 0;
  let stats: Stats;
  try {
    stats = lstatSync("/");
  } catch (error) {
    return { problem: unreadable("/", error) };
  }
  const top = judgeAncestor("/", stats, me);
  if (top) return { problem: top };
  while (pending.length > 0) {
    const name = pending.shift()!;
    if (name === "..") {
      current = dirname(current);
      continue;
    }
    const next = join(current, name);
    try {
      stats = lstatCreating(next);
    } catch (error) {
      return { problem: unreadable(next, error) };
    }
    if (stats.isSymbolicLink()) {
      if (stats.uid !== 0 && stats.uid !== me)
        return {
          problem: {
            path: next,
            reason: "owner",
            why: `${next} is a symlink owned by uid ${stats.uid}, neither root nor uid ${me}`,
            uid: stats.uid,
          },
        };
      if (++links > MAX_SYMLINKS)
        return { problem: { path: next, reason: "symlink-loop", why: `too many symlinks on the way to ${path}` } };
      let target: string;
      try {
        target = readlinkSync(next);
      } catch (error) {
        return { problem: unreadable(next, error) };
      }
      if (target.startsWith("/")) current = "/";
      pending = [...target.split("/").filter((part) => part !== "" && part !== "."), ...pending];
      continue;
    }
    const problem = judgeAncestor(next, stats, me);
    if (problem) return { problem };
    current = next;
  }
  return { real: current };
}

/** A directory is private when it is a real directory, ours, and nobody else can write it. */
export function isPrivateDirectory(path: string): boolean {
  try {
    return judgePrivate(path, lstatSync(path), euid()) === null;
  } catch {
    return false;
  }
}

/**
 * The per-scope state directory, created 0700, or the reason it cannot be trusted. Every ancestor of the state root
 * is checked (resolveTrusted); the root, `scopes/`, the scope's directory and `objects/` must be real directories of
 * this account that nobody else can write. Nothing is written when any check fails.
 */
export function scopeState(realScope: string, env: NodeJS.ProcessEnv = process.env): ScopeState {
  const root = stateRoot(env);
  const me = euid();
  const refuse = (problem: Found, ancestor: boolean): ScopeState => ({
    usable: false,
    stateDir: root,
    problem: { stateDir: root, ...problem, fix: fixFor(problem, root, ancestor) },
  });
  const name = basename(root);
  if (root === "/" || name === "")
    return refuse({ path: root, reason: "root-directory", why: "the state directory cannot be /" }, false);
  const parent = resolveTrusted(dirname(root), me);
  if ("problem" in parent) return refuse(parent.problem, true);
  let path = parent.real;
  for (const component of [name, "scopes", createHash("sha256").update(realScope, "utf8").digest("hex"), "objects"]) {
    path = join(path, component);
    let stats: Stats;
    try {
      stats = lstatCreating(path);
    } catch (error) {
      return refuse(unreadable(path, error), false);
    }
    const problem = judgePrivate(path, stats, me);
    if (problem) return refuse(problem, false);
  }
  return { usable: true, stateDir: root, dir: dirname(path) };
}

/** The per-scope state directory, created 0700; null when it is not safe to use (scopeState says why). */
export function scopeStateDir(realScope: string): string | null {
  const state = scopeState(realScope);
  return state.usable ? state.dir : null;
}

/**
 * A directory of the operator's state that belongs to no scope (the signing
 * key): `<state root>/<names...>`, each level created 0700 and used only when
 * private, as the per-scope directory is; null when it is not safe to use.
 */
export function operatorStateDir(...names: string[]): string | null {
  const root = stateRoot();
  const me = euid();
  if (root === "/" || basename(root) === "") return null;
  // Every ancestor checked as the scope's state is (resolveTrusted), then each level created and judged private.
  const parent = resolveTrusted(dirname(root), me);
  if ("problem" in parent) return null;
  let path = parent.real;
  for (const name of [basename(root), ...names]) {
    path = join(path, name);
    try {
      if (judgePrivate(path, lstatCreating(path), me) !== null) return null;
    } catch {
      return null;
    }
  }
  return path;
}
