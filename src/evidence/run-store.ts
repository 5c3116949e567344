import { randomBytes } from "node:crypto";
import {
  chmodSync,
  constants,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
} from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { OatsError, errnoCode, canonicalJsonBytes } from "../core/index.js";
import { checkRunRootAncestors } from "../captures/index.js";
import {
  ensureStoreAt,
  fsyncDirectory,
  inspectStoreAt,
  readRegularFile,
  writeStagedFile,
  AGENTS_DIR,
} from "../retention/index.js";
import { HANDLE_PATTERN, bareRunRef, parseRunRecord, runRecordSchema, type RunRecord } from "./run-record.js";

/**
 * `.agents/runs/<handle>/` (docs/design/evidence.md, "The run directory"):
 *
 *   log           the lines as they are read, appended (O_APPEND), 0600
 *   control.json  who runs it: dispatcher pid + start time, child pgid, and
 *                 everything of the record known at start (replaced by
 *                 stage + rename, never edited in place)
 *   record.json   the sealed record's exact bytes (stage + fsync + link:
 *                 a second sealer fails instead of replacing it)
 *
 * The handle is chosen at start (`<yyyymmddThhmmssZ>-<8 hex>`); the run id
 * is only known at seal. The runs store's ancestors are checked as a run
 * copy's are (run-copy.ts) and every run directory is created exclusively,
 * 0700; nothing here follows a symlink: directories are lstat'ed, files are
 * opened O_NOFOLLOW.
 */

export const RUNS_STORE: readonly string[] = [AGENTS_DIR, "runs"];
export const LOG_FILE = "log";
export const CONTROL_FILE = "control.json";
export const RECORD_FILE = "record.json";
/** Put there by `oats run cancel`; the dispatcher watches for it (run-child.ts). */
export const CANCEL_FILE = "cancel";
const CONTROL_FORMAT = "oats.run-control.v1";
const MAX_SMALL_FILE = 1 << 20;
/** A log is read whole for show and verify; larger logs are refused rather than exhausting memory. */
export const MAX_LOG_BYTES = 512 << 20;

const processRef = z.object({ pid: z.number().int().positive(), start: z.string().regex(/^\d+$/) }).strict();
/** The record fields known when the run starts (everything the sealer cannot learn later). */
export const runBaseSchema = runRecordSchema
  .pick({
    handle: true,
    job: true,
    resolution: true,
    composition: true,
    approval: true,
    dispatchAudit: true,
    principal: true,
    harness: true,
    classification: true,
    environment: true,
    startedAt: true,
    delivery: true,
  })
  .extend({ required: z.array(z.string()) })
  .strict();
export type RunBase = z.infer<typeof runBaseSchema>;

export const runControlSchema = z
  .object({
    format: z.literal(CONTROL_FORMAT),
    dispatcher: processRef,
    /** The child: its pid is its process group id (it is started as a group leader). */
    child: processRef.nullable(),
    startAudit: z
      .object({ seq: z.number().int().nonnegative(), hash: z.string().min(1) })
      .strict()
      .nullable(),
    base: runBaseSchema,
  })
  .strict();
export type RunControl = z.infer<typeof runControlSchema>;

function damaged(path: string, why: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-artifact-store", `run evidence ${path} ${why}`, {
    path,
    reason: "run-damaged",
    ...details,
  });
}

export function runsRoot(realScope: string): string {
  return join(realScope, ...RUNS_STORE);
}

function utcCompact(date: Date): string {
  return date
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}Z$/, "Z");
}

export function newHandle(now: Date = new Date()): string {
  return `${utcCompact(now)}-${randomBytes(4).toString("hex")}`;
}

/** Create `<runs>/<handle>/` (exclusive, 0700) and its empty log (exclusive, 0600, append-only writes). */
export function createRunDir(realScope: string, handle: string): { dir: string; logFd: number } {
  const area = runsRoot(realScope);
  checkRunRootAncestors(area, { allowMissing: true });
  ensureStoreAt(realScope, RUNS_STORE);
  checkRunRootAncestors(area);
  const dir = join(area, handle);
  mkdirSync(dir, { mode: 0o700 });
  chmodSync(dir, 0o700);
  const logFd = openSync(
    join(dir, LOG_FILE),
    constants.O_RDWR | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW | constants.O_APPEND,
    0o600,
  );
  return { dir, logFd };
}

/** Replace control.json: staged, fsync'd, renamed (never written in place). */
export function writeControl(dir: string, control: RunControl): void {
  const staged = writeStagedFile(dir, ".control.json", canonicalJsonBytes(runControlSchema.parse(control)));
  renameSync(staged, join(dir, CONTROL_FILE));
}

/** Link the sealed record into place; `busy` when another sealer got there first. */
export function writeRecord(dir: string, bytes: Buffer): void {
  const staged = writeStagedFile(dir, ".record.json", bytes);
  try {
    linkSync(staged, join(dir, RECORD_FILE));
  } catch (error) {
    if (errnoCode(error) === "EEXIST")
      throw new OatsError("busy", `run ${dir} was sealed by someone else meanwhile`, {
        dir,
        reason: "run-already-sealed",
      });
    throw error;
  } finally {
    unlinkSync(staged);
  }
  fsyncDirectory(dir);
}

function readSmall(path: string): Buffer {
  return readRegularFile(path, {
    limit: MAX_SMALL_FILE,
    refuse: (failure, details) => damaged(path, `cannot be read (${failure})`, { failure, ...details }),
  });
}

