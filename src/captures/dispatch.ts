import { OatsError, isOatsError, bytesDigest } from "../core/index.js";
import {
  DEFAULT_LOCK_WAIT_MS,
  holdPublishLease,
  integrityText,
  resolveScope,
  verifyTrees,
  readBlob,
  type LeaseHold,
} from "../retention/index.js";
import { checkReadiness, referencedArtifacts, resolveEntrypointIn, readRecordBytes } from "../resolution/index.js";
import type { ResolutionRecord } from "../resolution/index.js";
import { latestApprovedFor, requireApproval, type ApprovalSubject } from "./approvals.js";
import {
  compositionChanges,
  compositionOf,
  compositionSubject,
  parseComposition,
  type CompositionSubject,
} from "./composition.js";
import { audit, auditRefusal } from "../ledger/index.js";
import {
  classificationGate,
  currentPrincipal,
  deriveLevel,
  effectiveClassification,
  classificationConfigOrigin,
  parseClassificationConfig,
  readClassificationConfigBytes,
  type ClassificationConfig,
  type Level,
} from "./classification.js";
import { captureSubject, prepareCapture } from "./prepare-capture.js";
import { guardSpecifier, launcher } from "./node-guard.js";
import { dispatchEnvironment } from "./dispatch-env.js";
import { readJob, requireQueuedHere } from "./queue.js";
import { attachDispatchHold } from "./dispatch-hold.js";
import { copyVerifiedTree, removeRunCopy, type RunCopy } from "./run-copy.js";
import type { EvidencePostureCheck, EvidencePostureResult } from "./posture.js";
import { currentEuid, privilegeGate } from "./privilege.js";
import { evidencePolicy, parseCaptureProfileBytes, type ProfileEvidencePolicy } from "./spec.js";
import { requireSignedApproval, type SignedApproval } from "./signed-approval.js";

export { discardDispatchPlan, runDispatchPlan } from "./dispatch-run.js";
export { releaseDispatchHold } from "./dispatch-hold.js";

/**
 * resolveQueuedCapture(scope, job): the dispatch plan of a queued capture,
 * or a typed refusal before anything runs. The checks run in this order and
 * every refusal is audited:
 *
 * 1. read the job and its record (bytes canonical, hashing to the id; a
 *    capture); a `prepare-on-tick` job first re-prepares from its pinned
 *    spec, audited, and goes on with the new record;
 * 2. readiness: only complete or reconstructed records (`resolution-incomplete`);
 * 3. full re-verification of every artifact the record references and of
 *    every blob it pins (no mtime shortcut). The executable tree is verified
 *    by copying it, hashed as it is read, into a private run directory
 *    (run-copy.ts); the entry point is resolved inside that copy, and the
 *    plan runs from it, so what runs is what was hashed;
 * 4. approval of the record's exact composition (composition.ts: executable
 *    digest, entry path, args, env, credential names, target, declared
 *    level, pinned config and profile), read from the ledger now, so a
 *    revocation reaches work already queued; a refusal names the fields in
 *    which the composition differs from the capture's latest approved one;
 * 5. classification: effective = strictest of declared, derived from the
 *    pinned config and derived from the current config (if present); a
 *    confidential capture needs a principal that both configs name sovereign;
 * 5b. with `exec`, the evidence posture (options.postureCheck, which the
 *    evidence layer provides: planQueuedRun in src/evidence/posture-check.ts): an
 *    unwritable outbox refuses every tier (`audit-unavailable`), and a
 *    configured far side that cannot be reached refuses confidential work
 *    (`classification-refused`); the plan carries it as `delivery`;
 * 5c. with `exec`, a dispatcher running as root (euid 0) needs a composition
 *    approved as privileged (privilege.ts);
 * 6. an audit entry for the dispatch, fsync'd; `audit-unavailable` otherwise.
 *
 * The environment of the plan holds the pinned non-secret env and only the
 * credential variables the record names, taken from `options.env` (default:
 * this process's environment) now, plus the Node guard appended to
 * NODE_OPTIONS (dispatch-env.ts). Every file a pinned loader variable names
 * is checked inside the run copy and rewritten to its place there
 * (loader-paths.ts), so the runtime reads verified bytes; a record whose
 * loader paths lie outside (prepared before the rule) is refused,
 * `invalid-input`. Nothing else from the caller leaks in. A
 * credential value that a run log could not mask (shorter than 4
 * characters, or with a line break or control character: redact.ts) is
 * refused (`invalid-input`, naming the variable, never the value).
 *
 * The plan carries what the pinned profile asks of the run (`evidence`: the
 * required evidence classes and redaction patterns), read from the pinned,
 * hash-checked blob whose digest the approval covers: nothing at run time
 * changes it.
 *
 * Every dispatch audit entry, allowed or refused, records the harness label
 * and whether it differs from the principal; a label that differs is also a
 * `harness-label-mismatch` security event, on both paths.
 *
 * A refusal after the copy was made removes it. A plan that is returned owns
 * its run copy: runDispatchPlan (dispatch-run.ts) removes it when the child
 * ends (unless asked to keep it), and a caller that does not run the plan
 * calls discardDispatchPlan.
 *
 * The whole dispatch holds a publish lease, taken before the job is read
 * (retention's lease protocol): a deleting gc waits for it, so nothing the
 * dispatch reads (the job's record, a prepare-on-tick tick's new record and
 * spec blob, which no root reaches yet) is collected under it. Without
 * `exec` it is let go when the plan is returned. An exec'd plan carries it
 * (dispatch-hold.ts) until the run's control file names the resolution
 * (the evidence layer calls releaseDispatchHold then) or the plan is
 * discarded: a plan that is neither run nor discarded keeps a deleting gc
 * of the scope waiting, in this process's lifetime.
 */

