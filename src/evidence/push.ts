import { readdirSync } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode, isOatsError } from "../core/index.js";
import { readRegularFile, resolveScope, DEFAULT_LOCK_WAIT_MS, withFileLock } from "../retention/index.js";
import {
  deliveryMarks,
  ensureOutbox,
  markDelivered,
  outboxEntries,
  outboxRoot,
  type DeliveryMark,
  type OutboxEntry,
} from "./outbox.js";
import { EVIDENCE_FILES, transportFor, type EvidenceTransport, type ProbeResult } from "./transport.js";
import { openEntryFiles, type OpenEntry } from "./outbox-open.js";
import { deliverEntry } from "./read-back.js";
import { enqueueSealedRuns } from "./after-seal.js";
import { readAnchoredAudit, type AnchoredAudit } from "./anchored-audit.js";
import { checkDeliverable } from "./deliverable.js";
import { enqueueSealedRun } from "./outbox.js";
import { readRecord, runsRoot } from "./run-store.js";

/**
 * Delivery of the outbox to one far side, in seq order. For each entry the
 * destination has no mark for: open the queued files (outbox-open.ts: each
 * checked against its queued digest, the log hashed as it streams and held
 * open) and hold them to the sealed run they claim to be (deliverable.ts:
 * the anchored audit log, the private start record, the run directory), put
 * them, read them back from the far side as they stream, compare the digest
 * of every file read back (and that nothing is missing or extra;
 * read-back.ts), and only then write the mark. An entry that is not a sealed run of this
 * scope is refused (`refused` in the result), never delivered or marked,
 * and the sealed run of its handle is queued anew. The first failure of the
 * far side stops the push, so a later entry is never delivered before an
 * earlier one, and nothing is marked that was not read back.
 *
 * A push killed anywhere resumes: an entry put but not marked is put again,
 * which the far side takes idempotently (same bytes), then read back and
 * marked. One push at a time per outbox (a lock); a second push with
 * nothing new sends nothing.
 */

export interface PushOptions {
  /** `dir:/abs/path`, `oci://...`, or a transport (tests, other callers). */
  readonly to: string | EvidenceTransport;
  /** A share on the same filesystem as the scope counts as reachable. */
  readonly allowSameFilesystem?: boolean;
  /** Plain HTTP to an oci:// registry (loopback only). */
  readonly insecure?: boolean;
  /** List what would be sent; touch nothing on the far side. */
  readonly dryRun?: boolean;
  readonly lockWaitMs?: number;
}

export interface PushResult {
  readonly to: string;
  readonly delivered: readonly { seq: number; runId: string }[];
  /** Entries this destination had already read back. */
  readonly alreadyDelivered: number;
  /** Entries still not delivered to this destination after the push (the dry run's list). */
  readonly pending: readonly { seq: number; runId: string }[];
  readonly dryRun: boolean;
  /** Sealed runs this push queued first (`<handle> <run hex>`): the outbox had missed them. */
  readonly queuedNow: readonly string[];
  /** Sealed runs that could not be queued (damaged): reported, not delivered. */
  readonly notQueued: readonly { handle: string; code: string; reason: string }[];
  /** Entries that are not the sealed run they claim to be (deliverable.ts): never delivered, never marked. */
  readonly refused: readonly RefusedEntry[];
}

export interface RefusedEntry {
  readonly seq: number;
  readonly runId: string;
  readonly handle: string;
  readonly code: string;
  readonly reason: string;
  readonly message: string;
}

export function resolveTransport(
  scope: string,
  to: string | EvidenceTransport,
  allowSameFilesystem = false,
  insecure = false,
): EvidenceTransport {
  return typeof to === "string"
    ? transportFor(to, { localPath: outboxRoot(scope), allowSameFilesystem, insecure })
    : to;
}

/**
 * The far side cannot be reached. A registry's outage is `registry-refused` with the registry client's reason
 * (`unreachable`, `tls`, `unauthorized`, ...), the code `oats push` and `oats pull` of artifacts give the same outage;
 * a share that is not there is `artifact-not-found`, reason `far-side-unreachable`.
 */
function unreachable(transport: EvidenceTransport, probe: ProbeResult): OatsError {
  const reason = probe.reason;
  if (probe.refusal?.code === "registry-refused") {
    return new OatsError(
      "registry-refused",
      `the evidence far side ${transport.describe()} cannot be reached (${reason ?? "unknown"}): ` +
        `${probe.refusal.message}; everything stays queued`,
      { ...probe.refusal.details, to: transport.describe(), farSide: "unreachable", probe: reason },
      { cause: probe.refusal },
    );
  }
  return new OatsError(
    "artifact-not-found",
    `the evidence far side ${transport.describe()} cannot be reached (${reason ?? "unknown"}); everything stays queued`,
    {
      to: transport.describe(),
      reason: "far-side-unreachable",
      probe: reason,
    },
  );
}

