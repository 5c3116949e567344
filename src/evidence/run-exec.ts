import { constants } from "node:os";
import type { Writable } from "node:stream";
import { OatsError, errnoCode } from "../core/index.js";
import { discardDispatchPlan, releaseDispatchHold, type DispatchPlan } from "../captures/index.js";
import { exitText, type RunExit, type RunResult } from "./log-format.js";
import type { DeliverySection, RunRecord } from "./run-record.js";
import { type Sealed, sealRun } from "./run-seal.js";
import { afterRunSealed } from "./after-seal.js";
import { ResourceStack } from "./resource-stack.js";
import { openRun, StartRefused, type OpenRun } from "./run-open.js";
import { type Captured, captureChild } from "./run-child.js";

/**
 * Run a dispatch plan as a run (docs/design/evidence.md, "Lifecycle"), in
 * phases: open the run (the run directory and the `run-start` audit entry
 * come first: run-open.ts), run the child and capture its output into the
 * log (run-child.ts), seal the run (run-seal.ts), then hand the sealed run
 * on (the outbox, by default) and say how it ended.
 *
 * What the run holds (the plan's lease, the plan's run copy, the run
 * directory until the run-start entry names it, the log's descriptor until
 * the seal takes it) goes on one ResourceStack, released once by one
 * `finally` when the seal is done or a phase before it failed; a refusal to
 * start is audited after that. The child's own watches and timers are
 * released when it has ended (run-child.ts).
 *
 * The plan's publish lease (captures/dispatch-hold.ts) is let go as soon as
 * the run is open: from then on its control file, and once sealed its
 * record, name the resolution, and gc keeps what a run names
 * (docs/design/lifecycle.md, "What a dispatch holds"). It is the last thing
 * the stack releases, so a gc never meets a half-made run directory.
 */

export interface RunWithEvidenceOptions {
  /** Where the child's output is shown, masked as the log is (never the raw bytes): this process's stdout/stderr
   * (default), nowhere, or given streams. */
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
  /** The run's signed statement in the scope's attestation store, or null (no signing key). */
  readonly attestation?: string | null;
}

/**
 * Run a dispatch plan as a run, in the phases of src/evidence/run-exec.ts: open it (a refusal to start is audited), run
 * the child with its output captured in the log, seal the run and hand it on. The plan is consumed whatever happens:
 * its lease is released and its run copy removed (kept with `options.keep`).
 * @returns the exit code to exit with, the result, the sealed record and any warnings
 */
export async function runDispatchPlanWithEvidence(
  scope: string,
  plan: DispatchPlan,
  options: RunWithEvidenceOptions = {},
): Promise<RunOutcome> {
  try {
    return await runPhases(scope, plan, options);
  } catch (error) {
    // Audited once the run's stack is released: the run directory and the run copy are gone by then.
    if (error instanceof StartRefused) throw await error.audited();
    throw error;
  }
}

async function runPhases(scope: string, plan: DispatchPlan, options: RunWithEvidenceOptions): Promise<RunOutcome> {
  const held = new ResourceStack();
  held.defer(() => releaseDispatchHold(plan));
  if (options.keep !== true) held.defer(() => discardDispatchPlan(plan).catch(() => undefined));
  let childMayRun = false;
  let run: OpenRun;
  let captured: Captured;
  let sealed: Sealed;
  try {
    run = await openRun(scope, plan, options, held);
    // The run's control file names the resolution: a root now, so the dispatch's lease can go.
    await releaseDispatchHold(plan);
    childMayRun = true;
    captured = await captureChild(run, plan, options);
    childMayRun = false;
    sealed = await sealCaptured(run, captured);
  } finally {
    // A failure while the child may still run (a spawn that throws, a control.json that cannot name the child)
    // releases nothing: the run stays open, its log's descriptor and the plan's run copy with it.
    if (!childMayRun) await held.release();
  }
  return afterSeal(run, plan, options, captured, sealed);
}

