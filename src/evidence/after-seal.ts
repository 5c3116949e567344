import { OatsError, isOatsError } from "../core/index.js";
import { resolveScope } from "../retention/index.js";
import { enqueueSealedRun, outboxEntries } from "./outbox.js";
import { pushEvidence } from "./push.js";
import { runHex } from "./run-id.js";
import { listHandles } from "./run-store.js";

/**
 * What happens to a run once it is sealed: it is queued in the outbox, and
 * when dispatch found the far side reachable (posture `delivered-later`) it
 * is pushed at once. A failed push leaves it queued (`oats push` delivers
 * it later) and is reported as an error for the run's warnings; the run
 * stays sealed either way.
 */
export interface SealedEvidence {
  readonly posture: "delivered-later" | "buffered" | "none";
  readonly to: string | null;
  readonly allowSameFilesystem?: boolean;
}

export async function afterRunSealed(
  scope: string,
  handle: string,
  runId: string,
  evidence: SealedEvidence | null,
): Promise<void> {
  const { entry } = await enqueueSealedRun(scope, { handle, runId });
  if (evidence?.posture !== "delivered-later" || evidence.to === null) return;
  try {
    await pushEvidence(scope, { to: evidence.to, allowSameFilesystem: evidence.allowSameFilesystem === true });
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new OatsError(
      "internal-error",
      `run ${runId} is queued (outbox seq ${entry.seq}) but was not delivered ` +
        `to ${evidence.to}: ${reason}; \`oats push --to ${evidence.to}\` ` +
        `delivers it`,
      {
        runId,
        seq: entry.seq,
        to: evidence.to,
        ...(isOatsError(error) ? { cause: error.code } : {}),
      },
    );
  }
}

/**
 * Queue every sealed run the outbox does not hold yet (a dispatcher killed
 * between seal and enqueue, a run sealed INTERRUPTED by `oats run seal`), in
 * handle order (handles start with their UTC start time). Unsealed runs are
 * skipped; a sealed run that cannot be queued (damaged) is reported, not
 * queued, and does not stop the others.
 */
export async function enqueueSealedRuns(
  scope: string,
): Promise<{ queued: string[]; skipped: { handle: string; code: string; reason: string }[] }> {
  const realScope = resolveScope(scope);
  const held = new Set(outboxEntries(realScope).map((entry) => entry.handle));
  const queued: string[] = [];
  const skipped: { handle: string; code: string; reason: string }[] = [];
  for (const handle of listHandles(realScope)) {
    if (held.has(handle)) continue;
    try {
      const { entry, queued: fresh } = await enqueueSealedRun(realScope, handle);
      if (fresh) queued.push(`${handle} ${runHex(entry.runId)}`);
    } catch (error) {
      if (isOatsError(error) && error.details["reason"] === "run-unsealed") continue;
      skipped.push({
        handle,
        code: isOatsError(error) ? error.code : "internal-error",
        reason: error instanceof Error ? error.message : String(error),
      });
    }
  }
  return { queued, skipped };
}
