import { isOatsError, type JsonObject, OatsError } from "../core/index.js";
import {
  CHAIN_LOGS,
  appendEntry,
  readEntries,
  verifyChain,
  type AppendOptions,
  type ChainEntry,
  type ChainVerdict,
} from "./chain-log.js";
import { currentPrincipal } from "./principal.js";

/**
 * The audit log (`.agents/audit/audit.jsonl`, CHAIN_LOGS.audit): one
 * hash-chained entry per decision of the capture flow,
 * `{seq, at, principal, action, subject, outcome, details, prev, hash}`.
 *
 * - `principal` is the process's own account@host, never a parameter.
 * - `outcome` is `ok` (done), `kept` (already there), `refused` (a typed
 *   refusal; details carry its code and message) or `event` (a security event).
 * - Details never hold secrets: callers pass names, digests and levels, and
 *   credential values are never read into anything that is audited.
 *
 * An action that must be audited before it takes effect (a dispatch) calls
 * `audit` and lets `audit-unavailable` refuse it. A refusal is audited on a
 * best-effort basis: when the log cannot be written, the refusal still stands
 * and says so in `details.audit`.
 */

export const AUDIT_ACTIONS = [
  "retain",
  "prepare",
  "approve",
  "revoke",
  "queue",
  "dispatch",
  "security-event",
  "gc",
  "pin",
  "unpin",
  "repair",
  "run-start",
  "run-end",
  "run-receive",
  "trust-add",
  "trust-remove",
] as const;
export type AuditAction = (typeof AUDIT_ACTIONS)[number];
export type AuditOutcome = "ok" | "kept" | "refused" | "event";

export interface AuditSubject {
  readonly [key: string]: string;
}

export interface AuditRecord {
  readonly action: AuditAction;
  readonly subject: AuditSubject | null;
  readonly outcome: AuditOutcome;
  readonly details?: JsonObject;
}

export interface AuditEntry extends ChainEntry {
  principal: string;
  action: AuditAction;
  subject: AuditSubject | null;
  outcome: AuditOutcome;
  details: Record<string, unknown>;
}

/** Append one audited decision; `audit-unavailable` when it cannot be made durable. */
export async function audit(scope: string, record: AuditRecord, options: AppendOptions = {}): Promise<AuditEntry> {
  const body = {
    principal: currentPrincipal(),
    action: record.action,
    subject: record.subject === null ? null : { ...record.subject },
    outcome: record.outcome,
    details: record.details ?? {},
  };
  return (await appendEntry(scope, CHAIN_LOGS.audit, body, options)) as AuditEntry;
}

/**
 * Record a refusal of `action`, then return the error to throw. The error is
 * never replaced: if the audit log is unavailable too, `details.audit` says so.
 * @param error what was thrown: an OatsError is recorded by its code and kind and gets `details.audit` (the
 *   entry's seq and hash); anything else is recorded as `internal-error`
 * @param extra more details for the audit entry, beside the refusal
 * @returns `error` itself
 */
export async function auditRefusal<Thrown>(
  scope: string,
  action: AuditAction,
  subject: AuditSubject | null,
  error: Thrown,
  extra: JsonObject = {},
  options: AppendOptions = {},
): Promise<Thrown> {
  const refusal = isOatsError(error)
    ? { code: error.code, kind: error.kind, message: error.message }
    : { code: "internal-error", kind: "internal", message: error instanceof Error ? error.message : String(error) };
  try {
    const entry = await audit(scope, { action, subject, outcome: "refused", details: { ...extra, refusal } }, options);
    if (isOatsError(error)) error.details["audit"] = { seq: entry.seq, hash: entry.hash };
  } catch (auditError) {
    if (isOatsError(error))
      error.details["audit"] = isOatsError(auditError)
        ? { unavailable: auditError.message }
        : { unavailable: String(auditError) };
  }
  return error;
}

/** Run `body`; any refusal it throws is audited as a refusal of `action` and rethrown. */
export async function audited<T>(
  scope: string,
  action: AuditAction,
  subject: AuditSubject | null,
  body: () => Promise<T>,
  options: AppendOptions = {},
): Promise<T> {
  try {
    return await body();
  } catch (error) {
    throw await auditRefusal(scope, action, subject, error, {}, options);
  }
}

/** The whole audit chain, verified; names the first broken link. */
export function verifyAudit(scope: string): ChainVerdict {
  return verifyChain(scope, CHAIN_LOGS.audit);
}

/** Every audit entry, after verifying the chain (`integrity-mismatch` when it is broken). */
export function readAudit(scope: string): { entries: AuditEntry[]; head: string } {
  const { entries, head } = readEntries(scope, CHAIN_LOGS.audit);
  for (const entry of entries) {
    if (
      typeof entry["principal"] !== "string" ||
      typeof entry["action"] !== "string" ||
      typeof entry["outcome"] !== "string"
    ) {
      throw new OatsError("invalid-artifact-store", `audit entry seq ${entry.seq} is not an audit record`, {
        seq: entry.seq,
      });
    }
  }
  return { entries: entries as AuditEntry[], head };
}
