import { existsSync } from "node:fs";
import { OatsError, isOatsError } from "../core/index.js";
import type { ProgressListener } from "./digest/tree.js";
import { assertIdentifier } from "./store/ids.js";
import { TREE_EXEC, TREE_LEGACY, integrityText, parseTreeIntegrity } from "./digest/integrity.js";
import { capabilityRows, type OatsLockInput, parseLock } from "./oats-lock.js";
import { checkProvenance, expectedProvenance } from "./provenance.js";
import { receipt, type ArtifactReceipt } from "./receipt.js";
import { inspectStore, resolveScope } from "./store/components.js";
import { type ArtifactRef, type ArtifactRefInput, parseArtifactRef, retainedTreeDir } from "./store/layout.js";
import { revisionParentSegments, verifyRevision } from "./store/publish.js";
import type { Measure } from "./parallel/pool.js";

/**
 * Verification reads the stored revision only. It consults no source, no
 * network and no approval, and repairs nothing: a damaged revision is a
 * refusal with the expected and actual digests.
 */

export interface VerifyOptions {
  readonly onProgress?: ProgressListener;
  /** The deepest path the revision may have (segments); DEFAULT_MAX_DEPTH otherwise. */
  readonly maxDepth?: number;
}

/**
 * Verify any retained tree named by `{kind, key, integrity}` by rehashing the stored revision. Refuses a
 * bad reference (`invalid-artifact-reference`), a revision not retained (`artifact-not-found`) and one whose
 * content no longer has its digest (`integrity-mismatch`, with the expected and actual digests).
 */
export function verifyTree(
  scope: string,
  ref: ArtifactRefInput,
  options: VerifyOptions = {},
): Promise<ArtifactReceipt> {
  return verifyTreeWith(scope, ref, options);
}

/** verifyTree with the walk and hash run by `measure` (a worker lane of parallel/pool.ts); verifyTrees uses it. */
export async function verifyTreeWith(
  scope: string,
  ref: ArtifactRefInput,
  options: VerifyOptions,
  measure?: Measure,
): Promise<ArtifactReceipt> {
  const parsed = parseArtifactRef(ref);
  const realScope = resolveScope(scope);
  const segments = revisionParentSegments(parsed.key, parsed.integrity.format as typeof TREE_LEGACY | typeof TREE_EXEC);
  const dir = retainedTreeDir(realScope, parsed);
  if (!inspectStore(realScope, parsed.kind, segments).complete) {
    throw new OatsError(
      "artifact-not-found",
      `${parsed.kind} ${parsed.key} has no retained revision ${parsed.integrity.format}:${parsed.integrity.value}` +
        execMeant(realScope, parsed),
      {
        kind: parsed.kind,
        key: parsed.key,
        expected: parsed.integrity.value,
        dir,
      },
    );
  }
  const nameFormat = parsed.integrity.format === TREE_LEGACY ? TREE_LEGACY : TREE_EXEC;
  const formats = nameFormat === TREE_LEGACY ? ([TREE_LEGACY, TREE_EXEC] as const) : ([TREE_EXEC] as const);
  const digests = await verifyRevision(
    {
      kind: parsed.kind,
      key: parsed.key,
      nameFormat,
      formats,
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      ...(options.maxDepth === undefined ? {} : { maxDepth: options.maxDepth }),
    },
    dir,
    parsed.integrity.value,
    measure,
  ).catch((error: unknown) => {
    if (!isOatsError(error) || error.code !== "artifact-not-found") throw error;
    const meant = execMeant(realScope, parsed);
    throw meant ? new OatsError("artifact-not-found", `${error.message}${meant}`, error.details) : error;
  });
  return receipt(parsed.kind, parsed.key, nameFormat, digests, dir, "verified");
}

/** Verify the capability revision a lock names, and its provenance against the lock's rows. */
export async function verifyRetainedCapability(
  scope: string,
  capabilityId: string,
  lock: OatsLockInput,
  options: VerifyOptions = {},
): Promise<ArtifactReceipt> {
  const id = assertIdentifier(capabilityId, "capability id");
  const rows = capabilityRows(parseLock(lock), id);
  const integrity = parseTreeIntegrity(rows.capability.integrity, [TREE_LEGACY]);
  const verified = await verifyTree(scope, { kind: "capability", key: id, integrity }, options);
  checkProvenance(verified.dir, expectedProvenance(id, rows));
  return verified;
}

/** When a bare (legacy) digest names a retained revision's exec digest: which prefix was meant. */
function execMeant(scope: string, ref: ArtifactRef): string {
  if (ref.integrity.format !== TREE_LEGACY) return "";
  const exec: ArtifactRef = { ...ref, integrity: { format: TREE_EXEC, value: ref.integrity.value } };
  if (!existsSync(retainedTreeDir(scope, exec))) return "";
  return (
    `; a bare sha256-... is ${TREE_LEGACY}, and this is the ${TREE_EXEC} digest of a retained revision: ` +
    `write ${integrityText(exec.integrity)}`
  );
}
