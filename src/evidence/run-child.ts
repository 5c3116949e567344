import type { ChildProcess } from "node:child_process";
import { type FSWatcher, lstatSync, watch } from "node:fs";
import { join } from "node:path";
import type { Writable } from "node:stream";
import type { DispatchPlan } from "../captures/index.js";
import { LineCapture, MAX_LINE_CHARS } from "./line-capture.js";
import type { RunExit, RunResult } from "./log-format.js";
import { ResourceStack } from "./resource-stack.js";
import { RunLog } from "./run-log.js";
import type { OpenRun } from "./run-open.js";
import { CANCEL_FILE, groupMembers, processStart, writeControl } from "./run-store.js";
import { identityOf, writeStartRecord } from "./start-record.js";

/**
 * The child's phase of a run (run-exec.ts; docs/design/evidence.md,
 * "Lifecycle" steps 3 and 4, "Cancel and interruption"): the child starts in
 * its own process group, its stdout and stderr are read through LineCapture
 * and the redactor into the log (and, masked as the log is, to the operator
 * unless quiet: never the raw bytes), and the phase ends once the child has
 * exited and both pipes are closed.
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

export interface ChildOptions {
  /** Where the child's output is shown, masked as the log is: this process's stdout/stderr (default), nowhere, or
   * given streams. */
  readonly output?: "inherit" | "quiet" | { stdout: Writable; stderr: Writable };
  /** Aborting it cancels the run. */
  readonly signal?: AbortSignal;
  /** SIGTERM to SIGKILL, for a cancel (default 3000 ms). */
  readonly graceMs?: number;
  /** How long a group that outlives its child may keep the pipes open (default 2000 ms). */
  readonly drainMs?: number;
}

/** What the seal needs to know of the child's phase. */
export interface Captured {
  readonly exit: RunExit;
  readonly result: RunResult;
  /** The footer's notes, in order. */
  readonly notes: readonly string[];
  /** The lines on the log. */
  readonly lines: number;
  /** Why the log stopped being written, if it did. */
  readonly logFailure: Error | null;
  /** Why the child could not be started, if it could not. */
  readonly startError: Error | null;
}

type Tee = { stdout: Writable; stderr: Writable } | null;

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

function teeOf(output: ChildOptions["output"] = "inherit"): Tee {
  if (output === "quiet") return null;
  if (output === "inherit") return { stdout: process.stdout as Writable, stderr: process.stderr as Writable };
  return output;
}

/**
 * Whether `oats run cancel` asked: a regular `cancel` file, made by this
 * account or root, in the run directory this dispatcher created (the same
 * inode). A file another account planted, or a directory put in the run
 * directory's place, asks for nothing.
 */
function cancelRequested(dir: string, dirIno: string): boolean {
  try {
    if (identityOf(dir).ino !== dirIno) return false;
    const stats = lstatSync(join(dir, CANCEL_FILE));
    const me = typeof process.geteuid === "function" ? process.geteuid() : -1;
    return stats.isFile() && (stats.uid === me || stats.uid === 0);
  } catch {
    return false;
  }
}

/** Run the child to its end, its lines on the log; what the seal needs. */
export async function captureChild(run: OpenRun, plan: DispatchPlan, options: ChildOptions): Promise<Captured> {
  const tee = teeOf(options.output);
  const log = new RunLog(run.logFd);
  // The echo is the log's own masked text, not the child's bytes: a credential the log hides is hidden there too.
  const echo = (to: Writable | undefined) => (to === undefined ? {} : { echo: (text: string) => void to.write(text) });
  const out = new LineCapture("out", run.clock, () => undefined, MAX_LINE_CHARS, log.write, {
    redactor: run.redactor,
    ...echo(tee?.stdout),
  });
  const err = new LineCapture("err", run.clock, () => undefined, MAX_LINE_CHARS, log.write, {
    redactor: run.redactor,
    ...echo(tee?.stderr),
  });
  const notes: string[] = [];
  // The cancel's watches and its grace timer last as long as the child: none outlives the phase.
  const watching = new ResourceStack();
  const child = new RunChild(run, options, notes, watching);
  let exit: RunExit;
  try {
    exit = await child.run(plan, { out, err, log });
  } finally {
    await watching.release();
  }
  out.end();
  err.end();
  if (child.startError !== null) notes.push(`the child could not be started: ${child.startError.message}`);
  const split = out.split + err.split;
  if (split > 0)
    notes.push(`${split} line${split === 1 ? " was" : "s were"} longer than the line bound and cut into pieces`);
  if (child.cancelled !== null) notes.push(`cancelled: ${child.cancelled}`);
  // A failure writing the last lines, after the child had ended, cancelled nothing: the footer still says why lines
  // are missing.
  else if (log.failure !== null) notes.push(`the log could not be written: ${log.failure.message}`);
  const result: RunResult = child.cancelled !== null ? "CANCELLED" : exit.code === 0 ? "OK" : "FAILED";
  return { exit, result, notes, lines: log.lines, logFailure: log.failure, startError: child.startError };
}

