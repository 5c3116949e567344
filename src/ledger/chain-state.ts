import { createHash } from "node:crypto";
import { closeSync, constants, openSync, readFileSync, readSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { isPlainRecord } from "./chain-line.js";
import { writePrivateFile } from "../retention/index.js";

export {
  isPrivateDirectory,
  operatorStateDir,
  scopeState,
  scopeStateDir,
  stateRoot,
  type ScopeState,
  type StateProblem,
  type StateProblemReason,
} from "../retention/index.js";

/**
 * The operator's private state for the chain logs: verified checkpoints and
 * per-subject indexes, kept OUTSIDE the scope so that a scope writer cannot
 * edit them. A hash chain is unkeyed; anything inside the scope could be
 * recomputed by whoever can write there, and an index there would be an
 * easier target than the logs themselves.
 *
 * Where the state lives and when it is trusted (StrictModes on every
 * ancestor) is retention's (store/state-location.ts): when it cannot be
 * trusted, reads fall back to a full scan (correct, but anchored by nothing),
 * and the callers that grant something (approve, dispatch) refuse
 * (approval-check.ts, requireUsableState).
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
  try {
    writePrivateFile(dir, name, bytes, { durable: false });
    return true;
  } catch {
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
