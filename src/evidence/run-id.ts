import { OatsError } from "../errors.js";

/**
 * Run ids as the outbox and the transports spell them: the sealed record's
 * oats.json.v1 digest, `oats.json.v1:<hex>` (the shared plan's form). A
 * `sha256-<hex>` spelling of the same digest is accepted on input, so a
 * change of spelling in the run store does not strand queued entries; the
 * hex is what keys everything on disk.
 */

export const RUN_ID_PREFIX = "oats.json.v1:";
const RUN_ID = /^(?:oats\.json\.v1:|sha256-)([0-9a-f]{64})$/;
const BYTES_DIGEST = /^(?:oats\.bytes\.v1:|sha256-)([0-9a-f]{64})$/;

export function runIdFromHex(hex: string): string {
  return `${RUN_ID_PREFIX}${hex}`;
}

/** The 64 hex digits of a run id; `invalid-input` for anything else. */
export function runHex(runId: unknown): string {
  const match = typeof runId === "string" ? RUN_ID.exec(runId) : null;
  if (!match) throw new OatsError("invalid-input", `not a run id: ${JSON.stringify(runId)}`, { runId });
  return match[1]!;
}

/** The hex of an oats.bytes.v1 digest in either spelling, or null. */
export function bytesDigestHex(digest: unknown): string | null {
  const match = typeof digest === "string" ? BYTES_DIGEST.exec(digest) : null;
  return match ? match[1]! : null;
}
