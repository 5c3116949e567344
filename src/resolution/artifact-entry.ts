import type { capabilityRows } from "../retention/index.js";
import { TREE_EXEC, TREE_LEGACY } from "../retention/index.js";
import type { ResolutionRecord } from "./record.js";

/**
 * A record's entry for one capability: the exec revision it runs, the package
 * it came from as the lock recorded it, and the lock's own legacy integrity,
 * kept as evidence of what the lock vouched for.
 */
export function capabilityArtifactEntry(
  id: string,
  rows: ReturnType<typeof capabilityRows>,
  execValue: string,
): ResolutionRecord["artifacts"][string] {
  return {
    artifact: { kind: "capability", key: id, integrity: { format: TREE_EXEC, value: execValue } },
    package: {
      id: rows.packageId,
      source: rows.package.source,
      version: rows.package.version,
      commit: rows.package.commit ?? null,
      integrity: rows.package.integrity ?? null,
    },
    legacyIntegrity: { format: TREE_LEGACY, value: rows.capability.integrity },
  };
}
