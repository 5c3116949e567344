import { spawn } from "node:child_process";
import { closeSync, existsSync, ftruncateSync, rmSync, watch, writeSync, type FSWatcher } from "node:fs";
import { constants } from "node:os";
import { join } from "node:path";
import type { Writable } from "node:stream";
import { OatsError, errnoCode } from "../core/index.js";
import { audit, auditRefusal } from "../ledger/index.js";
import { discardDispatchPlan, type DispatchPlan, privilegeGate } from "../captures/index.js";
import { resolveScope, writeRestSync } from "../retention/index.js";
import { createStampClock, LineCapture, MAX_LINE_CHARS } from "./line-capture.js";
import { exitText, formatStamp, type RunExit, type RunResult, type Stream } from "./log-format.js";
import type { DeliverySection, RunRecord } from "./run-record.js";
import { sealRun } from "./run-seal.js";
import { runRedactor } from "./run-policy.js";
import { afterRunSealed } from "./after-seal.js";
import {
  createRunDir,
  groupMembers,
  newHandle,
  processStart,
  writeControl,
  type RunBase,
  type RunControl,
} from "./run-store.js";

/**
 * Run a dispatch plan as a run (docs/design/evidence.md, "Lifecycle"): the
 * run directory and the `run-start` audit entry come first; then the child
 * starts in its own process group, its stdout and stderr are read through
 * LineCapture and the redactor into the log (and, raw, to the operator
 * unless quiet); when it ends the run is sealed (run-seal.ts).
 *
 * Cancel (the AbortSignal, or a `cancel` file that `oats run cancel` puts in
 * the run directory) sends SIGTERM to the whole group and SIGKILL after
 * `graceMs`; once the child has gone, the group is swept with SIGKILL until
 * /proc shows nobody in it, so a grandchild started after the cancel goes
 * too. A child that exits while others of its group keep its pipes open
 * gets `drainMs` for them to finish, then the group is killed. The group's
 * id cannot be reused while anyone is in it, and the dispatcher only
 * signals it before the sweep found it empty.
 */

export interface Redactor {
  apply(text: string): string;
  /** False only when apply would change no line of `text` (lines joined by newlines); lets a chunk of plain lines
   * skip apply. */
  mayMatch?(text: string): boolean;
  statement(): Array<{ rule: string; count: number }>;
}

/** A redactor that masks nothing (for callers of LineCapture outside a run); a run's redactor comes from its plan
 * (run-policy.ts). */
export const identityRedactor: Redactor = { apply: (text) => text, statement: () => [] };

export interface RunWithEvidenceOptions {
  /** Where the child's raw output is shown: this process's stdout/stderr (default), nowhere, or given streams. */
  readonly output?: "inherit" | "quiet" | { stdout: Writable; stderr: Writable };
  /** Aborting it cancels the run (the CLI wires SIGINT and SIGTERM to it). */
  readonly signal?: AbortSignal;
  /** Keep the plan's run copy (see runDispatchPlan). */
  readonly keep?: boolean;
  // No redactor, required classes or evidence judge here: they come from the plan (run-policy.ts), so no caller can
  // weaken them.
  readonly delivery?: DeliverySection;
  /** Called once the run is sealed and its end audited; default: afterRunSealed (queue in the outbox, push when the
   * posture is delivered-later). A failure is reported in `warnings`, never unseals. */
  readonly onSealed?: (scope: string, record: RunRecord, handle: string, runId: string) => Promise<void> | void;
  /** SIGTERM to SIGKILL, for a cancel (default 3000 ms). */
  readonly graceMs?: number;
  /** How long a group that outlives its child may keep the pipes open (default 2000 ms). */
  readonly drainMs?: number;
  readonly lockWaitMs?: number;
  /** The effective uid the child runs as (default: the one the plan was resolved for): uid 0 needs a privileged plan
   * (captures/privilege.ts). */
  readonly euid?: number;
}

export interface RunOutcome {
  readonly runId: string;
  readonly handle: string;
  readonly dir: string;
  readonly exit: RunExit;
  /** The code to exit with: the child's, or 128 + the signal's number. */
  readonly exitCode: number;
  readonly result: RunResult;
  readonly record: RunRecord;
  readonly kept: string | null;
  readonly warnings: string[];
}

export const CANCEL_FILE = "cancel";
/**
 * The log is written in flat pieces of about this many characters. One string
 * for a whole pipe chunk (thousands of lines, a quarter of a megabyte) cost
 * more to flatten and encode than the write itself (docs/design/performance.md,
 * "Run evidence").
 */
