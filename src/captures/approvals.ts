import { type JsonValue, OatsError, isOatsError, STORED_MAX_DEPTH, parseJsonText } from "../core/index.js";
import {
  audit,
  audited,
  CHAIN_LOGS,
  appendEntry,
  type AppendOptions,
  type ChainEntry,
  allDecisions,
  anchoredDecisions,
  type LogAnchors,
  requireUsableState,
  crossCheckReasonText,
  latestDecision,
  mismatchError,
  type CrossCheckReason,
} from "../ledger/index.js";
import {
  assertArtifactKey,
  assertArtifactKind,
  type ArtifactKind,
  JSON_V1,
  PACKAGE_PAYLOAD_EXEC,
  TREE_EXEC,
  TREE_LEGACY,
  integrityText,
  parseIntegrity,
  readBlob,
  type IntegrityInput,
} from "../retention/index.js";
import { COMPOSITION_KIND, compositionSubject, parseComposition, type CaptureComposition } from "./composition.js";
import { currentPrincipal } from "./classification.js";
import { type ApprovalAttestation, attestApproval } from "./approval-attest.js";

/**
 * The approvals ledger (`.agents/approvals/ledger.jsonl`, CHAIN_LOGS.approvals):
 * append-only, hash-chained entries
 * `{seq, at, action: "approve" | "revoke", subject: {kind, key, integrity}, operator, reason, prev, hash}`.
 *
 * - A capture dispatches only under an approval of its whole composition:
 *   subject `{kind: "composition", key: <capture name>, integrity:
 *   "oats.json.v1:sha256-…"}` (see composition.ts). Approving one reads the
 *   composition from its pinned blob (`capture prepare` writes it) and copies
 *   it into the ledger entry (`composition`), so the ledger shows what was
 *   approved; a composition nobody prepared cannot be approved blind.
 * - A tree approval binds to one exact oats.tree-exec.v1 digest of one artifact
 *   (kind + key), for callers that run trees outside captures. Legacy (oats.tree-legacy.v0, bare `sha256-…`) digests
 * do not
 *   cover exec bits and package-payload digests do not cover the whole tree:
 *   both are refused, as is every other format.
 * - The operator is the process's own OS account@host (currentPrincipal), never
 *   a parameter, a flag or an environment variable.
 * - The state of a subject is its latest decision: a revoke after an approve
 *   takes effect for work already queued, because dispatch asks again.
 * - State is the latest decision as BOTH the ledger and the audit log record
 *   it (approval-check.ts): a broken chain, a log that no longer extends the
 *   operator's private checkpoint, or a disagreement between the two logs is
 *   refused (`integrity-mismatch`), never read as "approved". The lookup costs
 *   the same whatever the history once the checkpoint exists (chain-sync.ts).
 * - Nothing else approves: retention, presence in the store and a lock's
 *   `trusted` flag are never read here.
 */

export type ApprovalAction = "approve" | "revoke";

export interface ApprovalSubject {
  kind: ArtifactKind | typeof COMPOSITION_KIND;
  key: string;
  /** Text form: `oats.tree-exec.v1:sha256-<64 hex>` for a tree, `oats.json.v1:sha256-<64 hex>` for a composition. */
  integrity: string;
}

/**
 * A subject as a caller holds one, before {@link parseApprovalSubject} checks it: the integrity may be the text
 * form or `{format, value}`.
 */
export interface ApprovalSubjectInput {
  readonly kind: ArtifactKind | typeof COMPOSITION_KIND;
  readonly key: string;
  readonly integrity: IntegrityInput;
}

export interface ApprovalEntry extends ChainEntry {
  action: ApprovalAction;
  subject: ApprovalSubject;
  operator: string;
  reason: string;
  /** On the approval of a composition: the composition itself, as the operator approved it. */
  composition?: CaptureComposition;
}

export interface ApprovalState {
  approved: boolean;
  /** The latest approve/revoke entry for exactly this subject, or null. */
  entry: ApprovalEntry | null;
}