/**
 * Deliver the outbox to one far side in seq order (src/evidence/push.ts): each run put, read back, compared and only
 * then marked. An unreachable far side is `registry-refused` (oci://) or `artifact-not-found` (reason
 * `far-side-unreachable`), everything staying queued; a read-back that differs is `integrity-mismatch`.
 * @returns what was delivered, already delivered, still pending and refused
 */
export async function pushEvidence(scope: string, options: PushOptions): Promise<PushResult> {
  const realScope = resolveScope(scope);
  const transport = resolveTransport(
    realScope,
    options.to,
    options.allowSameFilesystem === true,
    options.insecure === true,
  );
  const to = transport.describe();
  const pendingOf = (entries: OutboxEntry[], marks: Map<number, DeliveryMark>) =>
    entries.filter((entry) => !marks.has(entry.seq)).map((entry) => ({ seq: entry.seq, runId: entry.runId }));
  if (options.dryRun === true) {
    const entries = outboxEntries(realScope);
    const marks = deliveryMarks(realScope, to);
    return {
      to,
      delivered: [],
      alreadyDelivered: entries.length - pendingOf(entries, marks).length,
      pending: pendingOf(entries, marks),
      dryRun: true,
      queuedNow: [],
      notQueued: [],
      refused: [],
    };
  }
  const probe = await transport.probe();
  if (probe.state !== "reachable") throw unreachable(transport, probe);
  ensureOutbox(realScope);
  return withFileLock(
    {
      target: join(outboxRoot(realScope), "entries"),
      lockfilePath: join(outboxRoot(realScope), "push.lock"),
      waitMs: options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS,
      minTimeout: 50,
      maxTimeout: 500,
      factor: 1.5,
      failure: (error) =>
        new OatsError(
          "busy",
          `cannot hold the outbox push lock: ${error instanceof Error ? error.message : String(error)}`,
          { to },
        ),
    },
    async (stillHeld) => {
      // What every entry is held to: the audit log as this account verified it. When it cannot be, nothing goes.
      const audit = readAnchoredAudit(realScope);
      // Sealed runs the outbox missed (a dispatcher killed after sealing, `oats run seal`, an entry that names the
      // run's handle but carries another run) go in first.
      const swept = await enqueueSealedRuns(realScope, { audit });
      const queue = outboxEntries(realScope);
      const marks = deliveryMarks(realScope, to);
      const delivered: { seq: number; runId: string }[] = [];
      const refused: RefusedEntry[] = [];
      const refusedSeqs = new Set<number>();
      const requeued = new Set<string>();
      let already = 0;
      for (let index = 0; index < queue.length; index += 1) {
        const entry = queue[index]!;
        if (marks.has(entry.seq)) {
          already += 1;
          continue;
        }
        let opened: OpenEntry | null = null;
        try {
          opened = await openEntryFiles(realScope, entry);
          checkEntry(realScope, audit, entry, opened);
        } catch (error) {
          await opened?.close();
          if (!isOatsError(error) || (error.kind !== "mismatch" && error.kind !== "invalid")) throw error;
          // Never delivered, never marked; reported. The run it stands for may still be in the scope: queued anew.
          refused.push({
            seq: entry.seq,
            runId: entry.runId,
            handle: entry.handle,
            code: error.code,
            reason: typeof error.details["reason"] === "string" ? error.details["reason"] : error.code,
            message: error.message,
          });
          refusedSeqs.add(entry.seq);
          // Next in line, so that runs still go out in their order.
          const again = requeued.has(entry.handle)
            ? null
            : await queueAgain(realScope, audit, entry.handle, queue, index, marks, refusedSeqs, swept);
          requeued.add(entry.handle);
          if (again !== null) queue.splice(index + 1, 0, again);
          continue;
        }
        try {
          await deliverEntry(transport, entry, opened!);
        } finally {
          await opened!.close();
        }
        stillHeld();
        marks.set(entry.seq, markDelivered(realScope, entry, to));
        delivered.push({ seq: entry.seq, runId: entry.runId });
      }
      return {
        to,
        delivered,
        alreadyDelivered: already,
        pending: pendingOf(queue, marks),
        dryRun: false,
        queuedNow: swept.queued,
        notQueued: swept.skipped,
        refused,
      };
    },
  );
}

/** An entry held to the sealed run it claims to be (deliverable.ts), its files as opened for delivery. */
function checkEntry(realScope: string, audit: AnchoredAudit, entry: OutboxEntry, opened: OpenEntry): void {
  const log = opened.files.get("log");
  const names = entry.files.map((file) => file.name).sort();
  if (names.length !== EVIDENCE_FILES.length || names.some((name, at) => name !== [...EVIDENCE_FILES].sort()[at]))
    throw new OatsError("integrity-mismatch", `outbox entry ${entry.seq} does not hold exactly the evidence files`, {
      seq: entry.seq,
      runId: entry.runId,
      reason: "evidence-foreign",
      check: "files",
      files: names,
    });
  checkDeliverable(
    realScope,
    audit,
    {
      handle: entry.handle,
      runId: entry.runId,
      recordBytes: opened.recordBytes,
      log: log === undefined ? null : { digest: log.digest, bytes: log.size },
      auditBytes: opened.auditBytes,
    },
    `outbox entry ${entry.seq}`,
    { runDirectory: true },
  );
}

