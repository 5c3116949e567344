import { createHash, randomBytes } from "node:crypto";
import { closeSync, constants, lstatSync, mkdirSync, openSync, readFileSync, renameSync, unlinkSync, writeSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";
import { errnoCode } from "../errors.js";
import { isPlainRecord, parseLine } from "./chain-line.js";

/**
 * The operator's private state for the chain logs: verified checkpoints and
 * per-subject indexes, kept OUTSIDE the scope so that a scope writer cannot
 * edit them. A hash chain is unkeyed; anything inside the scope could be
 * recomputed by whoever can write there, and an index there would be an
 * easier target than the logs themselves.
 *
 * Location: `$OATS_STATE_DIR`, else `$XDG_STATE_HOME/oats`, else
 * `~/.local/state/oats`; below it `scopes/<sha256 of the scope's realpath>/`.
 * Every directory on the way from the state root down must be a real
 * directory (not a symlink), owned by this process's euid and not writable
 * by group or others; otherwise the state is not used at all and callers
 * fall back to a full scan (correct, slower).
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
  /** Bucket (two hex digits) → content hash of its object. */
  buckets: Record<string, string>;
}

export interface Location {
  seq: number;
  offset: number;
  length: number;
  hash: string;
}

export type Bucket = Record<string, Location>;

const HEX64 = /^[0-9a-f]{64}$/;
const BUCKET = /^[0-9a-f]{2}$/;

function euid(): number {
  return typeof process.geteuid === "function" ? process.geteuid() : -1;
}

/** The configured state root (not created here). */
export function stateRoot(env: NodeJS.ProcessEnv = process.env): string {
  const explicit = env["OATS_STATE_DIR"];
  if (explicit && isAbsolute(explicit)) return explicit;
  const xdg = env["XDG_STATE_HOME"];
  if (xdg && isAbsolute(xdg)) return join(xdg, "oats");
  return join(homedir(), ".local", "state", "oats");
}

/** A directory is private when it is a real directory, ours, and nobody else can write it. */
export function isPrivateDirectory(path: string): boolean {
  try {
    const stats = lstatSync(path);
    return stats.isDirectory() && !stats.isSymbolicLink() && stats.uid === euid() && (stats.mode & 0o022) === 0;
  } catch {
    return false;
  }
}

function ensurePrivate(path: string): boolean {
  try {
    mkdirSync(path, { recursive: true, mode: 0o700 });
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") return false;
  }
  return isPrivateDirectory(path);
}

/** The per-scope state directory, created 0700; null when it is not safe to use. */
export function scopeStateDir(realScope: string): string | null {
  const root = stateRoot();
  const scopes = join(root, "scopes");
  const dir = join(scopes, createHash("sha256").update(realScope, "utf8").digest("hex"));
  const objects = join(dir, "objects");
  for (const path of [root, scopes, dir, objects]) if (!ensurePrivate(path)) return null;
  return dir;
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

/** Write via a fresh temporary file and rename. Not fsync'd: losing it only costs a rescan. Failure is silent for the same reason. */
function writePrivate(dir: string, name: string, bytes: Buffer): boolean {
  const temporary = join(dir, `.${name}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    const fd = openSync(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
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
  return isPlainRecord(value) && isCount(value.seq) && isCount(value.offset) && isCount(value.length) && isDigest(value.hash);
}

function checkpointFile(logKey: string): string {
  return `${logKey}.checkpoint.json`;
}

export function loadCheckpoint(dir: string, logKey: string): Checkpoint | null {
  const bytes = readPrivate(join(dir, checkpointFile(logKey)));
  if (bytes === null) return null;
  let value: unknown;
  try {
    value = parseLine(bytes.toString("utf8"));
  } catch {
    return null;
  }
  if (!isPlainRecord(value) || value.v !== 1) return null;
  const { anchor, buckets } = value;
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
    isPlainRecord(buckets) &&
    Object.entries(buckets).every(([bucket, hash]) => BUCKET.test(bucket) && typeof hash === "string" && HEX64.test(hash));
  return ok ? (value as unknown as Checkpoint) : null;
}

export function saveCheckpoint(dir: string, logKey: string, checkpoint: Checkpoint, replaced: Record<string, string> = {}): boolean {
  const saved = writePrivate(dir, checkpointFile(logKey), Buffer.from(JSON.stringify(checkpoint), "utf8"));
  if (saved) {
    // Objects the new checkpoint no longer names. A concurrent reader that still
    // holds the old checkpoint finds one missing and rebuilds (correct, slower).
    const kept = new Set(Object.values(checkpoint.buckets));
    for (const hash of Object.values(replaced)) {
      if (kept.has(hash)) continue;
      try {
        unlinkSync(join(dir, "objects", `${hash}.json`));
      } catch {
        // already gone
      }
    }
  }
  return saved;
}

/** A bucket object by content hash; null when missing or not what its name says. */
export function loadBucket(dir: string, hash: string): Bucket | null {
  const bytes = readPrivate(join(dir, "objects", `${hash}.json`));
  if (bytes === null || createHash("sha256").update(bytes).digest("hex") !== hash) return null;
  let value: unknown;
  try {
    value = parseLine(bytes.toString("utf8"));
  } catch {
    return null;
  }
  if (!isPlainRecord(value)) return null;
  const bucket: Bucket = Object.create(null) as Bucket;
  for (const [id, location] of Object.entries(value)) {
    if (!HEX64.test(id) || !isLocation(location)) return null;
    bucket[id] = location;
  }
  return bucket;
}

/** Store a bucket object; its content hash, or null when it could not be written. */
export function saveBucket(dir: string, bucket: Bucket): string | null {
  const bytes = Buffer.from(JSON.stringify(bucket), "utf8");
  const hash = createHash("sha256").update(bytes).digest("hex");
  return writePrivate(join(dir, "objects"), `${hash}.json`, bytes) ? hash : null;
}
