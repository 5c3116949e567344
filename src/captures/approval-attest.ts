import { isOatsError } from "../core/index.js";
import { approvalStatement, type Attested, attestStatement } from "../attestation/index.js";
import { resolveScope } from "../retention/index.js";
import type { ApprovalEntry } from "./approvals.js";
import { parseComposition } from "./composition.js";

/**
 * The signed statement of an approval (docs/design/attestations.md): when
 * the operator has a signing key, approving a composition also writes an
 * in-toto statement, signed, into the scope's attestation store. Its
 * subjects are the composition and the executable tree; its predicate the
 * approver, reason, time, the declared level and the ledger entry. The
 * approval itself is the ledger entry: a statement that cannot be written
 * (an unsafe key, a full disk) leaves the approval as it is and says why.
 */

export interface ApprovalAttestation {
  readonly attestation: Attested | null;
  /** Why no statement was written although one was due, or null. */
  readonly error: { readonly code: string; readonly message: string } | null;
}

export function attestApproval(scope: string, entry: ApprovalEntry): ApprovalAttestation {
  if (entry.action !== "approve" || entry.subject.kind !== "composition" || entry.composition === undefined)
    return { attestation: null, error: null };
  try {
    const composition = parseComposition(entry.composition, `the composition approved at seq ${entry.seq}`);
    const statement = approvalStatement({
      capture: composition.capture,
      composition: entry.subject.integrity,
      tree: composition.executable,
      approver: entry.operator,
      reason: entry.reason,
      approvedAt: entry.at,
      level: composition.classification.declared,
      ledger: { seq: entry.seq, hash: entry.hash },
    });
    return { attestation: attestStatement(resolveScope(scope), statement), error: null };
  } catch (error) {
    return {
      attestation: null,
      error: {
        code: isOatsError(error) ? error.code : "internal-error",
        message: error instanceof Error ? error.message : String(error),
      },
    };
  }
}