export interface ApprovalListing extends ApprovalState {
  subject: ApprovalSubject;
  /** Both logs agree on this subject's latest decision. */
  confirmed: boolean;
  /** Why they do not, when they do not. */
  mismatch?: { reason: CrossCheckReason; why: string; audit: { seq: number; hash: string } | null };
}

export interface DecisionOptions extends AppendOptions {
  reason: string;
  /**
   * Told what became of the signed statement of an approved composition
   * (approval-attest.ts): written, none (no signing key), or why not.
   */
  onAttestation?: (outcome: ApprovalAttestation) => void;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Check and normalise a subject `{kind, key, integrity}`; integrity may be the
 * text form or `{format, value}`. Refusals are `invalid-artifact-reference`.
 */
export function parseApprovalSubject(input: ApprovalSubjectInput): ApprovalSubject {
  if (!isRecord(input)) {
    throw new OatsError(
      "invalid-artifact-reference",
      `invalid approval subject ${JSON.stringify(input) ?? String(input)}: expected {kind, key, integrity}`,
      { subject: input },
    );
  }
  if (input.kind === COMPOSITION_KIND) {
    const key = assertArtifactKey("capture", input.key);
    const integrity = parseIntegrity(input.integrity);
    if (integrity.format !== JSON_V1) {
      throw new OatsError(
        "invalid-artifact-reference",
        `cannot approve composition ${key} at ${integrityText(integrity)}: a ` +
          `composition is named by its ${JSON_V1} digest, as \`oats capture ` +
          `prepare\` prints it`,
        {
          kind: COMPOSITION_KIND,
          key,
          integrity: integrityText(integrity),
          format: integrity.format,
          expectedFormat: JSON_V1,
        },
      );
    }
    return { kind: COMPOSITION_KIND, key, integrity: integrityText(integrity) };
  }
  const kind = assertArtifactKind(input.kind);
  const key = assertArtifactKey(kind, input.key);
  const integrity = parseIntegrity(input.integrity);
  if (integrity.format !== TREE_EXEC) {
    const text = integrityText(integrity);
    const why =
      integrity.format === TREE_LEGACY
        ? `${TREE_LEGACY} digests (including bare sha256-… values) do not cover exec bits`
        : integrity.format === PACKAGE_PAYLOAD_EXEC
          ? `${PACKAGE_PAYLOAD_EXEC} digests skip node_modules and oats-lock.json, ` +
            `so they do not cover the exec bits and contents of the whole executable tree`
          : `${integrity.format} does not name a tree`;
    throw new OatsError(
      "invalid-artifact-reference",
      `cannot approve ${kind} ${key} at ${text}: ${why}; an approval binds to one exact ${TREE_EXEC} digest`,
      {
        kind,
        key,
        integrity: text,
        format: integrity.format,
        expectedFormat: TREE_EXEC,
      },
    );
  }
  return { kind, key, integrity: integrityText(integrity) };
}

function checkReason(options: unknown): string {
  const reason = isRecord(options) ? options.reason : undefined;
  if (typeof reason !== "string" || reason.trim() === "") {
    throw new OatsError("invalid-input", "an approval or revocation needs a non-empty reason", {
      reason: reason ?? null,
    });
  }
  return reason;
}

/**
 * The composition an approval names, read from the blob `capture prepare`
 * pinned; `blob-not-found` when nobody prepared it in this scope.
 */
function pinnedComposition(scope: string, subject: ApprovalSubject): CaptureComposition {
  const digest = parseIntegrity(subject.integrity).value;
  let bytes: Buffer;
  try {
    bytes = readBlob(scope, digest);
  } catch (error) {
    if (isOatsError(error) && error.code === "blob-not-found") {
      throw new OatsError(
        "blob-not-found",
        `composition ${subject.key} at ${subject.integrity} is not pinned in ` +
          `this scope: prepare the capture (\`oats capture prepare\`) so the ` +
          `approval records what it approves`,
        { ...error.details, subject },
        { cause: error },
      );
    }
    throw error;
  }
  const value = parseJsonText(bytes.toString("utf8"), STORED_MAX_DEPTH, (reason, message) =>
    reason === "syntax"
      ? new OatsError("invalid-input", `the blob of composition ${subject.integrity} is not JSON`, { subject })
      : new OatsError("invalid-input", `the blob of composition ${subject.integrity}: ${message}`, { subject, reason }),
  );
  const composition = parseComposition(value as JsonValue, `composition ${subject.integrity}`);
  const named = compositionSubject(composition);
  if (named.key !== subject.key || named.integrity !== subject.integrity) {
    throw new OatsError(
      "invalid-artifact-reference",
      `composition ${subject.integrity} belongs to capture ${named.key}, not ${subject.key}`,
      { subject, capture: named.key },
    );
  }
  return composition;
}

/**
 * Append the decision to the ledger, then audit it. A refusal is audited too.
 * When the audit log cannot be written after the ledger entry was, the
 * decision stands (the ledger is the authority) and the caller gets
 * `audit-unavailable` naming the ledger entry, so nothing is silently lost.
 */
async function decide(
  action: ApprovalAction,
  scope: string,
  subjectInput: ApprovalSubjectInput,
  options: DecisionOptions,
): Promise<ApprovalEntry> {
  const auditSubject = isRecord(subjectInput)
    ? { kind: String(subjectInput.kind), key: String(subjectInput.key), integrity: String(subjectInput.integrity) }
    : null;
  const entry = await audited(scope, action, auditSubject, async () => {
    const subject = parseApprovalSubject(subjectInput);
    const reason = checkReason(options);
    const composition =
      action === "approve" && subject.kind === COMPOSITION_KIND ? pinnedComposition(scope, subject) : null;
    const operator = currentPrincipal();
    // Granting needs a checkpoint that can anchor the logs; revoking is the safe direction and never waits for one.
    if (action === "approve") requireUsableState(scope, `approving ${subject.kind} ${subject.key}`);
    const body = {
      action,
      subject: { ...subject },
      operator,
      reason,
      ...(composition === null ? {} : { composition }),
    };
    return (await appendEntry(
      scope,
      CHAIN_LOGS.approvals,
      body,
      options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs },
    )) as ApprovalEntry;
  });
  try {
    await audit(scope, {
      action,
      subject: { ...entry.subject },
      outcome: "ok",
      details: { ledger: { seq: entry.seq, hash: entry.hash }, reason: entry.reason },
    });
  } catch (error) {
    if (isOatsError(error)) error.details["ledger"] = { seq: entry.seq, hash: entry.hash, recorded: true };
    throw error;
  }
  // With a signing key, an approved composition is also a signed statement (never instead of the ledger entry).
  if (action === "approve") {
    const outcome = attestApproval(scope, entry);
    options.onAttestation?.(outcome);
  }
  return entry;
}

