import { z } from "zod";
import { OatsError, bytesDigest, canonicalJsonBytes } from "../core/index.js";
import { RESULTS } from "./log-format.js";

/**
 * The sealed run record (`oats.run.v1`), written as canonical `oats.json.v1`
 * bytes; the run's id is the digest of those bytes (`sha256-<64 hex>`, the
 * same form as a resolution id; an `oats.json.v1:` prefix is accepted where
 * an id is read). Names, digests and counts only: never a credential value,
 * never a line of the log.
 */

export const RUN_FORMAT = "oats.run.v1";
const digest = z.string().regex(/^sha256-[0-9a-f]{64}$/, "must be sha256-<64 lowercase hex>");
const auditRef = z.object({ seq: z.number().int().nonnegative(), hash: z.string().min(1) }).strict();
const stamp = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3,6}Z$/);
export const HANDLE_PATTERN = /^\d{8}T\d{6}Z-[0-9a-f]{8}$/;

export const evidenceSectionSchema = z
  .object({
    required: z.array(z.string().min(1)),
    captured: z.array(z.string().min(1)),
    gaps: z.array(z.object({ class: z.string().min(1), reason: z.string() }).strict()),
    status: z.enum(["complete", "failed-evidence"]),
  })
  .strict();

export const deliverySectionSchema = z
  .object({
    posture: z.enum(["delivered-later", "buffered", "none"]),
    to: z.string().nullable(),
  })
  .strict();

export const runRecordSchema = z
  .object({
    format: z.literal(RUN_FORMAT),
    handle: z.string().regex(HANDLE_PATTERN),
    job: z.string().min(1),
    resolution: digest,
    composition: z.object({ kind: z.string().min(1), key: z.string().min(1), integrity: z.string().min(1) }).strict(),
    approval: auditRef,
    dispatchAudit: auditRef,
    startAudit: auditRef,
    principal: z.string().min(1),
    harness: z.string().nullable(),
    classification: z.string().min(1),
    /** Names of the child's environment variables (values are never recorded). */
    environment: z.array(z.string()),
    startedAt: stamp,
    endedAt: stamp,
    exit: z
      .object({
        code: z.number().int().min(0).max(255).nullable(),
        signal: z
          .string()
          .regex(/^SIG[A-Z0-9]+$/)
          .nullable(),
      })
      .strict(),
    result: z.enum(RESULTS),
    log: z.object({ digest, lines: z.number().int().nonnegative(), bytes: z.number().int().nonnegative() }).strict(),
    redactions: z.array(z.object({ rule: z.string().min(1), count: z.number().int().nonnegative() }).strict()),
    evidence: evidenceSectionSchema,
    delivery: deliverySectionSchema,
  })
  .strict();

export type RunRecord = z.infer<typeof runRecordSchema>;
export type EvidenceSection = z.infer<typeof evidenceSectionSchema>;
export type DeliverySection = z.infer<typeof deliverySectionSchema>;

/** The record's exact bytes and its id; a record the schema refuses is an internal error of the caller. */
export function sealRecord(record: RunRecord): { bytes: Buffer; id: string } {
  const checked = runRecordSchema.safeParse(record);
  if (!checked.success)
    throw new OatsError(
      "internal-error",
      `run record does not satisfy ${RUN_FORMAT}: ` +
        `${checked.error.issues.map((issue) => `${issue.path.join("/")}: ${issue.message}`).join("; ")}`,
      { reason: "run-record-schema" },
    );
  const bytes = canonicalJsonBytes(record);
  return { bytes, id: bytesDigest(bytes) };
}

/** Parse stored record bytes: canonical JSON of a valid record, or `invalid-artifact` naming why. */
export function parseRunRecord(bytes: Buffer, origin: string): { record: RunRecord; id: string } {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch (error) {
    throw new OatsError("invalid-artifact", `${origin} is not JSON: ${(error as Error).message}`, {
      origin,
      reason: "run-record-malformed",
    });
  }
  const checked = runRecordSchema.safeParse(value);
  if (!checked.success) {
    throw new OatsError(
      "invalid-artifact",
      `${origin} is not an ${RUN_FORMAT} record: ${checked.error.issues
        .slice(0, 3)
        .map((issue) => `${issue.path.join("/")}: ${issue.message}`)
        .join("; ")}`,
      { origin, reason: "run-record-malformed" },
    );
  }
  if (!canonicalJsonBytes(checked.data).equals(bytes)) {
    throw new OatsError("invalid-artifact", `${origin} is not in canonical oats.json.v1 form`, {
      origin,
      reason: "run-record-not-canonical",
    });
  }
  return { record: checked.data, id: bytesDigest(bytes) };
}

/** A run id as given (`sha256-<hex>` or `oats.json.v1:sha256-<hex>`, or a prefix of either) without its framing
 * prefix. */
export function bareRunRef(ref: string): string {
  return ref.startsWith("oats.json.v1:") ? ref.slice("oats.json.v1:".length) : ref;
}
