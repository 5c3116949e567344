import { join } from "node:path";
import type { TreeListing } from "./digest/walk.js";
import { assertArtifactKey, assertArtifactKind, type ArtifactKind } from "./store/ids.js";
import { type IntegrityInput, TREE_EXEC, parseTreeIntegrity } from "./digest/integrity.js";
import { receipt, type ArtifactReceipt } from "./receipt.js";
import { checkSourceOutsideStore } from "./source-check.js";
import type { AdoptVerified } from "./store/adopted-read.js";
import { inspectStore, resolveScope } from "./store/components.js";
import { storeRoot } from "./store/layout.js";
import { withPublishLease } from "./store/lease.js";
import { DEFAULT_LOCK_WAIT_MS } from "./store/publish-lock.js";
import { publishAdopted, revisionParentSegments } from "./store/publish.js";
import type { RetainOptions } from "./retain.js";

/** A tree the caller walked, checked (symlinks inside it) and read in full in a directory only it can write to. */
export interface VerifiedTree extends AdoptVerified {
  /** The walk the read followed: `root.absolute` is the tree, `root.dev`/`ino` the directory that was read. */
  readonly listing: TreeListing;
}

/**
 * adoptTree of a tree the caller has already walked, checked and hashed into
 * its manifest (importBundle's verification of a private extraction
 * directory): the same publication (move, modes, durability, the expected
 * digest, rename under the lock) without a second walk and read of the tree.
 * See AdoptVerified for why that read guards nothing here.
 */
export function adoptVerifiedTree(
  scope: string,
  request: { readonly kind: ArtifactKind; readonly key: string; readonly expect: IntegrityInput },
  verified: VerifiedTree,
  options: Pick<RetainOptions, "lockWaitMs" | "signal" | "maxDepth"> = {},
): Promise<ArtifactReceipt> {
  return withPublishLease(scope, async () => {
    const kind = assertArtifactKind(request.kind);
    const key = assertArtifactKey(kind, request.key);
    const expected = parseTreeIntegrity(request.expect, [TREE_EXEC]);
    const realScope = resolveScope(scope);
    const segments = revisionParentSegments(key, TREE_EXEC);
    inspectStore(realScope, kind, segments);
    await checkSourceOutsideStore(verified.listing.root.absolute, [
      storeRoot(realScope, kind),
      join(storeRoot(realScope, kind), ...segments),
    ]);
    const published = await publishAdopted({
      scope: realScope,
      kind,
      key,
      listing: verified.listing,
      nameFormat: TREE_EXEC,
      expected: expected.value,
      formats: [TREE_EXEC],
      lockWaitMs: options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS,
      verified: { digests: verified.digests, manifest: verified.manifest },
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.maxDepth === undefined ? {} : { maxDepth: options.maxDepth }),
    });
    return receipt(
      kind,
      key,
      TREE_EXEC,
      published.digests,
      published.dir,
      published.status,
      published.leftOut,
      published.files,
    );
  });
}
