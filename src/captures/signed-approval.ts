import { OatsError, isOatsError } from "../core/index.js";
import {
  APPROVAL_PREDICATE,
  type ApprovalStatement,
  attestationRefusal,
  listAttestationIds,
  parseEnvelope,
  readAttestation,
  readTrust,
  TREE_DIGEST_ALGORITHM,
  verifyEnvelopeBytes,
} from "../attestation/index.js";
import { parseIntegrity } from "../retention/index.js";
import { approvalState } from "./approvals.js";
import type { CaptureComposition, CompositionSubject } from "./composition.js";

/**
 * Fleet approval, opt-in (`dispatch --approved-by <trust name>`): a
 * composition pulled from another host runs under that host's signed
 * approval instead of a local one, when the local operator trusts its key
 * for approvals under that name. The default stays a local approval.
 *
 * Accepted only when an attestation in the scope's store
 * - is signed by exactly the key of that trust entry, which is trusted for
 *   approvals (`trust-unknown`, `trust-removed`, `key-not-trusted`), and the
 *   signature verifies over the PAE (`signature-invalid`);
 * - is an oats approval statement (`predicate-type`, `statement-invalid`);
 * - names this composition's digest and the executable tree it runs, for
 *   this capture at its declared level (`subject-mismatch`).
 * A composition the local ledger revoked is refused whatever was signed
 * elsewhere (`approval-required`): a local revocation wins. With no
 * statement for this composition at all, the refusal is `approval-required`.
 * Among several good statements the latest approval is taken.
 */

export interface SignedApproval {
  /** What the plan and the run record carry: seq 0 (no ledger entry), the attestation's id as the hash. */
  readonly approval: { seq: number; hash: string; operator: string; at: string; reason: string };
  readonly approvedBy: {
    readonly trust: string;
    readonly keyid: string;
    readonly attestation: string;
    readonly approver: string;
    readonly approvedAt: string;
    readonly ledger: { readonly seq: number; readonly hash: string };
  };
}

/** A statement's claims, read without trusting them, to find the candidates worth verifying. */
function claimsComposition(payload: Buffer, hex: string): boolean {
  try {
    const value = JSON.parse(payload.toString("utf8")) as {
      predicateType?: unknown;
      subject?: { digest?: { sha256?: unknown } }[];
    };
    return value.predicateType === APPROVAL_PREDICATE && value.subject?.[0]?.digest?.sha256 === hex;
  } catch {
    return false;
  }
}

function checkSubjects(
  id: string,
  statement: ApprovalStatement,
  subject: CompositionSubject,
  composition: CaptureComposition,
): void {
  const [compositionSubject, treeSubject] = statement.subject;
  const treeHex = parseIntegrity(composition.executable.integrity).value.slice("sha256-".length);
  const problems: string[] = [];
  if (compositionSubject.digest.sha256 !== parseIntegrity(subject.integrity).value.slice("sha256-".length))
    problems.push("the composition digest");
  if (compositionSubject.name !== `composition:${composition.capture}` || statement.predicate.capture !== subject.key)
    problems.push("the capture");
  if (
    treeSubject.name !== `tree:${composition.executable.kind}/${composition.executable.key}` ||
    treeSubject.digest[TREE_DIGEST_ALGORITHM as keyof typeof treeSubject.digest] !== treeHex
  )
    problems.push("the executable tree");
  if (statement.predicate.level !== composition.classification.declared) problems.push("the level");
  if (problems.length > 0)
    throw attestationRefusal(
      "subject-mismatch",
      `attestation ${id} does not approve composition ${subject.key} at ${subject.integrity}: it names another ` +
        `${problems.join(", ")}`,
      { id, subject, mismatched: problems },
    );
}