interface Sinks {
  readonly out: LineCapture;
  readonly err: LineCapture;
  readonly log: RunLog;
}

/** The child and its process group, from the spawn until both pipes are closed. */
class RunChild {
  /** Why the run was cancelled, once it was. */
  cancelled: string | null = null;
  startError: Error | null = null;
  private pgid: number | undefined;
  private exited: RunExit | null = null;
  private closed = false;

  constructor(
    private readonly open: OpenRun,
    private readonly options: ChildOptions,
    private readonly notes: string[],
    private readonly watching: ResourceStack,
  ) {}

  /** Spawn the child in a group of its own and feed its output to the sinks; its exit once its pipes are closed. */
  run(plan: DispatchPlan, sinks: Sinks): Promise<RunExit> {
    return new Promise<RunExit>((resolveExit) => {
      // Loaded here, not at the top: a command that only loads this layer (retain pins through lifecycle) need not.
      const child = process
        .getBuiltinModule("node:child_process")
        .spawn(plan.executable.command, [...plan.executable.argv], {
          cwd: plan.run.cwd,
          env: { ...plan.env },
          stdio: ["ignore", "pipe", "pipe"],
          detached: true,
          shell: false,
        });
      const pgid = child.pid;
      this.pgid = pgid;
      sinks.log.onFailure = this.cancel;
      if (pgid !== undefined) {
        const start = processStart(pgid);
        if (start !== null) {
          const child = { pid: pgid, start };
          try {
            // The private record first: it is what `oats run seal` may signal; control.json only mirrors it.
            writeStartRecord(this.open.realScope, { ...this.open.start, child });
            writeControl(this.open.dir, { ...this.open.control, child });
          } catch (error) {
            // A child nothing records could never be stopped by `oats run seal`: it does not go on.
            killGroup(pgid, "SIGKILL");
            throw error;
          }
        }
        this.watchForCancel();
      }
      child.stdout!.on("data", (chunk: Buffer) => sinks.out.push(chunk));
      child.stderr!.on("data", (chunk: Buffer) => sinks.err.push(chunk));
      child.on("error", (error) => {
        this.startError = error;
        if (this.exited === null) resolveExit({ code: null, signal: null });
      });
      child.on("exit", (code, signal) => this.onExit(child, { code, signal }));
      child.on("close", async (code, signal) => {
        this.closed = true;
        if (pgid !== undefined && this.cancelled !== null) await sweepGroup(pgid);
        resolveExit(this.exited ?? { code, signal });
      });
    });
  }

  /** SIGTERM to the group, SIGKILL after the grace; once, and only while the child has not exited. */
  readonly cancel = (why: string): void => {
    const pgid = this.pgid;
    if (this.cancelled !== null || pgid === undefined || this.exited !== null) return;
    this.cancelled = why;
    killGroup(pgid, "SIGTERM");
    const grace = setTimeout(() => killGroup(pgid, "SIGKILL"), this.options.graceMs ?? 3000);
    this.watching.defer(() => clearTimeout(grace));
  };

  /** The dispatcher's abort, and a cancel file in the run directory (fs.watch, and a 250 ms poll). */
  private watchForCancel(): void {
    const signal = this.options.signal;
    if (signal?.aborted) this.cancel("the dispatcher was interrupted");
    signal?.addEventListener("abort", () => this.cancel("the dispatcher was interrupted"), { once: true });
    const check = () => {
      if (cancelRequested(this.open.dir, this.open.start.dir.ino)) this.cancel("`oats run cancel` was requested");
    };
    let watcher: FSWatcher | null;
    try {
      watcher = watch(this.open.dir, check);
    } catch {
      watcher = null;
    }
    this.watching.defer(() => watcher?.close());
    const poll = setInterval(check, 250);
    this.watching.defer(() => clearInterval(poll));
  }

  /** The child is gone: after a cancel, sweep its group; otherwise others of the group may hold the pipes, and get
   * drainMs before the group goes. */
  private onExit(child: ChildProcess, exit: RunExit): void {
    this.exited = exit;
    const pgid = this.pgid;
    if (pgid === undefined) return;
    if (this.cancelled !== null) {
      void sweepGroup(pgid);
      return;
    }
    setTimeout(() => {
      if (this.closed) return;
      this.notes.push("processes of the run's group still held its output after the child ended; they were killed");
      void sweepGroup(pgid).then(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
      });
    }, this.options.drainMs ?? 2000).unref();
  }
}
