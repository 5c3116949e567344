/**
 * What the tests expect of a refusal: an OatsError with a code and, where a
 * test asks, details, a kind or anything else. One place for what test files
 * used to restate each in its own words (refusal, isCode, refused, errorOf...).
 *
 * Side-effect free (no temporary directories, no hooks), so a test file that
 * manages its own environment may import it. The CLI's refusals, which run the
 * built CLI, are in ../helpers.ts beside runJson.
 */
import assert from "node:assert/strict";
import { OatsError } from "../../src/core/errors.js";

/** Keys that must be in a refusal's details, each deep-equal to its value. */
export type Details = Record<string, unknown>;

/** Any further assertion on a refusal already known to be an OatsError of the right code. */
export type Check = (error: OatsError) => void;

/**
 * What a refusal must carry besides its code: a string is its details.reason, an object lists details (each key
 * deep-equal), a function asserts anything else. `undefined` asks nothing, so an optional argument passes straight on.
 */
export type Expected = string | Details | Check | undefined;

function shown(error: unknown): string {
  return error instanceof Error ? String(error.stack ?? error) : String(error);
}

/** `error` is an OatsError of `code` that carries everything `expected` asks for. */
export function assertRefusal(error: unknown, code: string, ...expected: Expected[]): asserts error is OatsError {
  assert.ok(error instanceof OatsError, `expected an OatsError ${code}, got ${shown(error)}`);
  assert.equal(error.code, code, error.message);
  for (const item of expected) {
    if (item === undefined) continue;
    if (typeof item === "string") assert.equal(error.details["reason"], item, error.message);
    else if (typeof item === "function") item(error);
    else
      for (const [key, value] of Object.entries(item))
        assert.deepEqual(error.details[key], value, `details.${key} (${error.message})`);
  }
}

/** The validator `assert.throws` and `assert.rejects` take: passes exactly when `assertRefusal` does. */
export function refusal(code: string, ...expected: Expected[]): (error: unknown) => true {
  return (error: unknown) => {
    assertRefusal(error, code, ...expected);
    return true;
  };
}

/** The OatsError `promise` rejects with, for a test to look into; a failure if it fulfils or rejects otherwise. */
export async function rejection(promise: Promise<unknown>): Promise<OatsError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof OatsError, `expected an OatsError, got ${shown(error)}`);
    return error;
  }
  assert.fail("expected a refusal");
}

/** `promise` is refused as `assertRefusal` says; the error comes back for more checks. */
export async function expectRefusal(
  promise: Promise<unknown>,
  code: string,
  ...expected: Expected[]
): Promise<OatsError> {
  const error = await rejection(promise);
  assertRefusal(error, code, ...expected);
  return error;
}

/** The refusal of a file that changed while it was read (invalid-artifact, changed-while-reading), naming `path`. */
export function refusedAsChanged(action: Promise<unknown>, path: string): Promise<OatsError> {
  return expectRefusal(action, "invalid-artifact", { reason: "changed-while-reading", path });
}

/**
 * The kind the contract (section 6) gives each code these tests check it of, written out here rather than taken from
 * src/, so that the tests hold the library to the contract.
 */
export const CONTRACT_KIND: Readonly<Record<string, string>> = {
  "artifact-not-found": "missing",
  "resolution-not-found": "missing",
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
};

/** Check: the refusal's kind is the one CONTRACT_KIND gives its code. */
export const contractKind: Check = (error) => assert.equal(error.kind, CONTRACT_KIND[error.code], "kind");

/** Check: the refusal's kind is `kind`. */
export const ofKind =
  (kind: string): Check =>
  (error) =>
    assert.equal(error.kind, kind);

/** Check: the refusal has a message. */
export const hasMessage: Check = (error) => assert.ok(error.message.length > 0);