/** Footer, record and run-end entry (run-seal.ts); a seal that cannot finish is refused, the run left open. */
async function sealCaptured(run: OpenRun, captured: Captured): Promise<Sealed> {
  // The seal closes the log's descriptor, whether it seals or not.
  run.logHold.dismiss();
  try {
    return await sealRun(
      {
        realScope: run.realScope,
        dir: run.dir,
        base: run.control.base,
        startAudit: run.control.startAudit!,
        exit: captured.exit,
        result: captured.result,
        lines: captured.lines,
        notes: captured.notes,
        endedAt: run.clock.next(),
        redactions: run.redactor.statement(),
        appendOptions: run.appendOptions,
      },
      run.logFd,
    );
  } catch (error) {
    throw sealRefusal(run.handle, captured, error);
  }
}

/** Why a seal did not finish. Unsealed (the seal took its footer back off), the run stays for `oats run seal` once
 * there is room again. */
function sealRefusal(handle: string, captured: Captured, error: unknown): unknown {
  const sealError = error instanceof Error ? error.message : String(error);
  if (captured.logFailure !== null) return logUnwritable(handle, captured.logFailure, { sealed: false, sealError });
  if (error instanceof OatsError) return error;
  const { exit, result } = captured;
  return new OatsError(
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
}

function logUnwritable(handle: string, failure: Error, details: Record<string, unknown>): OatsError {
  return new OatsError(
    "audit-unavailable",
    `run ${handle}: the log could not be written (${failure.message}); the child was stopped`,
    {
      handle,
      reason: "log-unwritable",
      errno: (failure as NodeJS.ErrnoException).code ?? null,
      ...details,
    },
  );
}

/** After the seal: the sealed run is handed on (onSealed), and the outcome says how it ended. */
async function afterSeal(
  run: OpenRun,
  plan: DispatchPlan,
  options: RunWithEvidenceOptions,
  captured: Captured,
  sealed: Sealed,
): Promise<RunOutcome> {
  const { handle } = run;
  const { exit, startError } = captured;
  // Sealed CANCELLED with the cause in a note; the lines the log holds are all it has, so no outcome is returned.
  if (captured.logFailure !== null)
    throw logUnwritable(handle, captured.logFailure, { sealed: true, runId: sealed.id });
  const warnings: string[] = [];
  if (sealed.auditError !== null) warnings.push(`the run-end audit entry could not be written: ${sealed.auditError}`);
  if (sealed.attestationError !== null)
    warnings.push(`the run's signed statement could not be written: ${sealed.attestationError}`);
  // By default a sealed run is queued for delivery (and pushed when dispatch found the far side reachable).
  const onSealed =
    options.onSealed ??
    ((sealedScope: string, _record: RunRecord, sealedHandle: string, runId: string) =>
      afterRunSealed(sealedScope, sealedHandle, runId, plan.delivery ?? null));
  try {
    await onSealed(run.realScope, sealed.record, handle, sealed.id);
  } catch (error) {
    warnings.push(`after sealing: ${error instanceof Error ? error.message : String(error)}`);
  }
  const exitCode =
    exit.code ?? (exit.signal !== null ? 128 + (constants.signals[exit.signal as NodeJS.Signals] ?? 0) : 127);
  if (startError !== null) {
    throw new OatsError(
      "invalid-artifact",
      `cannot start ${plan.executable.command}: ${startError.message}`,
      { command: plan.executable.command, errno: (startError as NodeJS.ErrnoException).code, runId: sealed.id, handle },
      { cause: startError },
    );
  }
  return {
    runId: sealed.id,
    handle,
    dir: run.dir,
    exit,
    exitCode,
    result: captured.result,
    record: sealed.record,
    kept: options.keep === true ? plan.run.dir : null,
    warnings,
    attestation: sealed.attestation,
  };
}
