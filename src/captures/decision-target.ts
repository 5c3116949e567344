import { lstatSync } from "node:fs";
import { OatsError, isOatsError } from "../core/index.js";
import type { ArtifactKind } from "../retention/index.js";
import {
  listRetained,
  TREE_EXEC,
  TREE_LEGACY,
  parseIntegrity,
  retainedTreeDir,
  verifyTree,
} from "../retention/index.js";
import {
  approvalState,
  parseApprovalSubject,
  type ApprovalEntry,
  type ApprovalSubject,
  type ApprovalSubjectInput,
} from "./approvals.js";
import { COMPOSITION_KIND } from "./composition.js";

/**
 * What an operator's decision points at, for the CLI's guard against typos:
 * approving a tree that is retained nowhere in the scope, or revoking a
 * subject that was never decided on, is almost always a mistyped key or
 * digest, so `oats approve` / `oats revoke` refuse it unless `--force` says
 * it is meant (approving ahead of retention is legitimate). Read only; the
 * ledger is what decides, and `approve` / `revoke` themselves stay as they
 * were for library callers, who can call these first.
 */

export interface ApprovalTarget {
  /** The revision directory of exactly this kind, key and digest, or null. */
  readonly retained: string | null;
  /** The same oats.tree-exec.v1 digest retained under other kinds or keys. */
  readonly elsewhere: readonly { kind: ArtifactKind; key: string; dir: string }[];
}

function isDirectory(path: string): boolean {
  try {
    return lstatSync(path).isDirectory();
  } catch {
    return false;
  }
}

/** Where a tree subject is retained; a composition is never a tree (`retained: null`, nothing elsewhere). */
export async function approvalTarget(scope: string, subjectInput: ApprovalSubjectInput): Promise<ApprovalTarget> {
  const subject = parseApprovalSubject(subjectInput);
  if (subject.kind === COMPOSITION_KIND) return { retained: null, elsewhere: [] };
  const integrity = parseIntegrity(subject.integrity);
  const exact = retainedTreeDir(scope, { kind: subject.kind, key: subject.key, integrity });
  const revisions = listRetained(scope);
  const elsewhere = revisions
    .filter(
      (entry) =>
        entry.integrity.format === TREE_EXEC &&
        entry.integrity.value === integrity.value &&
        !(entry.kind === subject.kind && entry.key === subject.key),
    )
    .map((entry) => ({ kind: entry.kind, key: entry.key, dir: entry.dir }));
  if (isDirectory(exact)) return { retained: exact, elsewhere };
  // A capability retained under its lock's (legacy) name only: its exec digest is known by reading it.
  for (const entry of revisions) {
    if (entry.kind !== "capability" || entry.key !== subject.key || entry.integrity.format !== TREE_LEGACY) continue;
    try {
      const receipt = await verifyTree(scope, entry);
      if (receipt.execIntegrity.value === integrity.value) return { retained: entry.dir, elsewhere };
    } catch (error) {
      if (!isOatsError(error) || error.kind === "internal") throw error;
    }
  }
  return { retained: null, elsewhere };
}

/** Refuse approving a tree retained nowhere here (`artifact-not-found`, reason `not-retained`) unless forced. */
export async function checkApprovalTarget(
  scope: string,
  subjectInput: ApprovalSubjectInput,
  force: boolean,
): Promise<ApprovalTarget> {
  const subject = parseApprovalSubject(subjectInput);
  const target = await approvalTarget(scope, subject);
  if (subject.kind === COMPOSITION_KIND || target.retained !== null || force) return target;
  const also = target.elsewhere.length
    ? `; the same digest is retained as ${target.elsewhere.map((entry) => `${entry.kind} ${entry.key}`).join(", ")}`
    : "";
  throw new OatsError(
    "artifact-not-found",
    `${subject.kind} ${subject.key} at ${subject.integrity} is retained ` +
      `nowhere in this scope${also}; nothing was approved`,
    {
      subject,
      elsewhere: target.elsewhere,
      reason: "not-retained",
    },
  );
}

/**
 * The latest decision on a subject before revoking it; refuses a subject never
 * decided on (`invalid-input`, reason `never-approved`) unless forced. When
 * the logs cannot be read to tell, the revoke is let through: revoking is the
 * safe direction, and the ledger append refuses a broken chain itself.
 */
export function checkRevokeTarget(
  scope: string,
  subjectInput: ApprovalSubjectInput,
  force: boolean,
): ApprovalEntry | null {
  const subject: ApprovalSubject = parseApprovalSubject(subjectInput);
  let entry: ApprovalEntry | null;
  try {
    entry = approvalState(scope, subject).entry;
  } catch (error) {
    if (isOatsError(error) && error.kind !== "internal" && error.code !== "invalid-artifact-reference") return null;
    throw error;
  }
  if (entry === null && !force) {
    throw new OatsError(
      "invalid-input",
      `${subject.kind} ${subject.key} at ${subject.integrity} was never approved in this scope; nothing was revoked`,
      { subject, reason: "never-approved" },
    );
  }
  return entry;
}
