import { linkSync, readdirSync, renameSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { OatsError, asStepError, errnoCode, canonicalJsonBytes } from "../core/index.js";
import { parseWith, readCanonicalJson, parseResolutionId, readRecordBytes } from "../resolution/index.js";
import {
  identifierSchema,
  ensureStoreAt,
  fsyncDirectory,
  inspectStoreAt,
  removeCreatedStore,
  resolveScope,
  readRegularFile,
  writeStagedFile,
  AGENTS_DIR,
  assertContained,
  withPublishLease,
} from "../retention/index.js";
import { audit, audited, privateDir, readPrivateFile, requireUsableState, writePrivateFile } from "../ledger/index.js";

/**
 * Queued work: `.agents/queue/<job>.json`, canonical JSON
 * `{schemaVersion: 1, job, resolution, recurrence: {policy, every?}, createdAt}`.
 *
 * A job names a capture resolution by id, never a command string, a lock or
 * an instance home: it keeps working after all of those are deleted.
 * `recurrence.policy` is `capture` (the default: every dispatch runs the
 * stored resolution) or `prepare-on-tick` (every dispatch re-prepares from
 * the spec the record pinned, explicitly, and audits it); `every` is a label
 * for the scheduler (e.g. `1h`), not interpreted here.
 *
 * A job is published like a record (staged, fsync'd, link()ed, never
 * replaced); re-queueing the same job id with other content is refused
 * unless `replace` is asked for, which renames over it atomically.
 *
 * Audit before effect: the `queue` entry (`ok`, or `kept` for an identical
 * re-queue) is appended after the job is staged and before it is linked or
 * renamed into place; when the audit log cannot take it, the staged file is
 * removed and the add is refused with `audit-unavailable`, so no job the
 * log does not show ever becomes dispatchable.
 *
 * What this account queued, it also keeps in its private state, outside the
 * scope (`<scopeStateDir>/queue/<job>.json`, the job's exact bytes), written
 * after the audit entry and before the job is linked (and on a `kept`
 * re-queue). Dispatch takes a job only when that copy holds the same bytes
 * (`requireQueuedHere`): a job a writer of the scope planted or re-pointed
 * is refused (`integrity-mismatch`, reason `job-unrecorded`), and re-queueing
 * it with `queue add` is the remedy.
 */

export const QUEUE_DIR = [AGENTS_DIR, "queue"] as const;
const MAX_JOB_BYTES = 64 * 1024;

export const RECURRENCE_POLICIES = ["capture", "prepare-on-tick"] as const;
export type RecurrencePolicy = (typeof RECURRENCE_POLICIES)[number];

const jobSchema = z
  .object({
    schemaVersion: z.literal(1),
    job: identifierSchema,
    resolution: z.string().regex(/^sha256-[0-9a-f]{64}$/, "must be a resolution id sha256-<64 hex>"),
    recurrence: z
      .object({
        policy: z.enum(RECURRENCE_POLICIES),
        every: z.string().min(1).max(64).optional(),
      })
      .strict(),
    createdAt: z.string().datetime({ offset: false }),
  })
  .strict();

export type QueuedJob = z.infer<typeof jobSchema>;

export interface AddJobRequest {
  readonly job: string;
  readonly resolution: string;
  readonly recurrence?: { readonly policy?: RecurrencePolicy; readonly every?: string };
}

export interface AddJobOptions {
  /** Replace an existing job of the same id (atomically). Default: refuse. */
  readonly replace?: boolean;
}

export function jobPath(scope: string, job: unknown): string {
  const name = identifierSchema.safeParse(job);
  if (!name.success)
    throw new OatsError(
      "invalid-input",
      `invalid job id ${JSON.stringify(job) ?? String(job)}: must match ^[a-z0-9][a-z0-9._-]*$`,
      { job },
    );
  const root = join(scope, ...QUEUE_DIR);
  return assertContained(root, join(root, `${name.data}.json`), `job ${name.data}`);
}

/** Queue a capture resolution under a job id; the record must exist, check and be a capture. */
export async function addJob(
  scope: string,
  request: AddJobRequest,
  options: AddJobOptions = {},
): Promise<{ job: QueuedJob; path: string; status: "written" | "kept" | "replaced" }> {
  const realScope = resolveScope(scope);
  // Leased: the record read here must still be there when the job that names it is linked.
  return withPublishLease(realScope, () =>
    audited(realScope, "queue", { job: String(request?.job) }, async () => {
      const job = parseWith(
        jobSchema,
        {
          schemaVersion: 1,
          job: request.job,
          resolution: parseResolutionId(request.resolution),
          recurrence: {
            policy: request.recurrence?.policy ?? "capture",
            ...(request.recurrence?.every === undefined ? {} : { every: request.recurrence.every }),
          },
          createdAt: new Date().toISOString(),
        },
        "job",
      );
      const path = jobPath(realScope, job.job);
      const { record } = readRecordBytes(realScope, job.resolution);
      if (record.kind !== "capture") {
        throw new OatsError(
          "invalid-input",
          `resolution ${job.resolution} is an ${record.kind} record; only a capture can be queued`,
          { resolution: job.resolution, kind: record.kind },
        );
      }
      inspectStoreAt(realScope, QUEUE_DIR);
      const existing = readJobIfPresent(realScope, job.job);
      if (existing && !options.replace) {
        if (
          existing.resolution === job.resolution &&
          existing.recurrence.policy === job.recurrence.policy &&
          existing.recurrence.every === job.recurrence.every
        ) {
          // Re-queueing is a decision too: audited, and refused (audit-unavailable) when it cannot be.
          await audit(realScope, {
            action: "queue",
            subject: { job: job.job, resolution: job.resolution },
            outcome: "kept",
            details: { recurrence: { ...existing.recurrence } },
          });
          recordQueuedHere(realScope, existing);
          return { job: existing, path, status: "kept" as const };
        }
        throw new OatsError(
          "invalid-input",
          `job ${job.job} is already queued for resolution ${existing.resolution}; pass replace to re-point it`,
          { job: job.job, queued: existing.resolution, requested: job.resolution, reason: "job-exists" },
        );
      }
      const created = ensureStoreAt(realScope, QUEUE_DIR);
      const dir = join(realScope, ...QUEUE_DIR);
      let staged: string;
      try {
        staged = writeStagedFile(dir, ".job", canonicalJsonBytes(job));
      } catch (error) {
        removeCreatedStore(created, dir);
        throw asStepError("stage", error, { path });
      }
      // Audit before effect: the job becomes visible to dispatch only after its entry is durable.
      // A staged (dot-named) file is never listed or dispatched, so a refused audit leaves nothing dispatchable.
      try {
        await audit(realScope, {
          action: "queue",
          subject: { job: job.job, resolution: job.resolution },
          outcome: "ok",
          details: { recurrence: { ...job.recurrence }, ...(existing ? { replaced: existing.resolution } : {}) },
        });
      } catch (error) {
        unlinkSync(staged);
        removeCreatedStore(created, dir);
        throw error;
      }
      try {
        recordQueuedHere(realScope, job);
      } catch (error) {
        unlinkSync(staged);
        removeCreatedStore(created, dir);
        throw error;
      }
      try {
        if (existing) renameSync(staged, path);
        else linkSync(staged, path);
      } catch (error) {
        unlinkSync(staged);
        // The ok entry above is then followed by this refusal's entry (audited), so the log still tells what happened.
        if (errnoCode(error) === "EEXIST")
          throw new OatsError("busy", `job ${job.job} was queued by another process at the same moment`, {
            job: job.job,
            path,
          });
        removeCreatedStore(created, dir);
        throw asStepError("publish", error, { path });
      }
      if (!existing) unlinkSync(staged);
      fsyncDirectory(dir);
      return { job, path, status: existing ? ("replaced" as const) : ("written" as const) };
    }),
  );
}

function readJobIfPresent(realScope: string, job: string): QueuedJob | null {
  try {
    return readJob(realScope, job);
  } catch (error) {
    if (error instanceof OatsError && error.code === "job-not-found") return null;
    throw error;
  }
}

/** Read a queued job: `job-not-found`, or `invalid-artifact-store` when the file is damaged. */
export function readJob(scope: string, job: string): QueuedJob {
  const realScope = resolveScope(scope);
  const path = jobPath(realScope, job);
  const notFound = () => new OatsError("job-not-found", `no job ${job} is queued in this scope`, { job, path });
  if (!inspectStoreAt(realScope, QUEUE_DIR).complete) throw notFound();
  const damaged = (why: string, details: Record<string, unknown> = {}) =>
    new OatsError("invalid-artifact-store", `queued job ${job} is damaged: ${why}`, { job, path, ...details });
  const bytes = readRegularFile(path, {
    limit: MAX_JOB_BYTES,
    refuse: (failure, details) => (failure === "missing" ? notFound() : damaged(failure, details)),
  });
  let value: unknown;
  try {
    value = readCanonicalJson(bytes, `job ${job}`);
  } catch (error) {
    throw damaged(error instanceof Error ? error.message : String(error));
  }
  const parsed = jobSchema.safeParse(value);
  if (!parsed.success || parsed.data.job !== job)
    throw damaged(
      parsed.success ? "its job id is not its file name" : (parsed.error.issues[0]?.message ?? "malformed"),
    );
  return parsed.data;
}

/** Every queued job, by id; damaged ones are reported, not skipped. */
export function listJobs(scope: string): Array<{ job: string; queued: QueuedJob | null; error: OatsError | null }> {
  const realScope = resolveScope(scope);
  if (!inspectStoreAt(realScope, QUEUE_DIR).complete) return [];
  return readdirSync(join(realScope, ...QUEUE_DIR))
    .filter((name) => name.endsWith(".json") && !name.startsWith("."))
    .map((name) => name.slice(0, -".json".length))
    .sort()
    .map((job) => {
      try {
        return { job, queued: readJob(realScope, job), error: null };
      } catch (error) {
        if (error instanceof OatsError) return { job, queued: null, error };
        throw error;
      }
    });
}

/** This account's private copy of the jobs it queued; null when its private state cannot be used. */
function privateQueueDir(realScope: string): string | null {
  return privateDir(realScope, "queue");
}

/** Keep `job`'s exact bytes in this account's private state: what makes it dispatchable here. */
function recordQueuedHere(realScope: string, job: QueuedJob): void {
  requireUsableState(realScope, `queue add of job ${job.job}`);
  const dir = privateQueueDir(realScope);
  const refuse = (why: string) =>
    new OatsError(
      "audit-unavailable",
      `job ${job.job} cannot be recorded in this account's private state (${why}); it is not queued`,
      { job: job.job, reason: "job-record-unwritable" },
    );
  if (dir === null) throw refuse("it is not a private directory of this account, or cannot be made");
  try {
    writePrivateFile(dir, `${job.job}.json`, canonicalJsonBytes(job));
  } catch (error) {
    throw refuse(error instanceof Error ? error.message : String(error));
  }
}

/**
 * A job as dispatch may take it: one this account queued, exactly as it
 * queued it (its private copy holds the same bytes). The queue is in the
 * scope; a writer of the scope can plant a job or re-point one at another
 * approved composition or recurrence, and nothing in the scope tells. A job
 * queued by another account is re-queued by this one (`queue add`, which
 * keeps an identical job) before this account dispatches it.
 */
export function requireQueuedHere(scope: string, job: QueuedJob): void {
  const realScope = resolveScope(scope);
  // A state another user can reach cannot say what this account queued: refused as approve and dispatch are.
  requireUsableState(realScope, `dispatch of job ${job.job}`);
  const dir = privateQueueDir(realScope);
  const bytes = dir === null ? null : readPrivateFile(join(dir, `${job.job}.json`), MAX_JOB_BYTES);
  if (bytes?.equals(canonicalJsonBytes(job))) return;
  throw new OatsError(
    "integrity-mismatch",
    `job ${job.job} is not one this account queued: ` +
      (dir === null
        ? "this account's private state cannot be used, so oats cannot tell"
        : bytes === null
          ? "this account's private state holds no record of it"
          : "this account queued it with other content") +
      `; nothing was dispatched. It names resolution ${job.resolution} (${job.recurrence.policy}): if that is ` +
      `meant, queue it again (oats queue add ${job.resolution} --job ${job.job}` +
      `${job.recurrence.policy === "capture" ? "" : ` --recurrence ${job.recurrence.policy}`}` +
      `${job.recurrence.every === undefined ? "" : ` --every ${job.recurrence.every}`})`,
    { job: job.job, resolution: job.resolution, reason: "job-unrecorded" },
  );
}
