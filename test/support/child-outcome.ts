/**
 * How a test's child process (the *-child.ts scripts here) reports a failure:
 * one JSON line on stdout, {"ok":false,"error":{...}}, and exit status 1.
 */
import { OatsError } from "../../src/core/errors.js";

/** An error as a child reports it: an OatsError as its JSON, anything else as not-an-oats-error with its stack. */
export function errorPayload(error: unknown) {
  return error instanceof OatsError
    ? error.toJSON()
    : { code: "not-an-oats-error", message: String((error as Error)?.stack ?? error) };
}

/** Write {"ok":false,"error":..., ...extra} as the child's one line on stdout and set its exit status to 1. */
export function reportFailure(error: unknown, extra: Record<string, unknown> = {}): void {
  process.stdout.write(`${JSON.stringify({ ok: false, error: errorPayload(error), ...extra })}\n`);
  process.exitCode = 1;
}
