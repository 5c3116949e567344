import { createHash, type Hash } from "node:crypto";
import { closeSync, fstatSync, type BigIntStats } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import { inspectStoreAt, resolveScope } from "../retention/index.js";
import {
  GENESIS_PREV,
  checkLine,
  logName,
  openForRead,
  readAt,
  verifySegment,
  type BrokenReason,
  type ChainEntry,
  type ChainLog,
} from "./chain-line.js";
import {
  bucketEntry,
  emptyTable,
  loadBucket,
  loadCheckpoint,
  loadTable,
  readSlot,
  readSlotIn,
  saveBucket,
  saveCheckpoint,
  saveTable,
  scopeState,
  slotOf,
  writeSlotIn,
  type Anchor,
  type Bucket,
  type Checkpoint,
  type Location,
  type StateProblem,
} from "./chain-state.js";
import { decisionKeyOf } from "./decision-key.js";

/**
 * Bring a chain log's verified state up to date at a cost proportional to
 * what changed, using the operator's private checkpoint (chain-state.ts):
 *
 * - fast: the file's dev, inode, size and ctime are those of the checkpoint.
 *   An unprivileged user cannot set ctime back, so the verified bytes are
 *   intact and nothing is read.
 * - incremental: the file changed. The raw bytes of the anchored prefix are
 *   hashed and compared (a middle edit or a truncation is a refusal), the
 *   lines after the anchor are verified as a chain, the checkpointed entry
 *   must still end where it ended with the same hash, and the new lines are
 *   indexed.
 * - full: no usable state (none yet, or the state directory is unsafe):
 *   the whole log is verified and indexed.
 *
 * A log that no longer extends its checkpoint is `integrity-mismatch` with
 * `details.reason` `history-rewritten`, `truncated` or `log-missing`; a broken
 * chain is `integrity-mismatch` with `details.brokenAt`.
 */

export type SyncPath = "empty" | "fast" | "incremental" | "full";

/**
 * Whether a checkpoint of this account anchored a check of a log: `checkpoint` when the log was checked against one
 * (entry `seq`, hash `head`); `no-checkpoint` when the state is usable but holds none for this log yet (the log was
 * verified in full and is checkpointed from now on); `state-unusable` when the state cannot be trusted
 * (chain-state.ts), so nothing anchored the check and nothing will.
 */
export type CheckpointUse =
  | { readonly anchored: true; readonly reason: "checkpoint"; readonly stateDir: string; seq: number; head: string }
  | { readonly anchored: false; readonly reason: "no-checkpoint"; readonly stateDir: string }
  | {
      readonly anchored: false;
      readonly reason: "state-unusable";
      readonly stateDir: string;
      readonly problem: StateProblem;
    };

const HASH_CHUNK = 1 << 20;

function logKey(log: ChainLog): string {
  return [...log.dir, log.file].join("~");
}

export function brokenChain(
  log: ChainLog,
  brokenAt: { line: number; seq: number | null; reason: BrokenReason },
): OatsError {
  const { line, seq, reason } = brokenAt;
  return new OatsError(
    "integrity-mismatch",
    `chain log ${logName(log)} is broken at line ${line}${seq === null ? "" : ` (seq ${seq})`}: ${reason}`,
    { log: logName(log), brokenAt },
  );
}

function rewritten(
  log: ChainLog,
  reason: "history-rewritten" | "truncated" | "log-missing",
  checkpoint: Checkpoint,
  stateDir: string,
): OatsError {
  const why =
    reason === "log-missing"
      ? "the log is gone"
      : reason === "truncated"
        ? "the log is shorter than the part already verified"
        : "bytes already verified have changed";
  return new OatsError(
    "integrity-mismatch",
    `chain log ${logName(log)} no longer extends the state oats verified ` +
      `(seq ${checkpoint.seq}, head ${checkpoint.head}): ${why}`,
    {
      log: logName(log),
      reason,
      checkpoint: { seq: checkpoint.seq, head: checkpoint.head, offset: checkpoint.offset },
      stateDir,
    },
  );
}