/**
 * After an entry was refused: the entry to deliver next in its place, if
 * the scope has a sealed run of its handle not yet delivered to this
 * destination: the entry already waiting for it further on (taken out of
 * the queue), or a new one (the refused entry never counts as its). A forged
 * or damaged entry so cannot keep the real run from the far side, nor put
 * later runs before it.
 */
async function queueAgain(
  realScope: string,
  audit: AnchoredAudit,
  handle: string,
  queue: OutboxEntry[],
  index: number,
  marks: ReadonlyMap<number, DeliveryMark>,
  refusedSeqs: ReadonlySet<number>,
  swept: { skipped: { handle: string; code: string; reason: string }[] },
): Promise<OutboxEntry | null> {
  let runId: string | null;
  try {
    runId = readRecord(join(runsRoot(realScope), handle))?.id ?? null;
  } catch {
    return null; // damaged, or no run directory: nothing in the scope to deliver instead
  }
  if (runId === null) return null;
  if (queue.some((other) => other.runId === runId && marks.has(other.seq))) return null;
  const waiting = queue.findIndex((other, at) => at > index && other.runId === runId && !refusedSeqs.has(other.seq));
  // Already waiting further on (the sweep queued it): it comes out of the queue to be delivered next.
  if (waiting > index) return queue.splice(waiting, 1)[0]!;
  try {
    const { entry, queued } = await enqueueSealedRun(realScope, handle, { audit, skip: refusedSeqs });
    return queued ? entry : null;
  } catch (error) {
    swept.skipped.push({
      handle,
      code: isOatsError(error) ? error.code : "internal-error",
      reason: error instanceof Error ? error.message : String(error),
    });
    return null;
  }
}

export interface OutboxListing {
  readonly seq: number;
  readonly runId: string;
  readonly handle: string;
  readonly enqueuedAt: string;
  readonly bytes: number;
  readonly delivered: readonly { to: string; at: string }[];
}

/**
 * Every queued entry in order with the destinations that read it back. With
 * `to`, only that destination's marks are consulted (the others are not
 * known by name: marks are kept per destination key).
 */
export function listOutbox(
  scope: string,
  options: { to?: string | EvidenceTransport; allowSameFilesystem?: boolean } = {},
): OutboxListing[] {
  const realScope = resolveScope(scope);
  const entries = outboxEntries(realScope);
  const marksByTo: Map<number, DeliveryMark>[] = [];
  if (options.to !== undefined)
    marksByTo.push(
      deliveryMarks(
        realScope,
        resolveTransport(realScope, options.to, options.allowSameFilesystem === true).describe(),
      ),
    );
  else for (const to of knownDestinations(realScope)) marksByTo.push(deliveryMarks(realScope, to));
  return entries.map((entry) => ({
    seq: entry.seq,
    runId: entry.runId,
    handle: entry.handle,
    enqueuedAt: entry.enqueuedAt,
    bytes: entry.files.reduce((sum, file) => sum + file.bytes, 0),
    delivered: marksByTo.flatMap((marks) => {
      const mark = marks.get(entry.seq);
      return mark && mark.runId === entry.runId ? [{ to: mark.to, at: mark.at }] : [];
    }),
  }));
}

/** The destinations that hold at least one mark (read from the marks themselves). */
function knownDestinations(scope: string): string[] {
  return [...new Set(markDestinations(scope))].sort();
}

function markDestinations(scope: string): string[] {
  const root = join(outboxRoot(scope), "delivered");
  let keys: string[];
  try {
    keys = readdirSync(root);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return [];
    throw error;
  }
  const found: string[] = [];
  for (const key of keys) {
    if (!/^[0-9a-f]{32}$/.test(key)) continue;
    const first = readdirSync(join(root, key)).find((name) => name.endsWith(".json") && !name.startsWith("."));
    if (first === undefined) continue;
    try {
      const mark = JSON.parse(
        readRegularFile(join(root, key, first), {
          limit: 1 << 20,
          refuse: (failure) => new OatsError("invalid-artifact-store", failure),
        }).toString("utf8"),
      ) as { to?: unknown };
      if (typeof mark.to === "string") found.push(mark.to);
    } catch {
      // Not a mark: skipped, as deliveryMarks skips it.
    }
  }
  return found;
}

/** What the far side holds for a run, read from the far side only (null when nothing). */
export async function readDelivered(
  to: string | EvidenceTransport,
  runId: string,
): Promise<Map<string, Buffer> | null> {
  const transport = typeof to === "string" ? transportFor(to, { allowSameFilesystem: true }) : to;
  return transport.readBack(runId);
}
