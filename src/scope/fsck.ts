import { ERROR_KINDS, OatsError } from "../core/index.js";
import type { LogAnchors } from "../ledger/index.js";
import { fsck as fsckRevisions, fsckListed, listStore, type FsckOutcome, resolveScope } from "../retention/index.js";
import {
  FINDING_CLASSES,
  findingOf,
  guarded,
  mostSerious,
  notice,
  type Finding,
  type FindingClass,
} from "./findings.js";
import { checkChains } from "./fsck-chains.js";
import { checkLeases, checkPins, checkQuarantine, checkRunCopies, isRunCopy } from "./fsck-lifecycle.js";
import { checkLegacyModes } from "./fsck-modes.js";
import { checkLayer } from "./fsck-layer.js";
import { checkRuns } from "./fsck-runs.js";
import {
  checkBlobs,
  checkInstances,
  checkJobs,
  checkRecords,
  revisionKey,
  type RecordsPresent,
} from "./fsck-stores.js";

/**
 * `oats fsck`: everything the scope holds, checked the way its readers check
 * it, and reported; nothing is repaired, moved, removed or locked, and
 * nothing in the scope is written (a chain log is read, never appended to;
 * the cross-check records what it verified in the operator's private state,
 * as every reader of the logs does).
 *
 * Each held file of the shared layer is hashed once; a revision whose
 * manifest is anchored in the operator's private state is verified by its
 * structure against that manifest (retention's anchored-check.ts), and every
 * other revision is re-hashed once (retention's fsck); every other check
 * reads small files, so the whole scope costs little more than verifying its
 * distinct bytes (bench/sections/10-fsck.mjs, 28-store-bytes.mjs). A reference is checked for
 * presence, not re-verified: a damaged revision or blob is reported once,
 * under its own class.
 */

export interface ScopeFsckCounts {
  readonly revisions: number;
  /** Files of the shared file layer, each hashed once. */
  readonly heldFiles: number;
  readonly records: number;
  readonly blobs: number;
  readonly instances: number;
  readonly jobs: number;
  readonly pins: number;
  /** Trees repair moved into `.agents/quarantine/` (each one is also a notice). */
  readonly quarantine: number;
  /** Run directories under `.agents/runs/` (sealed ones verified). */
  readonly runs: number;
  /** Entries of the approvals ledger and of the audit log (up to the first broken link). */
  readonly approvals: number;
  readonly audit: number;
}

export interface ScopeFsckReport {
  readonly scope: string;
  /** No finding beyond notices. */
  readonly ok: boolean;
  /** The most serious finding (its code and kind decide the exit code), or null. */
  readonly worst: Finding | null;
  readonly exitCode: number;
  readonly counts: ScopeFsckCounts;
  /** Every class, each with its findings (possibly none), in FINDING_CLASSES order. */
  readonly classes: Record<FindingClass, Finding[]>;
  /** One outcome per revision, ok or damaged, as retention's fsck reports it. */
  readonly outcomes: FsckOutcome[];
  /** Whether a checkpoint of this account anchored the check of the approvals ledger and of the audit log. */
  readonly checkpoint: LogAnchors;
}

export interface ScopeFsckOptions {
  /** Called after each revision is verified. */
  readonly onArtifact?: (done: number, total: number) => void;
}

/**
 * Check everything the scope holds the way its readers check it (src/scope/fsck.ts), and report the findings by class;
 * nothing is repaired or written, and a problem is a finding, not a refusal.
 */