function unreadable(path: string, error: unknown): OatsError {
  return new OatsError(
    "invalid-artifact-store",
    `cannot read chain log ${path}: ${errnoCode(error) ?? String(error)}`,
    { path, errno: errnoCode(error) },
  );
}

interface State {
  seq: number;
  head: string;
  offset: number;
  anchor: Anchor;
  /** The bucket table this state builds on (chain-state.ts); null for none or a full scan. */
  table: string | null;
  /** Decisions verified by this call, newer than `table`. */
  updates: Map<string, Location>;
}

export class LogSync {
  private loaded = new Map<string, Record<string, unknown> | null>();

  constructor(
    readonly scope: string,
    readonly log: ChainLog,
    readonly path: string,
    readonly how: SyncPath,
    private readonly state: State,
    private readonly stateDir: string | null,
    /** What anchored this sync (see CheckpointUse). */
    readonly checkpointUse: CheckpointUse,
  ) {}

  get seq(): number {
    return this.state.seq;
  }
  get head(): string {
    return this.state.head;
  }
  /** Bytes verified (the log's size when this sync read it). */
  get size(): number {
    return this.state.offset;
  }
  /** Whether the state directory was usable. */
  get persistent(): boolean {
    return this.stateDir !== null;
  }

  /** The latest decision about subject `id` (decision-key.ts), located in the log; null when there is none. */
  lookup(id: string): Location | null {
    const updated = this.state.updates.get(id);
    if (updated) return updated;
    const table = this.state.table;
    if (table === null || this.stateDir === null) return null;
    const leaf = readSlot(this.stateDir, table, slotOf(id));
    if (leaf === null) return null;
    if (leaf !== undefined && !this.loaded.has(leaf)) this.loaded.set(leaf, loadBucket(this.stateDir, leaf));
    const bucket = leaf === undefined ? null : (this.loaded.get(leaf) ?? null);
    const found = bucket === null ? "damaged" : bucketEntry(bucket, id);
    // A lost or damaged object: the state cannot answer, so verify everything again.
    if (found === "damaged") return syncLog(this.scope, this.log, { rebuildIndex: true }).lookup(id);
    return found;
  }

  /** Read back the entry at `location` and check it is exactly the one indexed. */
  confirm(location: Location): ChainEntry {
    let fd: number | null;
    let bytes: Buffer;
    try {
      fd = openForRead(this.path);
      if (fd === null) throw Object.assign(new Error("log is gone"), { code: "ENOENT" });
      try {
        bytes = readAt(fd, location.offset, location.length);
      } finally {
        closeSync(fd);
      }
    } catch (error) {
      throw unreadable(this.path, error);
    }
    const text = bytes.subarray(0, -1).toString("utf8");
    const checked = bytes.at(-1) === 0x0a ? checkLine(text) : null;
    if (
      checked === null ||
      !("entry" in checked) ||
      checked.entry.seq !== location.seq ||
      checked.entry.hash !== location.hash
    ) {
      throw new OatsError(
        "integrity-mismatch",
        `chain log ${logName(this.log)} no longer holds seq ${location.seq} (${location.hash}) where it was verified`,
        {
          log: logName(this.log),
          reason: "history-rewritten",
          expected: { seq: location.seq, hash: location.hash, offset: location.offset },
        },
      );
    }
    return checked.entry;
  }

  /**
   * After appendEntry wrote `entry` as the bytes [offset, offset + length)
   * and the file's stat is `after`: extend the checkpoint by that line.
   */
  recordAppend(entry: ChainEntry, offset: number, length: number, after: BigIntStats): void {
    if (offset !== this.state.offset) return;
    const id = decisionKeyOf(this.log)?.(entry) ?? null;
    if (id !== null) this.state.updates.set(id, { seq: entry.seq, offset, length, hash: entry.hash });
    this.state.seq = entry.seq;
    this.state.head = entry.hash;
    this.state.offset = offset + length;
    if (this.stateDir !== null) this.persist(after);
  }