/** Approve one exact composition (or oats.tree-exec.v1 digest of one artifact); returns the entry as written. */
export function approve(
  scope: string,
  subject: ApprovalSubjectInput,
  options: DecisionOptions,
): Promise<ApprovalEntry> {
  return decide("approve", scope, subject, options);
}

/** Revoke (the latest decision wins, so queued work is refused from now on); returns the entry as written. */
export function revoke(scope: string, subject: ApprovalSubjectInput, options: DecisionOptions): Promise<ApprovalEntry> {
  return decide("revoke", scope, subject, options);
}

/** A ledger entry read back: its shape is checked; a malformed one is refused, never skipped. */
function checkEntry(entry: ChainEntry): ApprovalEntry {
  const ok =
    (entry.action === "approve" || entry.action === "revoke") &&
    typeof entry.operator === "string" &&
    typeof entry.reason === "string" &&
    isRecord(entry.subject) &&
    typeof entry.subject.kind === "string" &&
    typeof entry.subject.key === "string" &&
    typeof entry.subject.integrity === "string" &&
    (entry.composition === undefined ||
      (entry.action === "approve" && entry.subject.kind === COMPOSITION_KIND && isRecord(entry.composition)));
  if (!ok) {
    throw new OatsError(
      "invalid-artifact-store",
      `approvals ledger entry seq ${entry.seq} is not an approve/revoke decision`,
      { log: [...CHAIN_LOGS.approvals.dir, CHAIN_LOGS.approvals.file].join("/"), seq: entry.seq },
    );
  }
  return entry as ApprovalEntry;
}

