import { createHash, randomBytes } from "node:crypto";
import {
  closeSync,
  constants,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readlinkSync,
  readSync,
  renameSync,
  type Stats,
  unlinkSync,
  writeSync,
} from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, isAbsolute, join } from "node:path";
import { errnoCode } from "../core/index.js";
import { isPlainRecord } from "./chain-line.js";

/**
 * The operator's private state for the chain logs: verified checkpoints and
 * per-subject indexes, kept OUTSIDE the scope so that a scope writer cannot
 * edit them. A hash chain is unkeyed; anything inside the scope could be
 * recomputed by whoever can write there, and an index there would be an
 * easier target than the logs themselves.
 *
 * Location: `$OATS_STATE_DIR`, else `$XDG_STATE_HOME/oats`, else
 * `~/.local/state/oats`; below it `scopes/<sha256 of the scope's realpath>/`.
 * Every ancestor of the state root, from `/`, must be owned by root or this
 * process's euid and writable by no one else unless it is sticky (and then
 * the entry below it is ours or root's): otherwise another local user could
 * rename the checkpoint away, or make the state root before we do. The root
 * and every directory below it must be a real directory (not a symlink),
 * owned by the euid and not writable by group or others. When any check
 * fails the state is not used at all: reads fall back to a full scan
 * (correct, but anchored by nothing), and the callers that grant something
 * (approve, dispatch) refuse (approval-check.ts, requireUsableState).
 *
 * Nothing here is trusted blindly: bucket objects are content-addressed and
 * their hash is checked on every read; a checkpoint or bucket that is missing,
 * unreadable or malformed reads as "no state" and costs a full scan. The state
 * is a cache of work already verified, never a source of approvals: every
 * answer it gives is confirmed against the log's bytes (see chain-sync.ts).
 */

export interface Anchor {
  /** Bytes [0, offset) hash to sha256 (hex). */
  offset: number;
  seq: number;
  head: string;
  sha256: string;
}

export interface Checkpoint {
  v: 1;
  /** The log file's identity and change time when the verified state was taken. */
  dev: string;
  ino: string;
  size: number;
  ctimeNs: string;
  mtimeNs: string;
  /** Verified through here: entry `seq` with hash `head` ends at byte `offset`. */
  offset: number;
  seq: number;
  head: string;
  /** The last prefix whose raw bytes were hashed (may lag `offset` after appends on the fast path). */
  anchor: Anchor;
  /**
   * Content hash of the bucket table, or null when no decision is indexed:
   * TABLE_SLOTS slots of 32 raw bytes, slot i holding the content hash of the
   * bucket object for subjects whose id starts with i in 3 hex digits (all
   * zeros: no bucket). A lookup reads one slot, not the table.
   */
  table: string | null;
}

export interface Location {
  seq: number;
  offset: number;
  length: number;
  hash: string;
}

export type Bucket = Record<string, Location>;

const HEX64 = /^[0-9a-f]{64}$/;
export const TABLE_SLOTS = 4096;
const SLOT = 32;

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

function readPrivate(path: string): Buffer | null {
  try {
    const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      return readFileSync(fd);
    } finally {
      closeSync(fd);
    }
  } catch {
    return null;
  }
}

/** Write via a fresh temporary file and rename. Not fsync'd: losing it only costs a rescan. Failure is silent for the
 * same reason. */