export interface DispatchOptions {
  /** A label the harness gives itself, recorded as telemetry; a label other than the principal is a security event. */
  readonly harness?: string;
  /** Where credential values come from (default: process.env). Only names the record references are read. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Recorded in the audit entry: the caller will run the plan. */
  readonly exec?: boolean;
  readonly lockWaitMs?: number;
  /**
   * Where run evidence goes (src/evidence/posture-check.ts): `to` (else
   * OATS_EVIDENCE_TO in `env`, else none). Checked only when `exec`: the
   * posture may refuse before anything runs.
   */
  readonly delivery?: { readonly to?: string | null; readonly allowSameFilesystem?: boolean };
  /**
   * The posture check an exec'd dispatch runs at step 5b. It probes the outbox
   * and the far side, which the evidence layer owns, so that layer passes it
   * in (planQueuedRun); an exec'd dispatch without one is refused (`usage`)
   * before anything is read.
   */
  readonly postureCheck?: EvidencePostureCheck;
  /** The effective uid the child would run as (default: this process's); uid 0 needs a privileged composition. */
  readonly euid?: number;
  /**
   * Fleet approval, opt-in: accept, instead of a local approval, an approval
   * of this exact composition signed by the key this scope trusts for
   * approvals under this name (signed-approval.ts).
   */
  readonly approvedBy?: string;
}

export interface DispatchPlan {
  readonly job: string;
  readonly resolution: string;
  readonly executable: {
    /** Absolute, inside the run copy (run.root). */
    readonly path: string;
    readonly args: readonly string[];
    /** What actually starts: the entry itself, or the current Node (with `--import <guard>`) for a non-executable
     * .js/.mjs/.cjs. */
    readonly command: string;
    readonly argv: readonly string[];
    readonly subject: ApprovalSubject;
  };
  /** The approved composition this dispatch runs under. */
  readonly composition: CompositionSubject;
  readonly env: Record<string, string>;
  readonly credentials: { readonly provided: readonly string[]; readonly missing: readonly string[] };
  readonly classification: {
    readonly declared: Level;
    readonly pinned: Level;
    readonly current: Level | null;
    readonly effective: Level;
  };
  readonly approval: {
    readonly seq: number;
    readonly hash: string;
    readonly operator: string;
    readonly at: string;
    readonly reason: string;
  };
  /** Set when the composition ran under a signed approval (`--approved-by`): whose, and which attestation. */
  readonly approvedBy?: SignedApproval["approvedBy"] | null;
  readonly verified: readonly ApprovalSubject[];
  readonly principal: string;
  readonly harness: string | null;
  /** Set when a prepare-on-tick job re-prepared: the resolution the job names. */
  readonly preparedFrom: string | null;
  /** Whether the approved composition lets the capture run as root. */
  readonly privileged: boolean;
  /** The effective uid this dispatch was resolved for (DispatchOptions.euid, else this process's); the runners check
   * it again. */
  readonly euid: number | null;
  /** From the pinned profile: the evidence classes a run must capture and the redaction patterns. */
  readonly evidence: ProfileEvidencePolicy;
  readonly audit: { readonly seq: number; readonly hash: string };
  /** The evidence posture checked at dispatch (exec only; null otherwise): what the sealed record's `delivery` says. */
  readonly delivery: (EvidencePostureResult & { readonly allowSameFilesystem: boolean }) | null;
  /** Where the plan runs: the private copy of the executable tree that was verified. */
  readonly run: {
    /** The private run directory (0700); removing it removes the copy. */
    readonly dir: string;
    /** The verified copy of the executable tree. */
    readonly root: string;
    /** The child's working directory: the copy's root. */
    readonly cwd: string;
    /** The `--import` specifier of the Node guard (node-guard.ts). */
    readonly guard: string;
  };
}