/**
 * The current state of exactly this subject: its latest decision, confirmed
 * by both logs (approval-check.ts). Throws `integrity-mismatch` when either
 * chain is broken, when a log no longer extends the operator's checkpoint,
 * or when the ledger and the audit log disagree about the decision.
 */
export function approvalState(scope: string, subjectInput: ApprovalSubjectInput): ApprovalState {
  const subject = parseApprovalSubject(subjectInput);
  const check = latestDecision(scope, subject);
  if (check.state === "mismatch") throw mismatchError(subject, check);
  if (check.state === "none") return { approved: false, entry: null };
  const entry = checkEntry(check.ledger);
  return { approved: entry.action === "approve", entry };
}

/**
 * The approving entry, or `approval-required` with the subject and its last decision (or null); `integrity-mismatch`
 * as approvalState. An approval is relied on only when the operator's private state can anchor both logs:
 * otherwise `audit-unavailable`, reason `state-unsafe` (approval-check.ts, requireUsableState).
 */
export function requireApproval(scope: string, subjectInput: ApprovalSubjectInput): ApprovalEntry {
  const subject = parseApprovalSubject(subjectInput);
  requireUsableState(scope, `relying on the approval of ${subject.kind} ${subject.key}`);
  const state = approvalState(scope, subject);
  if (!state.approved || state.entry === null) {
    const why =
      state.entry === null
        ? "it was never approved"
        : `it was revoked by ${state.entry.operator} at ${state.entry.at} (seq ` +
          `${state.entry.seq}): ${state.entry.reason}`;
    throw new OatsError(
      "approval-required",
      `${subject.kind} ${subject.key} at ${subject.integrity} is not approved: ${why}`,
      { subject, lastDecision: state.entry },
    );
  }
  return state.entry;
}

/**
 * Every subject either log has decided on, in order of first decision, each
 * cross-checked. A subject the two logs disagree on is listed with
 * `confirmed: false`, `approved: false` and `mismatch` naming why, so a
 * forged or orphaned decision is shown and never credited. `entry` is the
 * ledger's latest decision (null when only the audit log has one).
 */
export function listApprovals(scope: string): ApprovalListing[] {
  return approvalsReport(scope).approvals;
}

/** listApprovals, and whether a checkpoint of this account anchored the check of each log. */
export function approvalsReport(scope: string): { approvals: ApprovalListing[]; checkpoint: LogAnchors } {
  const { decisions, checkpoint } = anchoredDecisions(scope);
  const approvals = decisions.map(({ subject, check }): ApprovalListing => {
    const ledger = check.state === "none" ? null : check.ledger === null ? null : checkEntry(check.ledger);
    const listed = { kind: subject.kind as ApprovalSubject["kind"], key: subject.key, integrity: subject.integrity };
    if (check.state === "agreed")
      return { subject: listed, approved: ledger!.action === "approve", confirmed: true, entry: ledger };
    const reason = check.state === "mismatch" ? check.reason : "no-audit-entry";
    return {
      subject: listed,
      approved: false,
      confirmed: false,
      mismatch: {
        reason,
        why: crossCheckReasonText(reason),
        audit: check.state === "mismatch" && check.audit ? { seq: check.audit.seq, hash: check.audit.hash } : null,
      },
      entry: ledger,
    };
  });
  return { approvals, checkpoint };
}

/**
 * The latest cross-checked `approve` among subjects of this kind and key
 * (any integrity), or null: what was approved before, to tell an operator
 * what changed. Linear in both logs (a refusal-path helper).
 */
export function latestApprovedFor(scope: string, kind: string, key: string): ApprovalEntry | null {
  let best: ApprovalEntry | null = null;
  for (const { subject, check } of allDecisions(scope)) {
    if (
      subject.kind !== kind ||
      subject.key !== key ||
      check.state !== "agreed" ||
      check.ledger["action"] !== "approve"
    )
      continue;
    const entry = checkEntry(check.ledger);
    if (best === null || entry.seq > best.seq) best = entry;
  }
  return best;
}