  /** Write the checkpoint: touched buckets and the table as new objects, then the checkpoint naming them. */
  persist(stat: BigIntStats): void {
    const dir = this.stateDir;
    if (dir === null) return;
    const previous = this.state.table;
    const table = previous === null ? emptyTable() : loadTable(dir, previous);
    if (table === null) return; // the next lookup through it rebuilds everything
    const touched = new Map<number, Bucket>();
    const replaced: string[] = [];
    for (const [id, location] of this.state.updates) {
      const slot = slotOf(id);
      let bucket = touched.get(slot);
      if (!bucket) {
        const leaf = readSlotIn(table, slot);
        const base = leaf === null ? {} : loadBucket(dir, leaf);
        if (base === null) return;
        if (leaf !== null) replaced.push(`${leaf}.json`);
        bucket = Object.assign(Object.create(null) as Bucket, base);
        touched.set(slot, bucket);
      }
      bucket[id] = location;
    }
    const kept = new Set<string>();
    for (const [slot, bucket] of touched) {
      const hash = saveBucket(dir, bucket);
      if (hash === null) return;
      writeSlotIn(table, slot, hash);
      kept.add(`${hash}.json`);
      this.loaded.set(hash, bucket);
    }
    const tableHash = touched.size === 0 ? previous : saveTable(dir, table);
    if (touched.size > 0 && tableHash === null) return;
    if (previous !== null && tableHash !== previous) replaced.push(`${previous}.table`);
    if (tableHash !== null) kept.add(`${tableHash}.table`);
    const checkpoint: Checkpoint = {
      v: 1,
      dev: String(stat.dev),
      ino: String(stat.ino),
      size: Number(stat.size),
      ctimeNs: String(stat.ctimeNs),
      mtimeNs: String(stat.mtimeNs),
      offset: this.state.offset,
      seq: this.state.seq,
      head: this.state.head,
      anchor: this.state.anchor,
      table: tableHash,
    };
    if (saveCheckpoint(dir, logKey(this.log), checkpoint, replaced, kept)) this.state.table = tableHash;
  }
}

function sameStat(checkpoint: Checkpoint, stat: BigIntStats): boolean {
  return (
    checkpoint.dev === String(stat.dev) &&
    checkpoint.ino === String(stat.ino) &&
    checkpoint.size === Number(stat.size) &&
    checkpoint.ctimeNs === String(stat.ctimeNs)
  );
}

function hashRange(fd: number, end: number, hasher: Hash): void {
  for (let position = 0; position < end; position += HASH_CHUNK) {
    const chunk = readAt(fd, position, Math.min(HASH_CHUNK, end - position));
    if (chunk.length === 0) break;
    hasher.update(chunk);
  }
}

export interface SyncOptions {
  /**
   * Re-index the whole log (used when the state lost an object). The log is
   * still checked against the checkpoint: a lost object is never a way
   * around it.
   */
  rebuildIndex?: boolean;
}

function checkpointUseOf(state: ReturnType<typeof scopeState>, checkpoint: Checkpoint | null): CheckpointUse {
  if (!state.usable)
    return { anchored: false, reason: "state-unusable", stateDir: state.stateDir, problem: state.problem };
  if (checkpoint === null) return { anchored: false, reason: "no-checkpoint", stateDir: state.stateDir };
  return { anchored: true, reason: "checkpoint", stateDir: state.stateDir, seq: checkpoint.seq, head: checkpoint.head };
}

/** What would anchor a check of `log` now, read without verifying anything (the checkpoint is not changed). */
export function checkpointState(scope: string, log: ChainLog): CheckpointUse {
  const state = scopeState(resolveScope(scope));
  return checkpointUseOf(state, state.usable ? loadCheckpoint(state.dir, logKey(log)) : null);
}