const LOG_PIECE_CHARS = 16 * 1024;

const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

function killGroup(pgid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false; // ESRCH: nobody left
  }
}

/** SIGKILL the group until /proc shows nobody in it (bounded: a group that will not die is reported). */
async function sweepGroup(pgid: number): Promise<number> {
  let killed = 0;
  for (let round = 0; round < 200; round += 1) {
    const members = groupMembers(pgid);
    if (members.length === 0) return killed;
    killed = Math.max(killed, members.length);
    killGroup(pgid, "SIGKILL");
    await sleep(10);
  }
  return killed;
}

export function baseOf(
  plan: DispatchPlan,
  handle: string,
  startedAt: string,
  options: RunWithEvidenceOptions,
): RunBase {
  return {
    handle,
    job: plan.job,
    resolution: plan.resolution,
    composition: { kind: plan.composition.kind, key: plan.composition.key, integrity: plan.composition.integrity },
    approval: { seq: plan.approval.seq, hash: plan.approval.hash },
    dispatchAudit: { seq: plan.audit.seq, hash: plan.audit.hash },
    principal: plan.principal,
    harness: plan.harness,
    classification: plan.classification.effective,
    environment: Object.keys(plan.env).sort(),
    startedAt,
    delivery:
      options.delivery ??
      (!plan.delivery ? { posture: "none", to: null } : { posture: plan.delivery.posture, to: plan.delivery.to }),
    required: [...plan.evidence.required],
  };
}

