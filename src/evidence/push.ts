import { readdirSync } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode, bytesDigest } from "../core/index.js";
import { readRegularFile, resolveScope, DEFAULT_LOCK_WAIT_MS, withFileLock } from "../retention/index.js";
import {
  deliveryMarks,
  ensureOutbox,
  markDelivered,
  outboxEntries,
  outboxRoot,
  readEntryFiles,
  type DeliveryMark,
  type OutboxEntry,
} from "./outbox.js";
import { transportFor, type EvidenceTransport, type ProbeResult } from "./transport.js";
import { enqueueSealedRuns } from "./after-seal.js";

/**
 * Delivery of the outbox to one far side, in seq order. For each entry the
 * destination has no mark for: read the queued files (each checked against
 * its queued digest), put them, read them back from the far side, compare
 * the digest of every file read back (and that nothing is missing or extra),
 * and only then write the mark. The first failure stops the push, so a later
 * entry is never delivered before an earlier one, and nothing is marked that
 * was not read back.
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

/** Compare what the far side returned with what was queued; a typed refusal naming every difference. */
export function checkReadBack(entry: OutboxEntry, to: string, back: Map<string, Buffer> | null): void {
  const differences: string[] = [];
  for (const file of entry.files) {
    const bytes = back?.get(file.name);
    if (bytes === undefined) differences.push(`${file.name}: missing`);
    else if (bytesDigest(bytes) !== file.digest)
      differences.push(
        `${file.name}: read back ${bytesDigest(bytes)} (${bytes.length} bytes), ` +
          `queued ${file.digest} (${file.bytes} bytes)`,
      );
  }
  for (const name of back?.keys() ?? [])
    if (!entry.files.some((file) => file.name === name)) differences.push(`${name}: unexpected`);
  if (differences.length > 0) {
    throw new OatsError(
      "integrity-mismatch",
      `run ${entry.runId} (outbox seq ${entry.seq}) did not read back intact ` +
        `from ${to}: ${differences.join("; ")}; it stays queued`,
      {
        to,
        seq: entry.seq,
        runId: entry.runId,
        differences,
        reason: "read-back-mismatch",
      },
    );
  }
}

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
    };
  }
  const probe = await transport.probe();
  if (probe.state !== "reachable") throw unreachable(transport, probe);
  ensureOutbox(realScope);
  // Sealed runs the outbox missed (a dispatcher killed after sealing, `oats run seal`) go in first.
  const swept = await enqueueSealedRuns(realScope);
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
      const entries = outboxEntries(realScope);
      const marks = deliveryMarks(realScope, to);
      const delivered: { seq: number; runId: string }[] = [];
      let already = 0;
      for (const entry of entries) {
        if (marks.has(entry.seq)) {
          already += 1;
          continue;
        }
        const files = readEntryFiles(realScope, entry);
        await transport.put({ runId: entry.runId, seq: entry.seq, files });
        checkReadBack(entry, to, await transport.readBack(entry.runId));
        stillHeld();
        marks.set(entry.seq, markDelivered(realScope, entry, to));
        delivered.push({ seq: entry.seq, runId: entry.runId });
      }
      return {
        to,
        delivered,
        alreadyDelivered: already,
        pending: pendingOf(entries, marks),
        dryRun: false,
        queuedNow: swept.queued,
        notQueued: swept.skipped,
      };
    },
  );
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