export async function fsckScope(scope: string, options: ScopeFsckOptions = {}): Promise<ScopeFsckReport> {
  const realScope = resolveScope(scope);
  // What is retained, by reference; the revisions themselves are verified below.
  const listingFindings: Finding[] = [];
  const listing = guarded(listingFindings, "revisions", "artifact stores", () => listStore(realScope));
  const revisions = new Set((listing?.revisions ?? []).map(revisionKey));

  // The shared file layer first: each held file hashed once, and each revision's structure walked, which verifies
  // a revision with an anchored manifest without its bytes (retention's checkSharedLayer); the others are re-hashed.
  // Both wait on file reads most of the time; the other checks are small reads and CPU work, so they run meanwhile
  // (they yield between records), each into its own list so the report's order is fixed.
  const revisionFindings: Finding[] = [];
  const storeFindings: Finding[] = [];
  const layerFindings: Finding[] = [];
  const checkRevisions = async () => {
    const layer = await checkLayer(realScope, listing?.revisions ?? [], layerFindings);
    // One listing: when it was refused, retention's fsck lists again and meets (and reports) the same refusal.
    const retention = await guardedAsync(revisionFindings, () =>
      listing
        ? fsckListed(realScope, listing, { onArtifact: options.onArtifact, anchored: layer.anchored })
        : fsckRevisions(realScope, { onArtifact: options.onArtifact }),
    );
    return { layer, retention };
  };
  const [{ layer, retention }, { counts, records, checkpoint }] = await Promise.all([
    checkRevisions(),
    checkStores(realScope, revisions, storeFindings),
  ]);
  const outcomes = retention?.outcomes ?? [];
  for (const outcome of outcomes) {
    if (outcome.ok || !outcome.error) continue;
    const { code, kind, message, details } = outcome.error;
    revisionFindings.push({
      class: "revisions",
      subject: `${outcome.kind} ${outcome.key} ${outcome.integrity.format}:${outcome.integrity.value}`,
      path: outcome.dir,
      code,
      kind,
      message,
      details,
    } as Finding);
  }
  await checkLegacyModes(outcomes, records, revisionFindings);
  // A run copy is staging too, but only a gone dispatcher's is a leftover.
  const staging = retention?.staging ?? [];
  for (const path of staging)
    if (!isRunCopy(realScope, path))
      revisionFindings.push(notice("staging", path, "left by an interrupted writer; `oats cleanup` removes it"));
  checkRunCopies(
    staging.filter((path) => isRunCopy(realScope, path)),
    revisionFindings,
  );
  for (const path of retention?.unexpected ?? [])
    revisionFindings.push(notice("unknown", path, "not written by oats; left alone"));
  for (const path of retention?.orphanManifests ?? [])
    revisionFindings.push(notice("manifests", path, "a revision manifest whose revision is not there; left alone"));

  const classes = Object.fromEntries(FINDING_CLASSES.map((cls) => [cls, [] as Finding[]])) as Record<
    FindingClass,
    Finding[]
  >;
  // The listing's refusal is the same one retention's fsck meets: report it once.
  const findings =
    retention === null
      ? [...revisionFindings, ...layerFindings, ...storeFindings]
      : [...listingFindings, ...revisionFindings, ...layerFindings, ...storeFindings];
  for (const finding of findings) classes[finding.class].push(finding);
  const worst = mostSerious(FINDING_CLASSES.flatMap((cls) => classes[cls]));
  return {
    scope: realScope,
    ok: worst === null,
    worst,
    exitCode: worst === null || worst.kind === "notice" ? 0 : ERROR_KINDS[worst.kind],
    counts: { revisions: outcomes.length, heldFiles: layer.held, ...counts },
    classes,
    outcomes,
    checkpoint,
  };
}

/** Everything but the revisions' bytes: blobs, records and their references, instance refs, jobs, pins, leases,
 * quarantine, the chain logs. */
async function checkStores(
  realScope: string,
  revisions: ReadonlySet<string>,
  findings: Finding[],
): Promise<{
  counts: Omit<ScopeFsckCounts, "revisions" | "heldFiles">;
  records: RecordsPresent;
  checkpoint: LogAnchors;
}> {
  await yieldToIo();
  const blobs = checkBlobs(realScope, findings);
  const records = await checkRecords(realScope, revisions, blobs.present, findings, yieldToIo);
  const instances = checkInstances(realScope, records.present, findings);
  const jobs = checkJobs(realScope, records.present, findings);
  const pins = checkPins(realScope, revisions, records.present, findings);
  checkLeases(realScope, findings);
  const quarantine = checkQuarantine(realScope, findings);
  await yieldToIo();
  const { approvals, audit, checkpoint } = checkChains(realScope, findings);
  const runs = checkRuns(realScope, records.present, findings);
  return {
    counts: {
      records: records.checked,
      blobs: blobs.checked,
      instances,
      jobs,
      pins,
      quarantine,
      runs,
      approvals,
      audit,
    },
    records: records.present,
    checkpoint,
  };
}

/** Let pending I/O callbacks (the revision verification's reads) run. */
function yieldToIo(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

async function guardedAsync<T>(findings: Finding[], body: () => Promise<T>): Promise<T | null> {
  try {
    return await body();
  } catch (error) {
    if (!(error instanceof OatsError) || error.kind === "internal") throw error;
    findings.push(findingOf(error, "revisions", "artifact stores", null));
    return null;
  }
}