function writePrivate(dir: string, name: string, bytes: Buffer): boolean {
  const temporary = join(dir, `.${name}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    const fd = openSync(
      temporary,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    try {
      let written = 0;
      while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
    } finally {
      closeSync(fd);
    }
    renameSync(temporary, join(dir, name));
    return true;
  } catch {
    try {
      unlinkSync(temporary);
    } catch {
      // nothing to take back
    }
    return false;
  }
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function isDigest(value: unknown): value is string {
  return typeof value === "string" && /^sha256-[0-9a-f]{64}$/.test(value);
}

function isLocation(value: unknown): value is Location {
  return (
    isPlainRecord(value) && isCount(value.seq) && isCount(value.offset) && isCount(value.length) && isDigest(value.hash)
  );
}

function checkpointFile(logKey: string): string {
  return `${logKey}.checkpoint.json`;
}

export function loadCheckpoint(dir: string, logKey: string): Checkpoint | null {
  const bytes = readPrivate(join(dir, checkpointFile(logKey)));
  if (bytes === null) return null;
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch {
    return null;
  }
  if (!isPlainRecord(value) || value.v !== 1) return null;
  const { anchor, table } = value;
  const ok =
    typeof value.dev === "string" &&
    typeof value.ino === "string" &&
    isCount(value.size) &&
    typeof value.ctimeNs === "string" &&
    typeof value.mtimeNs === "string" &&
    isCount(value.offset) &&
    isCount(value.seq) &&
    isDigest(value.head) &&
    isPlainRecord(anchor) &&
    isCount(anchor.offset) &&
    isCount(anchor.seq) &&
    isDigest(anchor.head) &&
    typeof anchor.sha256 === "string" &&
    HEX64.test(anchor.sha256) &&
    (anchor.offset as number) <= (value.offset as number) &&
    (value.offset as number) <= (value.size as number) &&
    (table === null || (typeof table === "string" && HEX64.test(table)));
  return ok ? (value as unknown as Checkpoint) : null;
}

/**
 * Replace the checkpoint, then remove the objects it no longer names
 * (`replaced`: file names under objects/, never one `kept` names). A
 * concurrent reader still holding the old checkpoint finds one missing and
 * rebuilds (correct, slower).
 */
export function saveCheckpoint(
  dir: string,
  logKey: string,
  checkpoint: Checkpoint,
  replaced: readonly string[] = [],
  kept: ReadonlySet<string> = new Set(),
): boolean {
  const saved = writePrivate(dir, checkpointFile(logKey), Buffer.from(JSON.stringify(checkpoint), "utf8"));
  if (saved) {
    for (const name of replaced) {
      if (kept.has(name)) continue;
      try {
        unlinkSync(join(dir, "objects", name));
      } catch {
        // already gone
      }
    }
  }
  return saved;
}

/** A new, empty bucket table. */
export function emptyTable(): Buffer {
  return Buffer.alloc(TABLE_SLOTS * SLOT);
}

/** The whole table (to update it), or null when it is missing or damaged. */
export function loadTable(dir: string, hash: string): Buffer | null {
  const bytes = readPrivate(join(dir, "objects", `${hash}.table`));
  if (
    bytes === null ||
    bytes.length !== TABLE_SLOTS * SLOT ||
    createHash("sha256").update(bytes).digest("hex") !== hash
  )
    return null;
  return bytes;
}

export function saveTable(dir: string, table: Buffer): string | null {
  const hash = createHash("sha256").update(table).digest("hex");
  return writePrivate(join(dir, "objects"), `${hash}.table`, table) ? hash : null;
}

export function slotOf(id: string): number {
  return Number.parseInt(id.slice(0, 3), 16);
}

export function readSlotIn(table: Buffer, slot: number): string | null {
  const bytes = table.subarray(slot * SLOT, slot * SLOT + SLOT);
  return bytes.every((byte) => byte === 0) ? null : bytes.toString("hex");
}

export function writeSlotIn(table: Buffer, slot: number, hash: string): void {
  Buffer.from(hash, "hex").copy(table, slot * SLOT);
}

/**
 * One slot of a table, read alone (the table is not hashed here: a damaged
 * slot names an object that does not exist or does not match its name, and
 * that is caught when the bucket is loaded). undefined when the table itself
 * is missing or short.
 */
export function readSlot(dir: string, hash: string, slot: number): string | null | undefined {
  try {
    const fd = openSync(join(dir, "objects", `${hash}.table`), constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const bytes = Buffer.alloc(SLOT);
      if (readSync(fd, bytes, 0, SLOT, slot * SLOT) !== SLOT) return undefined;
      return readSlotIn(bytes, 0);
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/**
 * A bucket object by content hash; null when missing or not what its name
 * says. Entries are checked when they are used (bucketEntry), not all on load:
 * the object is ours and content-addressed, and a lookup must not cost the
 * whole bucket.
 */
export function loadBucket(dir: string, hash: string): Record<string, unknown> | null {
  const bytes = readPrivate(join(dir, "objects", `${hash}.json`));
  if (bytes === null || createHash("sha256").update(bytes).digest("hex") !== hash) return null;
  let value: unknown;
  try {
    // Plain JSON.parse: a "__proto__" key becomes an own property, never the prototype.
    value = JSON.parse(bytes.toString("utf8"));
  } catch {
    return null;
  }
  return isPlainRecord(value) ? value : null;
}

/** One subject's location in a loaded bucket: null when absent; "damaged" when present but malformed. */
export function bucketEntry(bucket: Record<string, unknown>, id: string): Location | null | "damaged" {
  if (!HEX64.test(id) || !Object.hasOwn(bucket, id)) return null;
  const location = bucket[id];
  return isLocation(location) ? location : "damaged";
}

/** Store a bucket object; its content hash, or null when it could not be written. */
export function saveBucket(dir: string, bucket: Bucket): string | null {
  const bytes = Buffer.from(JSON.stringify(bucket), "utf8");
  const hash = createHash("sha256").update(bytes).digest("hex");
  return writePrivate(join(dir, "objects"), `${hash}.json`, bytes) ? hash : null;
}