function readCaptureRecord(
  scope: string,
  id: string,
): { id: string; record: ResolutionRecord & { capture: NonNullable<ResolutionRecord["capture"]> } } {
  const read = readRecordBytes(scope, id);
  if (read.record.kind !== "capture" || read.record.capture === null) {
    throw new OatsError("invalid-resolution", `resolution ${read.id} is an ${read.record.kind} record, not a capture`, {
      resolution: read.id,
      kind: read.record.kind,
    });
  }
  return {
    id: read.id,
    record: read.record as ResolutionRecord & { capture: NonNullable<ResolutionRecord["capture"]> },
  };
}

/**
 * Parsed configs by the digest of their exact bytes. Parsing is a pure
 * function of the bytes, and the bytes are still read and hashed on every
 * dispatch, so a scheduler that dispatches repeatedly skips only the YAML
 * parse. Nothing outside this module sees these objects.
 */
const parsedConfigs = new Map<string, ClassificationConfig>();
const MAX_PARSED_CONFIGS = 64;

function parseConfigOnce(bytes: Buffer, origin: string): ClassificationConfig {
  const digest = bytesDigest(bytes);
  const cached = parsedConfigs.get(digest);
  if (cached) return cached;
  const config = parseClassificationConfig(bytes, origin);
  if (parsedConfigs.size >= MAX_PARSED_CONFIGS) parsedConfigs.delete(parsedConfigs.keys().next().value!);
  parsedConfigs.set(digest, config);
  return config;
}

/** The current config at the path the capture was prepared with: null when it is gone, refused when it is present but
 * unusable. */
function currentConfig(path: string): ClassificationConfig | null {
  try {
    return parseConfigOnce(readClassificationConfigBytes(path), classificationConfigOrigin(path));
  } catch (error) {
    if (isOatsError(error) && error.details["errno"] === "ENOENT") return null;
    throw new OatsError(
      "classification-refused",
      `the current classification config ${path} is present but unusable, so a ` +
        `tightening cannot be ruled out: ${(error as Error).message}`,
      {
        configPath: path,
        reason: "current-config-unusable",
      },
    );
  }
}

function sameArtifact(
  a: { kind: string; key: string; integrity: { format: string; value: string } },
  b: typeof a,
): boolean {
  return (
    a.kind === b.kind &&
    a.key === b.key &&
    a.integrity.format === b.integrity.format &&
    a.integrity.value === b.integrity.value
  );
}

/**
 * The approval of exactly this composition; on `approval-required`, the
 * refusal also names what changed since the capture's latest approved
 * composition (`details.changes`), so a prepare-on-tick spec edit or a
 * re-prepare with other args or env says what the approver would be asked.
 */
function requireCompositionApproval(
  scope: string,
  subject: CompositionSubject,
  composition: ReturnType<typeof compositionOf>,
) {
  try {
    return requireApproval(scope, subject);
  } catch (error) {
    if (!isOatsError(error) || error.code !== "approval-required") throw error;
    const approved = latestApprovedFor(scope, subject.kind, subject.key);
    if (approved?.composition === undefined) throw error;
    const changes = compositionChanges(
      parseComposition(approved.composition, `composition approved at seq ${approved.seq}`),
      composition,
    );
    throw new OatsError(
      "approval-required",
      `${error.message}; capture ${subject.key} differs from its approved ` +
        `composition (seq ${approved.seq}, ${approved.subject.integrity}) in ` +
        `${changes.join(", ")}`,
      { ...error.details, approvedComposition: { seq: approved.seq, integrity: approved.subject.integrity }, changes },
      { cause: error },
    );
  }
}