export function readControl(dir: string): RunControl {
  const path = join(dir, CONTROL_FILE);
  let value: unknown;
  try {
    value = JSON.parse(readSmall(path).toString("utf8"));
  } catch (error) {
    if (error instanceof OatsError) throw error;
    throw damaged(path, "is not JSON");
  }
  const checked = runControlSchema.safeParse(value);
  if (!checked.success)
    throw damaged(path, `is not an ${CONTROL_FORMAT} file: ${checked.error.issues[0]?.message ?? ""}`);
  return checked.data;
}

/** The sealed record and its id, or null while the run is open. */
export function readRecord(dir: string): { record: RunRecord; id: string; bytes: Buffer } | null {
  const path = join(dir, RECORD_FILE);
  let bytes: Buffer;
  try {
    bytes = readRegularFile(path, {
      limit: MAX_SMALL_FILE,
      refuse: (failure, details) =>
        failure === "missing"
          ? new OatsError("resolution-not-found", "absent")
          : damaged(path, `cannot be read (${failure})`, { failure, ...details }),
    });
  } catch (error) {
    if (error instanceof OatsError && error.code === "resolution-not-found") return null;
    throw error;
  }
  return { ...parseRunRecord(bytes, path), bytes };
}

export function readLogBytes(dir: string): Buffer {
  const path = join(dir, LOG_FILE);
  return readRegularFile(path, {
    limit: MAX_LOG_BYTES,
    refuse: (failure, details) => damaged(path, `cannot be read (${failure})`, { failure, ...details }),
  });
}

/** A run directory: a real directory, never a symlink. */
export function checkRunDir(dir: string): void {
  let stats;
  try {
    stats = lstatSync(dir);
  } catch (error) {
    throw damaged(dir, `cannot be inspected (${errnoCode(error) ?? String(error)})`);
  }
  if (!stats.isDirectory())
    throw damaged(dir, stats.isSymbolicLink() ? "is a symlink (never followed)" : "is not a directory");
}

/** Every run handle in the scope (names of the handle form; anything else is not a run). */
export function listHandles(realScope: string): string[] {
  if (!inspectStoreAt(realScope, RUNS_STORE).complete) return [];
  return readdirSync(runsRoot(realScope))
    .filter((name) => HANDLE_PATTERN.test(name))
    .sort();
}

/** Names in the runs store that are neither a handle nor the managed .gitignore (reported by fsck). */
export function strayNames(realScope: string): string[] {
  if (!inspectStoreAt(realScope, RUNS_STORE).complete) return [];
  return readdirSync(runsRoot(realScope))
    .filter((name) => name !== ".gitignore" && !HANDLE_PATTERN.test(name))
    .sort();
}

/**
 * A run by handle, by run id (`sha256-...`, `oats.json.v1:` prefix allowed)
 * or by a unique prefix of either. `run-not-found` when none matches,
 * `invalid-input` (reason `ambiguous-run`) when a prefix names several.
 */
export function findRun(realScope: string, ref: string): { handle: string; dir: string } {
  const wanted = bareRunRef(String(ref));
  if (wanted.length === 0 || wanted.length > 200 || /[/\0]/.test(wanted))
    throw new OatsError("invalid-input", `not a run handle or id: ${JSON.stringify(String(ref).slice(0, 80))}`, {
      ref: String(ref).slice(0, 200),
      reason: "invalid-run-ref",
    });
  const matches = new Set<string>();
  for (const handle of listHandles(realScope)) {
    if (handle === wanted) return { handle, dir: join(runsRoot(realScope), handle) };
    if (handle.startsWith(wanted)) matches.add(handle);
    if (wanted.startsWith("sha256-")) {
      const dir = join(runsRoot(realScope), handle);
      let sealed;
      try {
        checkRunDir(dir);
        sealed = readRecord(dir);
      } catch {
        continue; // a damaged run is found by handle only; fsck reports it
      }
      if (sealed?.id.startsWith(wanted)) {
        if (sealed.id === wanted) return { handle, dir };
        matches.add(handle);
      }
    }
  }
  if (matches.size === 0)
    throw new OatsError("run-not-found", `no run ${ref} in this scope`, { ref, reason: "run-not-found" });
  if (matches.size > 1)
    throw new OatsError("invalid-input", `${ref} names ${matches.size} runs; give more of the handle or id`, {
      ref,
      matches: [...matches],
      reason: "ambiguous-run",
    });
  const [handle] = matches;
  return { handle: handle!, dir: join(runsRoot(realScope), handle!) };
}

/** The start time (clock ticks since boot, /proc/<pid>/stat field 22) of a live process, or null. */
export function processStart(pid: number): string | null {
  const fields = procStatFields(pid);
  return fields === null ? null : fields[19]!;
}

/** Fields of /proc/<pid>/stat after the `(comm)`: index 0 is the state, 2 the pgrp, 19 the start time. */
function procStatFields(pid: number): string[] | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "latin1");
  } catch {
    return null;
  }
  const close = text.lastIndexOf(")");
  const fields = text
    .slice(close + 2)
    .trim()
    .split(" ");
  if (fields[0] === "Z" || fields[0] === "X") return null; // a zombie is not running
  return fields;
}

/** Is this the very process a control file names (same pid and same start time)? */
export function isSameProcess(ref: { pid: number; start: string }): boolean {
  return processStart(ref.pid) === ref.start;
}

/** Live processes (not zombies) in process group `pgid`, from /proc. */
export function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const fields = procStatFields(Number(name));
    if (fields !== null && Number(fields[2]) === pgid) members.push(Number(name));
  }
  return members;
}
