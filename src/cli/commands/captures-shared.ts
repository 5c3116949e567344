import type { DerivedLevel } from "../../captures/index.js";
import type { AuditSubject, CheckpointUse } from "../../ledger/index.js";
import { usageError } from "../support/envelope.js";

export { approveCommand, subjectText } from "../support/render.js";

/** The captures library, loaded only when a command runs (`oats digest` and `--version` never need it). */
export function loadCapturesLibrary() {
  return import("../../captures/index.js");
}

export type CapturesLibrary = Awaited<ReturnType<typeof loadCapturesLibrary>>;

/** The ledger (the approvals ledger and the audit log), loaded only when a command reads it. */
export function loadLedgerLibrary() {
  return import("../../ledger/index.js");
}

/** `derived confidential (wing x)` / `(fallback)`: where a derived level came from. */
export function derivedText(derived: DerivedLevel): string {
  const sources = derived.fallback
    ? ["fallback"]
    : derived.matched.map((match) =>
        match.source === "default" ? `default ${match.match} matches ${match.against}` : `${match.source} ${match.key}`,
      );
  return `${derived.level} (${sources.join(", ")})`;
}

/** An audit subject as `key=value` pairs; `-` when the entry has none. */
export function auditSubjectText(subject: AuditSubject | null): string {
  if (subject === null) return "-";
  const pairs = Object.entries(subject).map(([key, value]) => `${key}=${value}`);
  return pairs.length ? pairs.join(" ") : "-";
}

/** A non-empty text option (`--reason`): an empty or blank one is a usage error, never sent to the library. */
export function requiredText(flag: string, value: unknown): string {
  if (typeof value !== "string" || value.trim() === "") throw usageError(`${flag} must not be empty`, { flag });
  return value;
}

/** A positive integer option (`--limit`). */
export function positiveInteger(flag: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string" || !/^[1-9][0-9]{0,8}$/.test(value))
    throw usageError(`${flag} must be a positive integer, got ${JSON.stringify(value)}`, { flag });
  return Number(value);
}

/** One human line: whether a checkpoint of this account anchored the check of a log (`log` names it). */
export function checkpointLine(log: string, use: CheckpointUse): string {
  if (use.anchored)
    return `${log}: anchored by this account's checkpoint (it still extends seq ${use.seq}, ${use.head})`;
  if (use.reason === "no-checkpoint")
    return (
      `${log}: NOT anchored: this account had no checkpoint of it (${use.stateDir}); verified in full, ` +
      `which shows the chain is whole, not that it was not cut back; checkpointed from now on`
    );
  return (
    `${log}: NOT anchored: the state ${use.stateDir} cannot be trusted: ${use.problem.why}; ` +
    `approve and dispatch refuse until it is fixed`
  );
}
