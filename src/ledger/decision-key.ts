import { createHash } from "node:crypto";
import { canonicalJson } from "../core/index.js";
import { CHAIN_LOGS, isPlainRecord, type ChainEntry, type ChainLog } from "./chain-line.js";

/**
 * Which entries of a chain log are approval decisions, and the subject each
 * is about, as one canonical id: sha256 (hex) of the canonical JSON of
 * `{kind, key, integrity}`. Any kind of subject (artifact digests,
 * composition digests) is keyed the same way; extra fields of an entry do
 * not take part.
 *
 * - Ledger: every entry that has a `{kind, key, integrity}` subject.
 * - Audit: `approve` / `revoke` entries with outcome `ok` and a
 *   `details.ledger` reference, the ones `decide()` writes after the ledger
 *   entry. Refused decisions are not decisions.
 */

export interface SubjectTriple {
  kind: string;
  key: string;
  integrity: string;
}

export function subjectTriple(value: unknown): SubjectTriple | null {
  if (!isPlainRecord(value)) return null;
  const { kind, key, integrity } = value;
  if (typeof kind !== "string" || typeof key !== "string" || typeof integrity !== "string") return null;
  return { kind, key, integrity };
}

export function subjectKey(subject: SubjectTriple): string {
  return createHash("sha256")
    .update(canonicalJson({ kind: subject.kind, key: subject.key, integrity: subject.integrity }), "utf8")
    .digest("hex");
}

export function ledgerReference(entry: ChainEntry): { seq: number; hash: string } | null {
  const details = entry["details"];
  if (!isPlainRecord(details) || !isPlainRecord(details.ledger)) return null;
  const { seq, hash } = details.ledger;
  return typeof seq === "number" && typeof hash === "string" ? { seq, hash } : null;
}

function ledgerKey(entry: ChainEntry): string | null {
  const subject = subjectTriple(entry["subject"]);
  return subject === null ? null : subjectKey(subject);
}

function auditKey(entry: ChainEntry): string | null {
  if (
    (entry["action"] !== "approve" && entry["action"] !== "revoke") ||
    entry["outcome"] !== "ok" ||
    ledgerReference(entry) === null
  )
    return null;
  const subject = subjectTriple(entry["subject"]);
  return subject === null ? null : subjectKey(subject);
}

function sameLog(a: ChainLog, b: ChainLog): boolean {
  return a.file === b.file && a.dir.length === b.dir.length && a.dir.every((part, index) => part === b.dir[index]);
}

/** The decision key function of a log, or null for logs that hold no decisions. */
export function decisionKeyOf(log: ChainLog): ((entry: ChainEntry) => string | null) | null {
  if (sameLog(log, CHAIN_LOGS.approvals)) return ledgerKey;
  if (sameLog(log, CHAIN_LOGS.audit)) return auditKey;
  return null;
}
