/**
 * The one error type of the toolkit. A refusal carries a stable `code` and
 * `kind` (contract section 6) from the library to the CLI's exit code and
 * JSON envelope unchanged, so callers never parse filesystem messages.
 */

export const ERROR_KINDS = {
  missing: 3,
  invalid: 4,
  mismatch: 5,
  refused: 6,
  busy: 7,
  incomplete: 8,
  usage: 2,
  internal: 1,
  // 128 + SIGINT's number, as a shell reports a command a signal ended; the CLI exits 128 + the number of the signal
  // it received (143 for SIGTERM, 129 for SIGHUP).
  interrupted: 130,
} as const;

export type ErrorKind = keyof typeof ERROR_KINDS;

export const ERROR_CODES = {
  "artifact-not-found": "missing",
  "resolution-not-found": "missing",
  "blob-not-found": "missing",
  "job-not-found": "missing",
  "run-not-found": "missing",
  "invalid-artifact-reference": "invalid",
  "invalid-artifact-store": "invalid",
  "invalid-artifact": "invalid",
  "artifact-not-contained": "invalid",
  "invalid-lock": "invalid",
  "invalid-resolution": "invalid",
  "invalid-input": "invalid",
  "integrity-mismatch": "mismatch",
  "provenance-mismatch": "mismatch",
  "resolution-incomplete": "refused",
  "approval-required": "refused",
  "classification-refused": "refused",
  "audit-unavailable": "refused",
  "secret-in-record": "refused",
  // An OCI registry that cannot be used safely or at all: details.reason says why (unreachable, tls, insecure-remote,
  // redirect-other-host, unauthorized, auth-realm, protocol).
  "registry-refused": "refused",
  // A signed attestation that cannot be believed: details.reason says why (signature-invalid, key-not-trusted,
  // trust-removed, trust-unknown, subject-mismatch, subject-not-held, predicate-type, statement-invalid, too-large).
  "attestation-refused": "refused",
  busy: "busy",
  // A sealed run that verifies (nothing was edited) but lacks evidence its profile requires: not tampering, so not
  // a mismatch; not a refusal either. details.gaps names what is missing.
  "evidence-incomplete": "incomplete",
  usage: "usage",
  "internal-error": "internal",
  // A signal (SIGINT, SIGTERM, SIGHUP) stopped the command; its cleanup ran and details.removed says what it removed.
  interrupted: "interrupted",
} as const satisfies Record<string, ErrorKind>;

export type ErrorCode = keyof typeof ERROR_CODES;

export type ErrorDetails = Record<string, unknown>;

/**
 * Every refusal oats makes: a stable `code` from {@link ERROR_CODES}, the `kind` that code belongs to (which sets
 * the CLI's exit code, `exitCode`), a message for people and `details` for programs. Its JSON form
 * (`toJSON`) is what the CLI prints in its error envelope.
 */
export class OatsError extends Error {
  readonly code: ErrorCode;
  readonly kind: ErrorKind;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "OatsError";
    this.code = code;
    this.kind = ERROR_CODES[code];
    this.details = details;
  }

  get exitCode(): number {
    return ERROR_KINDS[this.kind];
  }

  toJSON(): { code: ErrorCode; kind: ErrorKind; message: string; details: ErrorDetails } {
    return { code: this.code, kind: this.kind, message: this.message, details: this.details };
  }
}

/** Whether something thrown is an {@link OatsError} (a typed refusal), rather than any other error. */
export function isOatsError(error: unknown): error is OatsError {
  return error instanceof OatsError;
}

/**
 * The error an aborted signal turns into: code `interrupted` (the input was not at fault), with
 * `details.reason: "interrupted"` and what the cleanup removed in `details.removed`. The CLI exits 128 + the
 * number of the signal it received. It lives here so that the OCI client (which imports only core) raises the
 * very same one.
 */
export function interruptedError(): OatsError {
  return new OatsError("interrupted", "interrupted", { reason: "interrupted", removed: [] });
}

export function isInterrupted(error: unknown): boolean {
  return error instanceof OatsError && error.code === "interrupted";
}

/** Node's errno code of a system error, or undefined. */
export function errnoCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/**
 * Wrap an unexpected failure of a named step. Refusals pass through untouched;
 * anything else becomes `internal-error` naming the step, so an injected or
 * real I/O fault says where it happened without leaking a raw fs message as
 * the only explanation.
 */
export function asStepError(step: string, error: unknown, details: ErrorDetails = {}): OatsError {
  if (isOatsError(error)) return error;
  const cause = errnoCode(error);
  const reason = error instanceof Error ? error.message : String(error);
  return new OatsError(
    "internal-error",
    `${step} failed: ${reason}`,
    { step, ...(cause ? { errno: cause } : {}), ...details },
    { cause: error },
  );
}
