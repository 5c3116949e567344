import { join } from "node:path";
import { OatsError, canonicalJson } from "../core/index.js";
import { currentPrincipal, type AuditEntry } from "../ledger/index.js";
import { entryAt, type AnchoredAudit } from "./anchored-audit.js";
import { bootId, identityOf, lookupStartRecord, type FileIdentity, type StartRecord } from "./start-record.js";
import {
  LOG_FILE,
  checkRunDir,
  isSameProcess,
  readControl,
  readRecord,
  type RunBase,
  type RunControl,
} from "./run-store.js";

/**
 * Where a run directory stands, for ls, show, cancel, seal and fsck
 * (docs/design/evidence.md, "The private start record"). A sealed run is
 * sealed (its record and the audit log decide, `oats run verify`). An open
 * one is judged by this account's private start record, never by
 * `control.json` alone, which any writer of the scope can write:
 *
 * - running: the recorded dispatcher (pid and start time, in this boot) is alive;
 * - unsealed: it is gone, the run directory and its log are the ones it
 *   created, `control.json` does not contradict the record, and the record's
 *   run-start entry is in the verified, anchored audit log;
 * - foreign: anything else. oats never signals, cancels or seals a foreign
 *   run; `foreign.reason` says why and `foreign.message` what to do.
 */

export type RunState = "running" | "sealed" | "unsealed" | "foreign";

export type ForeignReason =
  /** control.json (or the start record) names no run-start entry of this run in the anchored audit log. */
  | "run-start-mismatch"
  /** The run directory, its log or its control.json is not what the dispatcher recorded. */
  | "run-dir-differs"
  /** No start record of this account names the run (another account started it, or the private state was lost). */
  | "start-record-missing"
  /** This account's private state directory cannot be used. */
  | "start-state-unusable"
  /** The audit log cannot be verified against this account's checkpoint. */
  | "run-start-unverifiable";

export interface Foreign {
  readonly reason: ForeignReason;
  readonly message: string;
  readonly details: Record<string, unknown>;
}

export interface Standing {
  readonly state: RunState;
  /** control.json as the scope holds it (for display; null when sealed). */
  readonly control: RunControl | null;
  readonly sealed: ReturnType<typeof readRecord>;
  /** This account's start record of the run, when it has one. */
  readonly start: StartRecord | null;
  readonly foreign: Foreign | null;
}

/** Is the start record from this boot? Only then can a pid it names be this run's process. */
export function sameBoot(start: StartRecord): boolean {
  return start.boot !== null && start.boot === bootId();
}

/** Is `entry` the ok run-start entry of this run? */
export function isRunStartOf(
  entry: AuditEntry | null,
  handle: string,
  base: Pick<RunBase, "job" | "resolution" | "dispatchAudit">,
): entry is AuditEntry {
  if (entry === null || entry.action !== "run-start" || entry.outcome !== "ok") return false;
  const subject = entry.subject ?? {};
  const dispatch = entry.details["dispatchAudit"] as { seq?: unknown; hash?: unknown } | undefined;
  return (
    subject["handle"] === handle &&
    subject["job"] === base.job &&
    subject["resolution"] === base.resolution &&
    dispatch?.seq === base.dispatchAudit.seq &&
    dispatch?.hash === base.dispatchAudit.hash
  );
}

function sameIdentity(now: FileIdentity, recorded: FileIdentity, boot: boolean): boolean {
  // Device numbers of some filesystems (btrfs, overlay) change across boots; the inode does not.
  return now.ino === recorded.ino && (!boot || now.dev === recorded.dev);
}

/** Why the directory is not the one the dispatcher created, or null. */
function directoryDiffers(dir: string, start: StartRecord, boot: boolean): string | null {
  let now: { dir: FileIdentity; log: FileIdentity };
  try {
    now = { dir: identityOf(dir), log: identityOf(join(dir, LOG_FILE)) };
  } catch {
    return "its log is gone";
  }
  if (!sameIdentity(now.dir, start.dir, boot)) return "the run directory is not the one its dispatcher created";
  if (!sameIdentity(now.log, start.log, boot)) return "its log is not the one its dispatcher created";
  return null;
}

function sameRef(a: { pid: number; start: string } | null, b: { pid: number; start: string } | null): boolean {
  return a !== null && b !== null && a.pid === b.pid && a.start === b.start;
}

/**
 * Why control.json contradicts the start record, or null. It may lag the
 * record (the dispatcher writes the record first, so a crash between the
 * two leaves control.json without what the record already says), but it
 * never says something else.
 */
function controlContradicts(control: RunControl, start: StartRecord): string | null {
  if (canonicalJson(control.base) !== canonicalJson(start.base))
    return "control.json describes another run than the dispatcher recorded";
  if (!sameRef(control.dispatcher, start.dispatcher)) return "control.json names another dispatcher";
  if (
    control.startAudit !== null &&
    (start.startAudit === null ||
      control.startAudit.seq !== start.startAudit.seq ||
      control.startAudit.hash !== start.startAudit.hash)
  )
    return "control.json names another run-start entry";
  if (control.child !== null && !sameRef(control.child, start.child)) return "control.json names another child";
  return null;
}

