import type { LeaseHold } from "../retention/index.js";

/**
 * The publish lease an exec'd dispatch plan carries (docs/design/lifecycle.md,
 * "What a dispatch holds"). resolveQueuedCapture takes it before it reads the
 * job; a prepare-on-tick tick writes a record and a spec blob that no root
 * reaches until a run names them, so the lease stays with the plan until the
 * run's control file names its resolution (the evidence layer releases it
 * then), or until the plan is discarded. Kept beside the plan, keyed by its
 * `run` object, so the plan itself stays plain data.
 */
const holds = new WeakMap<object, LeaseHold>();

export function attachDispatchHold(run: object, hold: LeaseHold): void {
  holds.set(run, hold);
}

/** Let the plan's lease go, if it still has one (idempotent). */
export async function releaseDispatchHold(plan: { readonly run: object }): Promise<void> {
  const hold = holds.get(plan.run);
  if (hold === undefined) return;
  holds.delete(plan.run);
  await hold.release();
}