export async function runDispatchPlanWithEvidence(
  scope: string,
  plan: DispatchPlan,
  options: RunWithEvidenceOptions = {},
): Promise<RunOutcome> {
  const keep = options.keep === true;
  const appendOptions = options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs };
  let redactor: Redactor;
  const clock = createStampClock();
  const handle = newHandle();
  let realScope: string;
  let dir: string;
  let logFd: number;
  let control: RunControl;
  try {
    realScope = resolveScope(scope);
  } catch (error) {
    if (!keep) await discardDispatchPlan(plan).catch(() => undefined);
    throw error;
  }
  try {
    // Again here: a plan resolved without `exec` may still be handed to this function.
    privilegeGate({ capture: plan.composition.key, privileged: plan.privileged, euid: options.euid ?? plan.euid });
  } catch (error) {
    if (!keep) await discardDispatchPlan(plan).catch(() => undefined);
    throw await auditRefusal(
      realScope,
      "run-start",
      { job: plan.job, resolution: plan.resolution },
      error,
      {},
      appendOptions,
    );
  }
  try {
    // The credential values and profile patterns were validated at dispatch and prepare; a refusal here still starts
    // nothing.
    redactor = runRedactor(plan);
    ({ dir, logFd } = createRunDir(realScope, handle));
  } catch (error) {
    if (!keep) await discardDispatchPlan(plan).catch(() => undefined);
    throw error;
  }
  try {
    const self = { pid: process.pid, start: processStart(process.pid)! };
    control = {
      format: "oats.run-control.v1",
      dispatcher: self,
      child: null,
      startAudit: null,
      base: baseOf(plan, handle, clock.next(), options),
    };
    writeControl(dir, control);
    // Before anything runs: a run nobody can find in the audit log never starts.
    const entry = await audit(
      realScope,
      {
        action: "run-start",
        subject: { handle, job: plan.job, resolution: plan.resolution },
        outcome: "ok",
        details: { dispatchAudit: { ...plan.audit }, composition: { ...plan.composition } },
      },
      appendOptions,
    );
    control = { ...control, startAudit: { seq: entry.seq, hash: entry.hash } };
    writeControl(dir, control);
  } catch (error) {
    closeSync(logFd);
    rmSync(dir, { recursive: true, force: true });
    if (!keep) await discardDispatchPlan(plan).catch(() => undefined);
    throw await auditRefusal(
      realScope,
      "run-start",
      { handle, job: plan.job, resolution: plan.resolution },
      error,
      {},
      appendOptions,
    );
  }

  const output = options.output ?? "inherit";
  const tee =
    output === "quiet"
      ? null
      : output === "inherit"
        ? { stdout: process.stdout as Writable, stderr: process.stderr as Writable }
        : output;
  // A chunk's lines at once: one redaction pre-check for the chunk, each line redacted before it is appended.
  // The text is written as it is made, in flat pieces of about LOG_PIECE_CHARS, before the next chunk is read.
  const write = (stream: Stream, first: number, texts: readonly string[]) => {
    const check = redactor.mayMatch === undefined || redactor.mayMatch(texts.join("\n"));
    const lines: string[] = [];
    let chars = 0;
    for (let index = 0; index < texts.length; index += 1) {
      let text = texts[index]!;
      if (check) {
        const masked = redactor.apply(text);
        // A cleaned line has no CR or LF; only a mask could bring one.
        if (masked !== text) text = masked.replace(/[\r\n]/g, " ");
      }
      const line = `${formatStamp(first + index)} ${stream} ${text}\n`;
      lines.push(line);
      chars += line.length;
      if (chars >= LOG_PIECE_CHARS) {
        appendLog(lines.join(""), lines.length);
        lines.length = 0;
        chars = 0;
      }
    }
    if (lines.length > 0) appendLog(lines.join(""), lines.length);
  };
  // A log that cannot be written (a full disk) stops the run rather than letting it go on unrecorded: the
  // torn piece is cut back to the last whole line, the child is cancelled, and the caller gets a refusal.
  let logged = 0;
  let loggedLines = 0;
  let logFailure: Error | null = null;
  let cancelRun: ((why: string) => void) | null = null;
  const appendLog = (text: string, count: number) => {
    if (logFailure !== null) return;
    const length = Buffer.byteLength(text);
    try {
      const written = writeSync(logFd, text);
      // A short write is written on: what stops it raises its own errno (ENOSPC, EFBIG), and a write that was only
      // cut short goes on.
      if (written !== length) writeRestSync(logFd, Buffer.from(text, "utf8"), written);
      logged += length;
      loggedLines += count;
    } catch (error) {
      logFailure = error instanceof Error ? error : new Error(String(error));
      try {
        ftruncateSync(logFd, logged);
      } catch {
        // The seal cuts a torn last line off in any case (openLogForSeal).
      }
      cancelRun?.(`the log could not be written: ${logFailure.message}`);
    }
  };
  const out = new LineCapture("out", clock, () => undefined, MAX_LINE_CHARS, write);
  const err = new LineCapture("err", clock, () => undefined, MAX_LINE_CHARS, write);
  const notes: string[] = [];
  let cancelled: string | null = null;
  let startError: Error | null = null;
  let watcher: FSWatcher | null = null;
  let poll: NodeJS.Timeout | null = null;
  let graceTimer: NodeJS.Timeout | null = null;

  const exit = await new Promise<RunExit>((resolveExit) => {
    const child = spawn(plan.executable.command, [...plan.executable.argv], {
      cwd: plan.run.cwd,
      env: { ...plan.env },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
      shell: false,
    });
    const pgid = child.pid;
    let exited: RunExit | null = null;
    let closed = false;
    const cancel = (why: string) => {
      if (cancelled !== null || pgid === undefined || exited !== null) return;
      cancelled = why;
      killGroup(pgid, "SIGTERM");
      graceTimer = setTimeout(() => killGroup(pgid, "SIGKILL"), options.graceMs ?? 3000);
    };
    cancelRun = cancel;
    if (pgid !== undefined) {
      const start = processStart(pgid);
      if (start !== null) writeControl(dir, { ...control, child: { pid: pgid, start } });
      if (options.signal?.aborted) cancel("the dispatcher was interrupted");
      options.signal?.addEventListener("abort", () => cancel("the dispatcher was interrupted"), { once: true });
      const check = () => {
        if (existsSync(join(dir, CANCEL_FILE))) cancel("`oats run cancel` was requested");
      };
      try {
        watcher = watch(dir, check);
      } catch {
        watcher = null;
      }
      poll = setInterval(check, 250);
    }
    child.stdout!.on("data", (chunk: Buffer) => {
      out.push(chunk);
      tee?.stdout.write(chunk);
    });
    child.stderr!.on("data", (chunk: Buffer) => {
      err.push(chunk);
      tee?.stderr.write(chunk);
    });
    child.on("error", (error) => {
      startError = error;
      if (exited === null) resolveExit({ code: null, signal: null });
    });
    child.on("exit", (code, signal) => {
      exited = { code, signal };
      if (pgid === undefined) return;
      if (cancelled !== null) {
        void sweepGroup(pgid);
        return;
      }
      // Others of the group may hold the pipes: give them drainMs, then the group goes.
      setTimeout(() => {
        if (closed) return;
        notes.push("processes of the run's group still held its output after the child ended; they were killed");
        void sweepGroup(pgid).then(() => {
          child.stdout?.destroy();
          child.stderr?.destroy();
        });
      }, options.drainMs ?? 2000).unref();
    });
    child.on("close", async (code, signal) => {
      closed = true;
      if (pgid !== undefined && cancelled !== null) await sweepGroup(pgid);
      resolveExit(exited ?? { code, signal });
    });
  });
  if (graceTimer !== null) clearTimeout(graceTimer);
  if (poll !== null) clearInterval(poll);
  (watcher as FSWatcher | null)?.close();

  out.end();
  err.end();
  if (startError !== null) notes.push(`the child could not be started: ${(startError as Error).message}`);
  const split = out.split + err.split;
  if (split > 0)
    notes.push(`${split} line${split === 1 ? " was" : "s were"} longer than the line bound and cut into pieces`);
  if (cancelled !== null) notes.push(`cancelled: ${cancelled}`);
  // A failure writing the last lines, after the child had ended, cancelled nothing: the footer still says why lines
  // are missing.
  else if (logFailure !== null) notes.push(`the log could not be written: ${(logFailure as Error).message}`);
  const result: RunResult = cancelled !== null ? "CANCELLED" : exit.code === 0 ? "OK" : "FAILED";
  const warnings: string[] = [];
  const failure = logFailure as Error | null;
  const logUnwritable = (details: Record<string, unknown>) =>
    new OatsError(
      "audit-unavailable",
      `run ${handle}: the log could not be written (${failure!.message}); the child was stopped`,
      {
        handle,
        reason: "log-unwritable",
        errno: (failure as NodeJS.ErrnoException).code ?? null,
        ...details,
      },
    );
  let sealed;
  try {
    sealed = await sealRun(
      {
        realScope,
        dir,
        base: control.base,
        startAudit: control.startAudit!,
        exit,
        result,
        lines: loggedLines,
        notes,
        endedAt: clock.next(),
        redactions: redactor.statement(),
        appendOptions,
      },
      logFd,
    );
  } catch (error) {
    // Unsealed (the seal took its footer back off), it stays for `oats run seal` once there is room again.
    const sealError = error instanceof Error ? error.message : String(error);
    if (failure !== null) throw logUnwritable({ sealed: false, sealError });
    if (error instanceof OatsError) throw error;
    throw new OatsError(
      "audit-unavailable",
      `run ${handle}: the child ended (${exitText(exit)}) but the run could ` +
        `not be sealed (${sealError}); it stays open for \`oats run seal\``,
      {
        handle,
        reason: "seal-failed",
        errno: errnoCode(error) ?? null,
        exit: { code: exit.code, signal: exit.signal },
        result,
        sealed: false,
      },
      { cause: error },
    );
  } finally {
    if (!keep) await discardDispatchPlan(plan).catch(() => undefined);
  }
  // Sealed CANCELLED with the cause in a note; the lines the log holds are all it has, so no outcome is returned.
  if (failure !== null) throw logUnwritable({ sealed: true, runId: sealed.id });
  if (sealed.auditError !== null) warnings.push(`the run-end audit entry could not be written: ${sealed.auditError}`);
  // By default a sealed run is queued for delivery (and pushed when dispatch found the far side reachable).
  const onSealed =
    options.onSealed ??
    ((sealedScope: string, _record: RunRecord, sealedHandle: string, runId: string) =>
      afterRunSealed(sealedScope, sealedHandle, runId, plan.delivery ?? null));
  try {
    await onSealed(realScope, sealed.record, handle, sealed.id);
  } catch (error) {
    warnings.push(`after sealing: ${error instanceof Error ? error.message : String(error)}`);
  }
  const exitCode =
    exit.code ?? (exit.signal !== null ? 128 + (constants.signals[exit.signal as NodeJS.Signals] ?? 0) : 127);
  if (startError !== null) {
    throw new OatsError(
      "invalid-artifact",
      `cannot start ${plan.executable.command}: ${(startError as Error).message}`,
      { command: plan.executable.command, errno: (startError as NodeJS.ErrnoException).code, runId: sealed.id, handle },
      { cause: startError },
    );
  }
  return {
    runId: sealed.id,
    handle,
    dir,
    exit,
    exitCode,
    result,
    record: sealed.record,
    kept: keep ? plan.run.dir : null,
    warnings,
  };
}