/** Verify the log as far as needed and return its state; see the module comment. */
export function syncLog(scope: string, log: ChainLog, options: SyncOptions = {}): LogSync {
  const root = resolveScope(scope);
  const store = inspectStoreAt(root, log.dir);
  const path = join(store.root, log.file);
  const state = scopeState(root);
  const stateDir = state.usable ? state.dir : null;
  const key = logKey(log);
  const checkpoint = stateDir !== null ? loadCheckpoint(stateDir, key) : null;
  const use = checkpointUseOf(state, checkpoint);
  const rebuild = options.rebuildIndex === true;
  let fd: number | null = null;
  try {
    if (store.complete) fd = openForRead(path);
  } catch (error) {
    throw unreadable(path, error);
  }
  const genesis: Anchor = { offset: 0, seq: 0, head: GENESIS_PREV, sha256: createHash("sha256").digest("hex") };
  if (fd === null) {
    if (checkpoint !== null && checkpoint.seq > 0) throw rewritten(log, "log-missing", checkpoint, stateDir!);
    return new LogSync(
      scope,
      log,
      path,
      "empty",
      { seq: 0, head: GENESIS_PREV, offset: 0, anchor: genesis, table: null, updates: new Map() },
      stateDir,
      use,
    );
  }
  try {
    let stat: BigIntStats;
    try {
      stat = fstatSync(fd, { bigint: true });
    } catch (error) {
      throw unreadable(path, error);
    }
    if (checkpoint !== null && !rebuild && sameStat(checkpoint, stat)) {
      const { seq, head, offset, anchor, table } = checkpoint;
      const fast = { seq, head, offset, anchor, table, updates: new Map() };
      return new LogSync(scope, log, path, "fast", fast, stateDir, use);
    }
    const size = Number(stat.size);
    const hasher = createHash("sha256");
    let start = genesis;
    let bytes: Buffer;
    if (checkpoint !== null) {
      if (size < checkpoint.offset) throw rewritten(log, "truncated", checkpoint, stateDir!);
      if (rebuild) {
        bytes = readAt(fd, 0, size);
        if (
          createHash("sha256").update(bytes.subarray(0, checkpoint.anchor.offset)).digest("hex") !==
          checkpoint.anchor.sha256
        )
          throw rewritten(log, "history-rewritten", checkpoint, stateDir!);
      } else {
        hashRange(fd, checkpoint.anchor.offset, hasher);
        if (hasher.copy().digest("hex") !== checkpoint.anchor.sha256)
          throw rewritten(log, "history-rewritten", checkpoint, stateDir!);
        start = checkpoint.anchor;
        bytes = readAt(fd, start.offset, size - start.offset);
      }
    } else {
      bytes = readAt(fd, 0, size);
    }
    hasher.update(bytes);
    const verdict = verifySegment(bytes, start.offset, start.seq, start.head);
    if (!verdict.ok) throw brokenChain(log, verdict.brokenAt);
    const since = rebuild ? 0 : (checkpoint?.seq ?? 0);
    if (checkpoint !== null && checkpoint.seq > start.seq) {
      // Lines verified after the anchor was hashed: they must still be the ones verified.
      const last = verdict.entries.find((located) => located.entry.seq === checkpoint.seq);
      if (!last || last.entry.hash !== checkpoint.head || last.offset + last.length !== checkpoint.offset)
        throw rewritten(log, "history-rewritten", checkpoint, stateDir!);
    }
    const keyOf = decisionKeyOf(log);
    const updates = new Map<string, Location>();
    if (keyOf !== null) {
      for (const { entry, offset, length } of verdict.entries) {
        if (entry.seq <= since) continue;
        const id = keyOf(entry);
        if (id !== null) updates.set(id, { seq: entry.seq, offset, length, hash: entry.hash });
      }
    }
    const anchor: Anchor = { offset: size, seq: verdict.seq, head: verdict.head, sha256: hasher.digest("hex") };
    const sync = new LogSync(
      scope,
      log,
      path,
      checkpoint === null || rebuild ? "full" : "incremental",
      {
        seq: verdict.seq,
        head: verdict.head,
        offset: size,
        anchor,
        table: rebuild ? null : (checkpoint?.table ?? null),
        updates,
      },
      stateDir,
      use,
    );
    let after: BigIntStats | null = null;
    try {
      after = fstatSync(fd, { bigint: true });
    } catch {
      after = null;
    }
    // Only a file that did not change while it was read becomes a checkpoint.
    if (after !== null && after.size === stat.size && after.ctimeNs === stat.ctimeNs) sync.persist(stat);
    return sync;
  } finally {
    closeSync(fd);
  }
}