/**
 * The dispatch plan of a queued capture, or a typed refusal before anything runs, by the checks of
 * src/captures/dispatch.ts, every refusal audited: `resolution-incomplete`, `integrity-mismatch`, `approval-required`,
 * `classification-refused`, `audit-unavailable`, `invalid-input`, and `usage` (reason `no-posture-check`) for an exec'd
 * dispatch without a posture check.
 * @param jobId the queued job's id
 */
export async function resolveQueuedCapture(
  scope: string,
  jobId: string,
  options: DispatchOptions = {},
): Promise<DispatchPlan> {
  if (options.exec === true && options.postureCheck === undefined) {
    throw new OatsError(
      "usage",
      "an exec'd dispatch checks its evidence posture first: plan it with planQueuedRun (the evidence layer)",
      { reason: "no-posture-check" },
    );
  }
  const realScope = resolveScope(scope);
  const principal = currentPrincipal();
  const harness = options.harness ?? null;
  // Recorded in every dispatch entry, allowed or refused.
  const harnessDetails = { harness, harnessMismatch: harness !== null && harness !== principal };
  const appendOptions = options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs };
  const eventSubject: Record<string, string> = { job: String(jobId) };
  let eventWritten = false;
  const harnessEvent = async () => {
    if (!harnessDetails.harnessMismatch || eventWritten) return;
    await audit(
      realScope,
      {
        action: "security-event",
        subject: { ...eventSubject },
        outcome: "event",
        details: { event: "harness-label-mismatch", harness, principal },
      },
      appendOptions,
    );
    eventWritten = true;
  };
  let copy: RunCopy | null = null;
  let hold: LeaseHold | null = null;
  try {
    // Held from before the job is read until a root names what the run uses (see above).
    hold = await holdPublishLease(realScope, options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS);
    // 1. The job and its record.
    const job = readJob(realScope, jobId);
    eventSubject["job"] = job.job;
    requireQueuedHere(realScope, job);
    let { id, record } = readCaptureRecord(realScope, job.resolution);
    eventSubject["resolution"] = id;
    let preparedFrom: string | null = null;
    if (job.recurrence.policy === "prepare-on-tick") {
      const prepared = await prepareCapture(realScope, record.capture.spec.path, {
        auditDetails: { tick: job.job, from: id },
        ...(options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs }),
      });
      preparedFrom = id;
      ({ id, record } = readCaptureRecord(realScope, prepared.id));
      eventSubject["resolution"] = id;
    }
    const capture = record.capture;

    // 2. Readiness.
    checkReadiness(record);

    // 3. Everything re-verified, every time; the executable tree by copying
    // it, hashed as it is read, into the private run directory it runs from.
    const entrypoint = record.entrypoints[capture.entrypoint]!;
    const verified: ApprovalSubject[] = [];
    // The other trees are verified in worker lanes while this thread copies the executable one;
    // the refusal is the first a loop in record order would meet.
    const refs = referencedArtifacts(record);
    const isEntry = (ref: (typeof refs)[number]) => sameArtifact(ref, entrypoint.artifact);
    const copying = refs.some(isEntry) ? settleCopy(copyVerifiedTree(realScope, entrypoint.artifact)) : null;
    const checked = await verifyTrees(
      realScope,
      refs.filter((ref) => !isEntry(ref)),
      { callerBusy: copying !== null },
    );
    const copied = await copying;
    if (copied?.ok) copy = copied.value;
    let next = 0;
    for (const ref of refs) {
      const outcome: { ok: boolean; error?: unknown } = isEntry(ref) ? copied! : checked[next++]!;
      if (!outcome.ok) throw outcome.error;
      verified.push({ kind: ref.kind, key: ref.key, integrity: integrityText(ref.integrity) });
    }
    const pinnedConfig = parseConfigOnce(
      readBlob(realScope, capture.classification.config),
      `pinned classification config ${capture.classification.config}`,
    );
    const profile =
      capture.profile === null
        ? null
        : parseCaptureProfileBytes(readBlob(realScope, capture.profile), `pinned capture profile ${capture.profile}`);
    readBlob(realScope, capture.spec.blob);
    if (copy === null) copy = await copyVerifiedTree(realScope, entrypoint.artifact);
    const runCopy = copy;
    const path = resolveEntrypointIn(runCopy.root, capture.entrypoint, entrypoint);
    const guard = guardSpecifier(runCopy.root);
    const launch = launcher(path, entrypoint.args, capture.entrypoint, guard);

    // 4. Approval of exactly this composition.
    const subject = captureSubject(record);
    const composition = compositionOf(record);
    const approvalSubject = compositionSubject(composition);
    const signed =
      options.approvedBy === undefined
        ? null
        : requireSignedApproval(realScope, options.approvedBy, approvalSubject, composition);
    const approval =
      signed === null ? requireCompositionApproval(realScope, approvalSubject, composition) : signed.approval;

    // 5. Classification.
    const current = currentConfig(capture.classification.configPath);
    const classification = effectiveClassification({
      declared: capture.classification.declared,
      pinned: deriveLevel(pinnedConfig, capture.target).level,
      current: current === null ? null : deriveLevel(current, capture.target).level,
    });
    classificationGate({ effective: classification.effective, principal, config: pinnedConfig });
    if (current !== null) classificationGate({ effective: classification.effective, principal, config: current });
    const euid = options.euid ?? currentEuid();
    if (options.exec === true) privilegeGate({ capture: capture.name, privileged: capture.privileged === true, euid });
    await harnessEvent();

    // 5b. Evidence posture (exec only): the outbox must be writable, and
    // confidential work needs its configured far side reachable.
    const allowSameFilesystem = options.delivery?.allowSameFilesystem === true;
    const delivery =
      options.exec === true
        ? {
            ...(await options.postureCheck!(realScope, classification.effective, {
              to: options.delivery?.to ?? null,
              env: options.env ?? process.env,
              allowSameFilesystem,
            })),
            allowSameFilesystem,
          }
        : null;

    // The environment: pinned values (loader paths placed in the run copy) and the named credentials, nothing else.
    const { env, provided, missing } = dispatchEnvironment(capture, options.env ?? process.env, guard, runCopy.root);

    // 6. The audit record, before anything runs.
    const entry = await audit(
      realScope,
      {
        action: "dispatch",
        subject: { job: job.job, resolution: id },
        outcome: "ok",
        details: {
          executable: { ...subject },
          composition: { ...approvalSubject },
          approval: { seq: approval.seq, hash: approval.hash },
          ...(signed === null ? {} : { approvedBy: { ...signed.approvedBy } }),
          classification: {
            declared: classification.declared,
            pinned: classification.pinned,
            current: classification.current,
            effective: classification.effective,
          },
          credentials: { provided, missing },
          verified: verified.length,
          ...harnessDetails,
          exec: options.exec === true,
          ...(delivery === null
            ? {}
            : { delivery: { posture: delivery.posture, to: delivery.to, farSide: delivery.farSide } }),
          ...(preparedFrom === null ? {} : { preparedFrom }),
        },
      },
      appendOptions,
    );
    const run = { dir: runCopy.dir, root: runCopy.root, cwd: runCopy.root, guard };
    if (options.exec === true) {
      attachDispatchHold(run, hold);
      hold = null;
    }
    return {
      job: job.job,
      resolution: id,
      executable: { path, args: [...entrypoint.args], command: launch.command, argv: launch.argv, subject },
      composition: approvalSubject,
      env,
      credentials: { provided, missing },
      classification: {
        declared: classification.declared,
        pinned: classification.pinned,
        current: classification.current,
        effective: classification.effective,
      },
      approval: {
        seq: approval.seq,
        hash: approval.hash,
        operator: approval.operator,
        at: approval.at,
        reason: approval.reason,
      },
      approvedBy: signed === null ? null : signed.approvedBy,
      verified,
      principal,
      harness,
      preparedFrom,
      privileged: capture.privileged === true,
      euid,
      evidence: evidencePolicy(profile),
      audit: { seq: entry.seq, hash: entry.hash },
      delivery,
      run,
    };
  } catch (error) {
    if (copy !== null) await removeRunCopy(copy).catch(() => undefined);
    await hold?.release();
    hold = null;
    // Best effort, like the refusal entry itself: the refusal stands either way.
    await harnessEvent().catch(() => undefined);
    const refusalDetails =
      options.approvedBy === undefined ? harnessDetails : { ...harnessDetails, approvedBy: options.approvedBy };
    throw await auditRefusal(realScope, "dispatch", { job: String(jobId) }, error, refusalDetails, appendOptions);
  } finally {
    await hold?.release();
  }
}

/** A copy's outcome, kept for its turn in record order (a refusal of an earlier artifact comes first). */
async function settleCopy(
  copying: Promise<RunCopy>,
): Promise<{ ok: true; value: RunCopy } | { ok: false; error: unknown }> {
  try {
    return { ok: true, value: await copying };
  } catch (error) {
    return { ok: false, error };
  }
}
