import { closeSync, fsyncSync, ftruncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { OatsError, bytesDigest } from "../core/index.js";
import type { AuditEntry } from "../ledger/index.js";
import { resolveScope } from "../retention/index.js";
import { footerOffset, formatStamp, parseLog, type LogLine, type RunExit, type RunResult } from "./log-format.js";
import type { RunRecord } from "./run-record.js";
import { openLogForSeal, sealRun } from "./run-seal.js";
import {
  CANCEL_FILE,
  checkRunDir,
  findRun,
  groupMembers,
  isSameProcess,
  listHandles,
  readLogBytes,
  readRecord,
  runsRoot,
  type RunControl,
} from "./run-store.js";
import { lazyAnchoredAudit, readAnchoredAudit, type AnchoredAudit } from "./anchored-audit.js";
import { foreignRun, sameBoot, standingOf, type Foreign, type RunState, type Standing } from "./run-standing.js";
import { lookupStartRecord } from "./start-record.js";

/**
 * Reading and managing runs: ls, show, verify, cancel, seal. Pure reads
 * except cancel (a request file the dispatcher watches) and seal (closing
 * a run whose dispatcher is gone). Cancel and seal act only on a run this
 * account's dispatcher recorded starting (run-standing.ts); a foreign run is
 * refused and nothing is signalled.
 */

export type { RunState } from "./run-standing.js";

export interface RunSummary {
  readonly handle: string;
  readonly runId: string | null;
  readonly state: RunState;
  readonly job: string | null;
  readonly resolution: string | null;
  readonly startedAt: string | null;
  readonly result: RunResult | null;
  readonly exit: RunExit | null;
  /** complete | failed-evidence for a sealed run. */
  readonly status: string | null;
  /** Set when the run's files cannot be read (fsck says more). */
  readonly error: string | null;
  /** Set for a foreign run: why oats will not cancel or seal it. */
  readonly foreign: Foreign | null;
}

export interface ReadRun {
  readonly handle: string;
  readonly dir: string;
  readonly runId: string | null;
  readonly state: RunState;
  readonly record: RunRecord | null;
  readonly control: RunControl | null;
  /** Set for a foreign run: why oats will not cancel or seal it. */
  readonly foreign: Foreign | null;
  readonly logBytes: number;
  readonly lines: LogLine[];
  readonly footer: string[];
}

export interface RunVerdict {
  readonly handle: string;
  readonly runId: string;
  readonly result: RunResult;
  readonly status: "complete" | "failed-evidence";
  readonly checks: {
    readonly record: true;
    readonly log: true;
    readonly audit: { readonly start: number; readonly end: number };
  };
  readonly record: RunRecord;
}

/** Where a run stands (run-standing.ts); `audit` reads the anchored audit log when it is needed (read once). */
export function stateOf(
  realScope: string,
  handle: string,
  dir: string,
  audit: () => AnchoredAudit = lazyAnchoredAudit(realScope),
): Standing {
  return standingOf(realScope, handle, dir, audit);
}

/**
 * Every run of this scope by handle, with where it stands (open, sealed, ...) and its record's summary once sealed;
 * a run that cannot be read is listed with its error, never skipped or thrown.
 */
export function listRuns(scope: string): RunSummary[] {
  const realScope = resolveScope(scope);
  const audit = lazyAnchoredAudit(realScope);
  return listHandles(realScope).map((handle) => {
    const empty = {
      handle,
      runId: null,
      job: null,
      resolution: null,
      startedAt: null,
      result: null,
      exit: null,
      status: null,
    };
    try {
      const { state, control, sealed, foreign } = stateOf(realScope, handle, join(runsRoot(realScope), handle), audit);
      if (sealed !== null) {
        const { record } = sealed;
        return {
          handle,
          runId: sealed.id,
          state,
          job: record.job,
          resolution: record.resolution,
          startedAt: record.startedAt,
          result: record.result,
          exit: record.exit,
          status: record.evidence.status,
          error: null,
          foreign: null,
        };
      }
      return {
        ...empty,
        state,
        job: control!.base.job,
        resolution: control!.base.resolution,
        startedAt: control!.base.startedAt,
        error: null,
        foreign,
      };
    } catch (error) {
      return {
        ...empty,
        state: "unsealed" as const,
        error: error instanceof Error ? error.message : String(error),
        foreign: null,
      };
    }
  });
}

/**
 * One run, its state, record (once sealed) and log lines (an open log's whole lines only).
 * @param ref a handle, a run id or a unique prefix of either; `run-not-found` when none matches, `invalid-input`
 *   (reason `ambiguous-run`) when a prefix names several
 */
export function readRun(scope: string, ref: string): ReadRun {
  const realScope = resolveScope(scope);
  const { handle, dir } = findRun(realScope, ref);
  const { state, control, sealed, foreign } = stateOf(realScope, handle, dir);
  const bytes = readLogBytes(dir);
  // An open log may end in a line being written: show the whole lines only.
  const text = bytes.toString("utf8");
  const parsed = parseLog(state === "sealed" ? text : text.slice(0, text.lastIndexOf("\n") + 1));
  return {
    handle,
    dir,
    runId: sealed?.id ?? null,
    state,
    record: sealed?.record ?? null,
    control,
    foreign,
    logBytes: bytes.length,
    lines: parsed.lines,
    footer: parsed.footer,
  };
}

function mismatch(handle: string, check: string, message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("integrity-mismatch", `run ${handle}: ${message}`, {
    handle,
    check,
    reason: `run-${check}-mismatch`,
    ...details,
  });
}

function sameRef(entry: AuditEntry | undefined, ref: { seq: number; hash: string }): entry is AuditEntry {
  return entry !== undefined && entry.seq === ref.seq && entry.hash === ref.hash;
}

/**
 * A sealed run, checked: the record's bytes are canonical, valid and hash to
 * the id (the id given, when a full id was given); the log hashes to the
 * record's digest, has its byte count, parses, has the line count and a
 * footer that agrees with the record's exit and result; the audit log (its
 * chain verified) holds the run-start entry the record names and a run-end
 * entry naming this run id with the same exit and result.
 */
export function verifyRun(scope: string, ref: string): RunVerdict {
  const realScope = resolveScope(scope);
  const { handle, dir } = findRun(realScope, ref);
  const bare = ref.replace(/^oats\.json\.v1:/, "");
  const verdict = verifySealedRun(realScope, handle, dir, readAnchoredAudit(realScope).entries);
  // A full id given must be the id the record hashes to (a prefix found it; the bytes decide).
  if (bare.startsWith("sha256-") && bare.length === verdict.runId.length && bare !== verdict.runId)
    throw mismatch(handle, "record", `record hashes to ${verdict.runId}, not ${bare}`);
  return verdict;
}

/** verifyRun for one run directory, against audit entries already read (fsck reads them once for every run); null
 * entries skip the audit check. */
export function verifySealedRun(
  realScope: string,
  handle: string,
  dir: string,
  entries: readonly AuditEntry[] | null,
): RunVerdict {
  checkRunDir(dir);
  const sealed = readRecord(dir);
  if (sealed === null) {
    const standing = stateOf(realScope, handle, dir, () => {
      if (entries === null) throw new OatsError("integrity-mismatch", "the audit log could not be read");
      const bySeq = new Map(entries.map((entry) => [entry.seq, entry]));
      return { entries, bySeq: (seq: number) => bySeq.get(seq) };
    });
    if (standing.state === "foreign") throw foreignRun(handle, "verify", standing.foreign!);
    const running = standing.state === "running";
    throw new OatsError(
      "invalid-input",
      `run ${handle} is not sealed${running ? " (it is still running)" : " and its dispatcher is gone"}`,
      { handle, reason: running ? "run-running" : "run-unsealed" },
    );
  }
  const { record, id } = sealed;
  if (record.handle !== handle) throw mismatch(handle, "record", `record names handle ${record.handle}`);
  const bytes = readLogBytes(dir);
  const digest = bytesDigest(bytes);
  if (digest !== record.log.digest || bytes.length !== record.log.bytes)
    throw mismatch(
      handle,
      "log",
      `log hashes to ${digest} (${bytes.length} bytes), the record says ` +
        `${record.log.digest} (${record.log.bytes} bytes)`,
      { expected: record.log.digest, actual: digest },
    );
  const parsed = parseLog(bytes.toString("utf8"));
  if (
    parsed.lines.length !== record.log.lines ||
    parsed.result !== record.result ||
    parsed.exit?.code !== record.exit.code ||
    parsed.exit?.signal !== record.exit.signal
  ) {
    throw mismatch(handle, "log", "the log's lines or footer disagree with the record");
  }
  let audit = { start: -1, end: -1 };
  if (entries !== null) {
    const bySeq = (seq: number) => entries.find((entry) => entry.seq === seq);
    const start = bySeq(record.startAudit.seq);
    if (!sameRef(start, record.startAudit) || start.action !== "run-start" || start.subject?.["handle"] !== handle)
      throw mismatch(handle, "audit", `the audit log has no run-start entry seq ${record.startAudit.seq} for this run`);
    const dispatch = bySeq(record.dispatchAudit.seq);
    if (
      !sameRef(dispatch, record.dispatchAudit) ||
      dispatch.action !== "dispatch" ||
      dispatch.subject?.["job"] !== record.job
    )
      throw mismatch(
        handle,
        "audit",
        `the audit log has no dispatch entry seq ${record.dispatchAudit.seq} for job ${record.job}`,
      );
    const end = entries.find(
      (entry) => entry.action === "run-end" && entry.subject?.["handle"] === handle && entry.details["runId"] === id,
    );
    const endExit = end?.details["exit"] as RunExit | undefined;
    if (
      end === undefined ||
      end.details["result"] !== record.result ||
      endExit?.code !== record.exit.code ||
      endExit?.signal !== record.exit.signal
    )
      throw mismatch(handle, "audit", `the audit log has no run-end entry for run ${id} with its exit and result`);
    audit = { start: start.seq, end: end.seq };
  }
  // This account sealed this run under another id: the record in the scope is not the one it wrote, whatever the
  // audit log was made to say (a run-end line appended after this account's checkpoint still verifies).
  const ours = lookupStartRecord(realScope, handle);
  if (ours.kind === "found" && ours.record.sealed !== null && ours.record.sealed.runId !== id)
    throw mismatch(
      handle,
      "record",
      `record hashes to ${id}; this account sealed the run as ${ours.record.sealed.runId}`,
      {
        expected: ours.record.sealed.runId,
        actual: id,
      },
    );
  return {
    handle,
    runId: id,
    result: record.result,
    status: record.evidence.status,
    checks: { record: true, log: true, audit },
    record,
  };
}

/**
 * Ask a running run's dispatcher to cancel it: a `cancel` file in the run
 * directory, which the dispatcher watches. Only a run this account's
 * dispatcher recorded starting (its private start record), whose recorded
 * dispatcher is really alive (pid and start time, in this boot), is asked;
 * a foreign run is refused (`run-foreign`), a run whose dispatcher is gone
 * with the remedy `oats run seal`. Waits up to `waitMs` for the run to be
 * sealed.
 */
export async function cancelRun(scope: string, ref: string, options: { waitMs?: number } = {}): Promise<ReadRun> {
  const realScope = resolveScope(scope);
  const { handle, dir } = findRun(realScope, ref);
  const { state, start, foreign } = stateOf(realScope, handle, dir);
  if (state === "sealed")
    throw new OatsError("invalid-input", `run ${handle} is already sealed; nothing to cancel`, {
      handle,
      reason: "run-sealed",
    });
  if (state === "foreign") throw foreignRun(handle, "cancel", foreign!);
  if (state === "unsealed")
    throw new OatsError(
      "invalid-input",
      `run ${handle} has no live dispatcher (pid ${start!.dispatcher.pid} is ` +
        `gone or is another process); close it with \`oats run seal\``,
      { handle, reason: "run-unsealed" },
    );
  writeFileSync(join(dir, CANCEL_FILE), `${new Date().toISOString()}\n`, { flag: "wx", mode: 0o600 });
  const deadline = Date.now() + (options.waitMs ?? 30_000);
  while (Date.now() < deadline) {
    if (readRecord(dir) !== null) return readRun(realScope, handle);
    if (!isSameProcess(start!.dispatcher)) break;
    await new Promise((done) => setTimeout(done, 50));
  }
  const after = readRun(realScope, handle);
  if (after.state === "sealed") return after;
  throw new OatsError(
    "busy",
    `run ${handle}: cancel was requested but the run is not sealed ` +
      `yet${after.state === "unsealed" ? " (its dispatcher is gone: `oats run seal` closes it)" : ""}`,
    { handle, reason: after.state === "unsealed" ? "run-unsealed" : "run-cancel-pending" },
  );
}

/**
 * Close a run whose dispatcher is gone as INTERRUPTED: a torn last line is
 * cut off (a note says how many bytes), every whole line stays, the footer
 * says `exit: unknown`, and the record and run-end entry are written as the
 * dispatcher would have. Only a run this account's dispatcher recorded
 * starting is sealed, from what that record says (never from
 * control.json); a foreign run is refused (`run-foreign`) and nothing is
 * signalled or written. What is left of the run's process group is killed
 * first, so nothing writes to the log after it is sealed, but only in the
 * boot the record was made in, and only when the group's leader is the
 * recorded child (pid and start time) or is gone while members remain.
 */
export async function sealInterruptedRun(scope: string, ref: string): Promise<ReadRun> {
  const realScope = resolveScope(scope);
  const { handle, dir } = findRun(realScope, ref);
  const { state, start: recorded, foreign } = stateOf(realScope, handle, dir);
  if (state === "sealed")
    throw new OatsError("invalid-input", `run ${handle} is already sealed`, { handle, reason: "run-sealed" });
  if (state === "foreign") throw foreignRun(handle, "seal", foreign!);
  const start = recorded!;
  if (state === "running")
    throw new OatsError(
      "busy",
      `run ${handle} is still running (dispatcher pid ${start.dispatcher.pid}); cancel it with \`oats run cancel\``,
      { handle, reason: "run-running" },
    );
  if (start.startAudit === null)
    throw new OatsError(
      "invalid-input",
      `run ${handle} never started (no run-start audit entry was written); nothing ran, remove its directory`,
      { handle, reason: "run-never-started", dir },
    );
  const notes: string[] = [];
  const child = start.child;
  // No child recorded: none was spawned, or it was gone before its start time could be read; nothing to signal.
  if (child !== null && !sameBoot(start))
    notes.push("the run was started in another boot (or the boot cannot be told); nothing was signalled");
  else if (
    child !== null &&
    (isSameProcess(child) || (groupMembers(child.pid).length > 0 && !isAnotherLeader(child)))
  ) {
    let killed = 0;
    for (let round = 0; round < 200 && groupMembers(child.pid).length > 0; round += 1) {
      killed = Math.max(killed, groupMembers(child.pid).length);
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        break;
      }
      await new Promise((done) => setTimeout(done, 10));
    }
    if (killed > 0)
      notes.push(
        `${killed} process${killed === 1 ? "" : "es"} of the run's group ` +
          `outlived the dispatcher and were killed at seal`,
      );
  }
  const { fd, torn } = openLogForSeal(dir, start.log.ino);
  let lines: number;
  let last: number;
  let unfinished: string | null;
  try {
    const bytes = readLogBytes(dir);
    // A seal that crashed after its footer and before its record: the footer goes, and a note quotes it.
    const footerAt = footerOffset(bytes);
    unfinished = footerAt < bytes.length ? bytes.toString("utf8", footerAt) : null;
    if (unfinished !== null) {
      ftruncateSync(fd, footerAt);
      fsyncSync(fd);
    }
    const parsed = parseLog(bytes.toString("utf8", 0, footerAt));
    lines = parsed.lines.length;
    last =
      parsed.lines.length > 0
        ? Date.parse(`${parsed.lines.at(-1)!.at.slice(0, 23)}Z`) * 1000 + Number(parsed.lines.at(-1)!.at.slice(23, 26))
        : 0;
  } catch (error) {
    closeSync(fd);
    throw error;
  }
  if (torn > 0) notes.push(`a torn last line (${torn} bytes without a newline) was cut off`);
  if (unfinished !== null)
    notes.push(`the footer of a seal that did not finish was cut off; it said: ${quoteFooter(unfinished)}`);
  notes.push("interrupted: the dispatcher ended before the run was sealed; sealed by `oats run seal`");
  const endedAt = formatStamp(Math.max(Date.now() * 1000, last + 1));
  await sealRun(
    {
      realScope,
      dir,
      base: start.base,
      startAudit: start.startAudit,
      exit: { code: null, signal: null },
      result: "INTERRUPTED",
      lines,
      notes,
      endedAt,
      redactions: [],
    },
    fd,
  );
  return readRun(realScope, handle);
}

/** The footer lines of an unfinished seal on one note line, bounded. */
function quoteFooter(text: string): string {
  const quoted = text
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => line.replace(/^# /, ""))
    .join("; ");
  return quoted.length > 1000 ? `${quoted.slice(0, 1000)}...` : quoted;
}

/** The group's leader pid is alive but is a different process than the child (the pid was reused): never signal it. */
function isAnotherLeader(child: { pid: number; start: string }): boolean {
  return !isSameProcess(child) && groupMembers(child.pid).includes(child.pid);
}
