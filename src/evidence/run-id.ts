import { OatsError } from "../core/index.js";

/**
 * Run ids as the outbox and the transports spell them: the run store's form,
 * `sha256-<hex>` (the digest of record.json's exact bytes, like a
 * resolution id). `oats.json.v1:sha256-<hex>` and `oats.json.v1:<hex>` are
 * accepted on input; the hex is what keys everything on disk.
 */

const RUN_ID = /^(?:oats\.json\.v1:)?(?:sha256-)?([0-9a-f]{64})$/;
const BYTES_DIGEST = /^(?:oats\.bytes\.v1:)?(?:sha256-)?([0-9a-f]{64})$/;

export function runIdFromHex(hex: string): string {
  return `sha256-${hex}`;
}

/** The 64 hex digits of a run id; `invalid-input` for anything else. */
export function runHex(runId: unknown): string {
  const match =
    typeof runId === "string" && (runId.startsWith("sha256-") || runId.startsWith("oats.json.v1:"))
      ? RUN_ID.exec(runId)
      : null;
  if (!match) throw new OatsError("invalid-input", `not a run id: ${JSON.stringify(runId)}`, { runId });
  return match[1]!;
}

/** The hex of an oats.bytes.v1 digest in any accepted spelling, or null. */
export function bytesDigestHex(digest: unknown): string | null {
  const match = typeof digest === "string" ? BYTES_DIGEST.exec(digest) : null;
  return match ? match[1]! : null;
}
