import { join } from "node:path";
import { z } from "zod";
import { OatsError, OPERATOR_MAX_DEPTH, parseJsonText } from "../core/index.js";
import { readRegularFile } from "./store/files.js";
import type { CapabilityRow, PackageRow } from "./oats-lock.js";

/**
 * `.oats-installation.json`, the provenance an installer writes inside every
 * materialized capability. It is inside the hashed tree, so it cannot drift
 * without the integrity changing; here it is compared with the lock rows the
 * capability claims to come from, because a lock row can be edited to
 * match a repaired digest but not a disputed origin.
 */
export const PROVENANCE_FILE = ".oats-installation.json";
/** Far above any real provenance file (a few hundred bytes): a bound, not a budget. */
const MAX_PROVENANCE_BYTES = 1 << 20;

const provenanceSchema = z
  .object({
    schemaVersion: z.literal(1),
    capability: z.string(),
    version: z.string(),
    package: z.string(),
    packageVersion: z.string(),
    source: z.string(),
    commit: z.string().nullable().optional(),
    packagePath: z.string().nullable().optional(),
    capabilityPath: z.string().nullable().optional(),
  })
  .strict();

export type Provenance = z.infer<typeof provenanceSchema>;

export function expectedProvenance(
  capabilityId: string,
  rows: { capability: CapabilityRow; packageId: string; package: PackageRow },
): Provenance {
  return {
    schemaVersion: 1,
    capability: capabilityId,
    version: rows.capability.version,
    package: rows.packageId,
    packageVersion: rows.package.version,
    source: rows.package.source,
    commit: rows.package.commit ?? null,
    packagePath: rows.package.path ?? null,
    capabilityPath: rows.capability.path ?? null,
  };
}

/** Compare the provenance file in `treeDir` with the lock rows; refuse with the first field that differs. */
export function checkProvenance(treeDir: string, expected: Provenance): void {
  const path = join(treeDir, PROVENANCE_FILE);
  const refuse = (message: string, details: Record<string, unknown>) =>
    new OatsError("provenance-mismatch", `capability ${expected.capability}: ${message}`, {
      capability: expected.capability,
      file: PROVENANCE_FILE,
      ...details,
    });
  // The tree may be a source another user owns (repair --from): one descriptor, never a symlink, never a FIFO's wait.
  const text = readRegularFile(path, {
    limit: MAX_PROVENANCE_BYTES,
    refuse: (failure, details) =>
      refuse(
        failure === "missing" || failure === "unreadable"
          ? `${PROVENANCE_FILE} is missing or unreadable`
          : `${PROVENANCE_FILE} cannot be read (${failure})`,
        { errno: details["errno"], ...(failure === "missing" || failure === "unreadable" ? {} : { reason: failure }) },
      ),
  }).toString("utf8");
  const json = parseJsonText(text, OPERATOR_MAX_DEPTH, (reason, message, details) =>
    reason === "syntax"
      ? refuse(`${PROVENANCE_FILE} is not JSON`, {})
      : refuse(`${PROVENANCE_FILE}: ${message}`, { reason, ...details }),
  );
  const parsed = provenanceSchema.safeParse(json);
  if (!parsed.success)
    throw refuse(
      `${PROVENANCE_FILE} is malformed: ${parsed.error.issues[0]?.path.join(".")} ${parsed.error.issues[0]?.message}`,
      {},
    );
  const actual = {
    ...parsed.data,
    commit: parsed.data.commit ?? null,
    packagePath: parsed.data.packagePath ?? null,
    capabilityPath: parsed.data.capabilityPath ?? null,
  };
  for (const field of Object.keys(expected) as (keyof Provenance)[]) {
    if (actual[field] !== expected[field]) {
      throw refuse(
        `provenance field ${field} is ${JSON.stringify(actual[field])}, the lock ` +
          `says ${JSON.stringify(expected[field])}`,
        {
          field,
          expected: expected[field],
          actual: actual[field],
        },
      );
    }
  }
}