function principalOrNull(): string | null {
  try {
    return currentPrincipal();
  } catch {
    return null;
  }
}

function foreign(reason: ForeignReason, message: string, details: Record<string, unknown> = {}): Foreign {
  return { reason, message, details };
}

function unverifiable(error: unknown): Foreign {
  return foreign(
    "run-start-unverifiable",
    `the audit log cannot be verified (${error instanceof Error ? error.message : String(error)}), so its ` +
      "run-start entry cannot be checked",
    { cause: error instanceof OatsError ? { code: error.code, ...error.details } : String(error) },
  );
}

/** A run with no start record of this account: what its control.json claims, checked against the anchored log. */
function withoutRecord(handle: string, control: RunControl, audit: () => AnchoredAudit, path: string): Foreign {
  const ref = control.startAudit;
  if (ref === null)
    return foreign(
      "start-record-missing",
      "no start record of this account names this run, and its control.json names no run-start entry",
      { startRecord: path },
    );
  let entry: AuditEntry | null;
  try {
    entry = entryAt(audit(), ref);
  } catch (error) {
    return unverifiable(error);
  }
  if (!isRunStartOf(entry, handle, control.base))
    return foreign(
      "run-start-mismatch",
      `its control.json names audit entry seq ${ref.seq}, which is not this run's run-start entry in the ` +
        "verified audit log: no dispatcher of this scope made this run directory (a copy, or planted)",
      { startAudit: ref },
    );
  const me = principalOrNull();
  if (entry.principal !== me)
    return foreign(
      "start-record-missing",
      `its run-start entry (seq ${entry.seq}) names ${entry.principal}, not this account (${me ?? "unknown"}): ` +
        `seal or cancel it as ${entry.principal}`,
      { startAudit: ref, principal: entry.principal, startRecord: path },
    );
  return foreign(
    "start-record-missing",
    `its run-start entry (seq ${entry.seq}) names this account, but this account's private state holds no ` +
      `start record of it (${path}): the state was lost, or OATS_STATE_DIR or HOME differ from the dispatcher's`,
    { startAudit: ref, principal: entry.principal, startRecord: path },
  );
}

/** Where the run directory `dir` (of run `handle`) stands; `audit` reads the anchored audit log when needed. */
export function standingOf(realScope: string, handle: string, dir: string, audit: () => AnchoredAudit): Standing {
  checkRunDir(dir);
  const sealed = readRecord(dir);
  if (sealed !== null) return { state: "sealed", control: null, sealed, start: null, foreign: null };
  const control = readControl(dir);
  const open = (state: RunState, start: StartRecord | null, why: Foreign | null): Standing => ({
    state,
    control,
    sealed: null,
    start,
    foreign: why,
  });
  const lookup = lookupStartRecord(realScope, handle);
  if (lookup.kind === "unusable")
    return open(
      "foreign",
      null,
      foreign(
        "start-state-unusable",
        `this account's private state (${lookup.stateDir ?? "its state directory"}) cannot be used (it must be ` +
          "a real directory of this account that no one else can write), so oats cannot tell whether it started " +
          "this run",
        { stateDir: lookup.stateDir },
      ),
    );
  if (lookup.kind === "missing") return open("foreign", null, withoutRecord(handle, control, audit, lookup.path));
  const start = lookup.record;
  const boot = sameBoot(start);
  const differs = directoryDiffers(dir, start, boot);
  if (differs !== null) return open("foreign", start, foreign("run-dir-differs", differs));
  if (boot && isSameProcess(start.dispatcher)) return open("running", start, null);
  const contradiction = controlContradicts(control, start);
  if (contradiction !== null) return open("foreign", start, foreign("run-dir-differs", contradiction));
  if (start.startAudit !== null) {
    let entry: AuditEntry | null;
    try {
      entry = entryAt(audit(), start.startAudit);
    } catch (error) {
      return open("foreign", start, unverifiable(error));
    }
    if (!isRunStartOf(entry, handle, start.base))
      return open(
        "foreign",
        start,
        foreign(
          "run-start-mismatch",
          `the run-start entry seq ${start.startAudit.seq} its dispatcher recorded is not in the verified audit log`,
          { startAudit: start.startAudit },
        ),
      );
  }
  return open("unsealed", start, null);
}

/** The typed refusal for acting on a foreign run: nothing was signalled, written or sealed. */
export function foreignRun(handle: string, action: string, why: Foreign): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `run ${handle} is foreign: ${why.message}. oats did not ${action} it and signalled nothing`,
    { handle, reason: "run-foreign", foreign: why.reason, ...why.details },
  );
}
