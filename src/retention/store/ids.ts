import { z } from "zod";
import { OatsError } from "../../core/index.js";

/** capability id, capture name, instance name, job id (contract section 4). */
export const IDENTIFIER_PATTERN = /^[a-z0-9][a-z0-9._-]*$/;
export const IDENTIFIER_MAX_LENGTH = 214;

export const identifierSchema = z
  .string()
  .max(IDENTIFIER_MAX_LENGTH, `at most ${IDENTIFIER_MAX_LENGTH} characters`)
  .regex(IDENTIFIER_PATTERN, "must match ^[a-z0-9][a-z0-9._-]*$");

/** A source artifact is keyed by the 64-hex part of its identity's oats.json.v1 digest. */
export const SOURCE_KEY_PATTERN = /^[0-9a-f]{64}$/;

export const ARTIFACT_KINDS = ["capability", "source", "capture"] as const;
export type ArtifactKind = (typeof ARTIFACT_KINDS)[number];
export const artifactKindSchema = z.enum(ARTIFACT_KINDS);

export function assertIdentifier(value: unknown, what = "identifier"): string {
  const parsed = identifierSchema.safeParse(value);
  if (!parsed.success) {
    throw new OatsError(
      "invalid-artifact-reference",
      `invalid ${what} ${JSON.stringify(value)}: ${parsed.error.issues[0]?.message ?? "malformed"}`,
      {
        [what]: value,
      },
    );
  }
  return parsed.data;
}

/** The key an artifact of `kind` is stored under: an identifier, or a 64-hex source key. */
export function assertArtifactKey(kind: ArtifactKind, key: unknown): string {
  if (kind === "source") {
    if (typeof key !== "string" || !SOURCE_KEY_PATTERN.test(key)) {
      throw new OatsError(
        "invalid-artifact-reference",
        `invalid source key ${JSON.stringify(key)}: must be the 64 lowercase hex ` +
          `digits of the identity's oats.json.v1 digest`,
        { key },
      );
    }
    return key;
  }
  return assertIdentifier(key, kind === "capability" ? "capability id" : "capture name");
}

export function assertArtifactKind(kind: unknown): ArtifactKind {
  const parsed = artifactKindSchema.safeParse(kind);
  if (!parsed.success) {
    throw new OatsError(
      "invalid-artifact-reference",
      `invalid artifact kind ${JSON.stringify(kind)}: expected capability, source or capture`,
      { kind },
    );
  }
  return parsed.data;
}
