import { OatsError, type ErrorCode, type ErrorKind } from "../core/index.js";

/**
 * What whole-scope fsck reports: findings, each of one class, with the
 * refusal a reader of that thing would meet (code and kind), or `notice` for
 * leftovers that damage nothing (staging, unknown entries, orphan manifests).
 *
 * Severity, most serious first (docs/design/fsck.md):
 *   mismatch  bytes that are not what their name or chain says (tampering, bit rot)
 *   invalid   something that cannot be read as what it claims to be
 *   missing   a reference to something the scope does not hold
 *   refused   a policy refusal (e.g. a chain log that cannot be checked)
 *   notice    leftovers: reported, never failing the check
 * The exit code of fsck is that of the most serious finding's kind (5, 4, 3, 6);
 * notices alone exit 0.
 */

export const FINDING_CLASSES = [
  "revisions",
  "files",
  "records",
  "blobs",
  "instances",
  "jobs",
  "pins",
  "approvals",
  "audit",
  "manifests",
  "staging",
  "leases",
  "run-copies",
  "runs",
  "quarantine",
  "unknown",
] as const;
export type FindingClass = (typeof FINDING_CLASSES)[number];

export type FindingKind = ErrorKind | "notice";

export const SEVERITY_ORDER: readonly FindingKind[] = [
  "mismatch",
  "invalid",
  "missing",
  "incomplete",
  "refused",
  "busy",
  "usage",
  "notice",
];

export interface Finding {
  readonly class: FindingClass;
  /** What the finding is about: a revision, record id, blob digest, instance, job, log. */
  readonly subject: string;
  readonly path: string | null;
  readonly code: ErrorCode | null;
  readonly kind: FindingKind;
  readonly message: string;
  readonly details: Record<string, unknown>;
}

export function findingOf(error: OatsError, cls: FindingClass, subject: string, path: string | null): Finding {
  const details = { ...error.details };
  return {
    class: cls,
    subject,
    path: path ?? (typeof details["path"] === "string" ? (details["path"] as string) : null),
    code: error.code,
    kind: error.kind,
    message: error.message,
    details,
  };
}

export function notice(cls: FindingClass, path: string, message: string): Finding {
  return { class: cls, subject: path, path, code: null, kind: "notice", message, details: {} };
}

export function severityRank(kind: FindingKind): number {
  const rank = SEVERITY_ORDER.indexOf(kind);
  return rank < 0 ? SEVERITY_ORDER.length : rank;
}

/** The most serious finding that fails the check (first of equals, in class order), or null when only notices remain.
 * */
export function mostSerious(findings: readonly Finding[]): Finding | null {
  let worst: Finding | null = null;
  for (const finding of findings) {
    if (finding.kind === "notice") continue;
    if (worst === null || severityRank(finding.kind) < severityRank(worst.kind)) worst = finding;
  }
  return worst;
}

/**
 * Run one check; an OatsError it throws (a store component that is a symlink,
 * an unreadable log) becomes a finding of its class instead of ending fsck.
 * Anything else is a bug and propagates.
 */
export function guarded<T>(out: Finding[], cls: FindingClass, subject: string, body: () => T): T | null {
  try {
    return body();
  } catch (error) {
    if (!(error instanceof OatsError) || error.kind === "internal") throw error;
    out.push(findingOf(error, cls, subject, null));
    return null;
  }
}