/**
 * The latest signed approval of a composition by the trust `trustName` (purpose `approvals`), read from the
 * scope's attestation store and verified. Refuses with `attestation-refused` a removed trust (`trust-removed`), an
 * unknown one (`trust-unknown`), one for another purpose (`key-not-trusted`) and statements that do not verify or
 * name another composition (`subject-mismatch`); with `approval-required` a composition revoked here (a local
 * revocation wins) or one with no approval signed by that key (reason `no-signed-approval`).
 */
export function requireSignedApproval(
  realScope: string,
  trustName: string,
  subject: CompositionSubject,
  composition: CaptureComposition,
): SignedApproval {
  const trust = readTrust(realScope);
  // The trust itself first: a removed or unknown name is refused whatever the store holds.
  const named = trust.entries.find((entry) => entry.name === trustName);
  if (named === undefined || named.purpose !== "approvals") {
    const removed = [...trust.removed].reverse().find((entry) => entry.name === trustName);
    if (named === undefined && removed !== undefined)
      throw attestationRefusal(
        "trust-removed",
        `the trust ${trustName} was removed by ${removed.removedBy} at ${removed.removedAt}: approvals its key ` +
          "signed are not accepted here any more",
        { trust: trustName, keyid: removed.keyid, removedAt: removed.removedAt },
      );
    if (named === undefined)
      throw attestationRefusal("trust-unknown", `no trust is named ${trustName} in this scope (\`oats trust ls\`)`, {
        trust: trustName,
      });
    throw attestationRefusal("key-not-trusted", `the trust ${trustName} is for ${named.purpose}, not approvals`, {
      trust: trustName,
      keyid: named.keyid,
      purpose: named.purpose,
    });
  }
  const local = approvalState(realScope, subject);
  if (local.entry !== null && local.entry.action === "revoke")
    throw new OatsError(
      "approval-required",
      `${subject.kind} ${subject.key} at ${subject.integrity} was revoked here by ${local.entry.operator} at ` +
        `${local.entry.at} (seq ${local.entry.seq}): a local revocation wins over a signed approval`,
      { subject, lastDecision: local.entry, approvedBy: trustName },
    );
  const hex = parseIntegrity(subject.integrity).value.slice("sha256-".length);
  const accepted: SignedApproval[] = [];
  const refusals: OatsError[] = [];
  for (const id of listAttestationIds(realScope).ids) {
    let bytes: Buffer;
    try {
      const read = readAttestation(realScope, id);
      bytes = read.bytes;
      if (!claimsComposition(parseEnvelope(bytes, `attestation ${id}`).payload, hex)) continue;
    } catch {
      continue; // not readable as an envelope at all: it claims nothing about this composition
    }
    try {
      const verified = verifyEnvelopeBytes(bytes, trust, { trustName, predicateType: APPROVAL_PREDICATE });
      const statement = verified.statement as ApprovalStatement;
      checkSubjects(id, statement, subject, composition);
      const predicate = statement.predicate;
      accepted.push({
        approval: {
          seq: 0,
          hash: id,
          operator: predicate.approver,
          at: predicate.approvedAt,
          reason: predicate.reason,
        },
        approvedBy: {
          trust: trustName,
          keyid: verified.keyid,
          attestation: id,
          approver: predicate.approver,
          approvedAt: predicate.approvedAt,
          ledger: { ...predicate.ledger },
        },
      });
    } catch (error) {
      if (!isOatsError(error)) throw error;
      refusals.push(error);
    }
  }
  if (accepted.length > 0)
    return accepted.sort((a, b) => (a.approval.at < b.approval.at ? 1 : a.approval.at > b.approval.at ? -1 : 0))[0]!;
  if (refusals.length > 0) {
    const first = refusals[0]!;
    first.details["approvedBy"] = trustName;
    first.details["candidates"] = refusals.length;
    throw first;
  }
  throw new OatsError(
    "approval-required",
    `${subject.kind} ${subject.key} at ${subject.integrity} has no approval signed by the key of ${trustName} in ` +
      "this scope (`oats pull` brings the statements attached to a resolution)",
    { subject, approvedBy: trustName, reason: "no-signed-approval" },
  );
}
