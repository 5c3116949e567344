import { join } from "node:path";
import { OatsError, isOatsError } from "../core/index.js";
import { resolveScope } from "../retention/index.js";
import { enqueueSealedRun, outboxEntries } from "./outbox.js";
import { pushEvidence } from "./push.js";
import { runHex } from "./run-id.js";
import { listHandles, readRecord, runsRoot } from "./run-store.js";
import { readAnchoredAudit, type AnchoredAudit } from "./anchored-audit.js";

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
 * handle order (handles start with their UTC start time). A run is held when
 * an entry carries its run id: an entry that only names its handle (another
 * run's, or one rebuilt by a writer of the scope) does not keep the sealed
 * run from being queued. Unsealed runs are skipped; a sealed run that cannot
 * be queued (damaged, or not anchored in the audit log) is reported, not
 * queued, and does not stop the others.
 */
export async function enqueueSealedRuns(
  scope: string,
  options: { readonly audit?: AnchoredAudit } = {},
): Promise<{ queued: string[]; skipped: { handle: string; code: string; reason: string }[] }> {
  const realScope = resolveScope(scope);
  const byHandle = new Map<string, Set<string>>();
  for (const entry of outboxEntries(realScope)) {
    const ids = byHandle.get(entry.handle) ?? new Set<string>();
    ids.add(entry.runId);
    byHandle.set(entry.handle, ids);
  }
  const queued: string[] = [];
  const skipped: { handle: string; code: string; reason: string }[] = [];
  let audit = options.audit;
  for (const handle of listHandles(realScope)) {
    const ids = byHandle.get(handle);
    if (ids !== undefined) {
      let sealedAs: string | null | undefined;
      try {
        sealedAs = readRecord(join(runsRoot(realScope), handle))?.id ?? null;
      } catch {
        sealedAs = undefined; // damaged: the enqueue below says how
      }
      if (sealedAs === null || (sealedAs !== undefined && ids.has(sealedAs))) continue;
    }
    try {
      audit ??= readAnchoredAudit(realScope);
      const { entry, queued: fresh } = await enqueueSealedRun(realScope, handle, { audit });
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
