import { closeSync, rmSync } from "node:fs";
import { type AppendOptions, type AuditSubject, audit, auditRefusal } from "../ledger/index.js";
import { type DispatchPlan, privilegeGate } from "../captures/index.js";
import { resolveScope } from "../retention/index.js";
import { createStampClock, type StampClock } from "./line-capture.js";
import type { DeliverySection } from "./run-record.js";
import { runRedactor } from "./run-policy.js";
import type { Redactor } from "./run-log.js";
import type { Held, ResourceStack } from "./resource-stack.js";
import { createRunDir, newHandle, processStart, writeControl, type RunBase, type RunControl } from "./run-store.js";

/**
 * The first phase of a run (run-exec.ts; docs/design/evidence.md,
 * "Lifecycle", step 2): the run directory, its empty log and `control.json`,
 * then the `run-start` audit entry. Nothing is started before that entry is
 * written: a run nobody can find in the audit log never starts. What the
 * phase creates goes on the run's stack: the run directory until the
 * run-start entry names it, the log's descriptor until the seal takes it.
 */

export interface OpenOptions {
  readonly delivery?: DeliverySection;
  readonly lockWaitMs?: number;
  readonly euid?: number;
}

export interface OpenRun {
  readonly realScope: string;
  readonly handle: string;
  readonly dir: string;
  readonly logFd: number;
  /** The log's descriptor on the run's stack: the seal dismisses it, since it closes the descriptor itself. */
  readonly logHold: Held;
  /** `control.json` as written, naming the run-start entry. */
  readonly control: RunControl;
  readonly redactor: Redactor;
  readonly clock: StampClock;
  readonly appendOptions: AppendOptions;
}

/**
 * The run was refused before its child started. Thrown through the run's
 * stack, so that the run directory and the plan's run copy are gone before
 * the refusal is audited (run-exec.ts).
 */
export class StartRefused extends Error {
  constructor(
    private readonly realScope: string,
    private readonly subject: AuditSubject,
    private readonly refusal: unknown,
    private readonly appendOptions: AppendOptions,
  ) {
    super("the run was refused before its child started");
  }

  /** Audit the refusal as a refused `run-start`; the error to throw. */
  audited(): Promise<unknown> {
    return auditRefusal(this.realScope, "run-start", this.subject, this.refusal, {}, this.appendOptions);
  }
}

export function baseOf(
  plan: DispatchPlan,
  handle: string,
  startedAt: string,
  options: { readonly delivery?: DeliverySection },
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

export async function openRun(
  scope: string,
  plan: DispatchPlan,
  options: OpenOptions,
  held: ResourceStack,
): Promise<OpenRun> {
  const appendOptions = options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs };
  const clock = createStampClock();
  const handle = newHandle();
  const realScope = resolveScope(scope);
  try {
    // Again here: a plan resolved without `exec` may still be handed to this function.
    privilegeGate({ capture: plan.composition.key, privileged: plan.privileged, euid: options.euid ?? plan.euid });
  } catch (error) {
    throw new StartRefused(realScope, { job: plan.job, resolution: plan.resolution }, error, appendOptions);
  }
  // The credential values and profile patterns were validated at dispatch and prepare; a refusal here still starts
  // nothing.
  const redactor = runRedactor(plan);
  const { dir, logFd } = createRunDir(realScope, handle);
  const runDir = held.defer(() => rmSync(dir, { recursive: true, force: true }));
  const logHold = held.defer(() => closeSync(logFd));
  let control: RunControl;
  try {
    control = await recordRunStart({ realScope, handle, dir, clock, appendOptions }, plan, options);
  } catch (error) {
    const subject = { handle, job: plan.job, resolution: plan.resolution };
    throw new StartRefused(realScope, subject, error, appendOptions);
  }
  // The run-start entry names the run: it is never removed from here on.
  runDir.dismiss();
  return { realScope, handle, dir, logFd, logHold, control, redactor, clock, appendOptions };
}

/** `control.json`, the run-start entry, then `control.json` naming the entry. */
async function recordRunStart(
  run: Pick<OpenRun, "realScope" | "handle" | "dir" | "clock" | "appendOptions">,
  plan: DispatchPlan,
  options: OpenOptions,
): Promise<RunControl> {
  const { realScope, handle, dir, appendOptions } = run;
  const self = { pid: process.pid, start: processStart(process.pid)! };
  const control: RunControl = {
    format: "oats.run-control.v1",
    dispatcher: self,
    child: null,
    startAudit: null,
    base: baseOf(plan, handle, run.clock.next(), options),
  };
  writeControl(dir, control);
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
  const started: RunControl = { ...control, startAudit: { seq: entry.seq, hash: entry.hash } };
  writeControl(dir, started);
  return started;
}
