import type { TreeListing } from "./digest/walk.js";
import { assertArtifactKey, assertArtifactKind, type ArtifactKind } from "./store/ids.js";
import { type IntegrityInput, TREE_EXEC, parseTreeIntegrity } from "./digest/integrity.js";
import { publishedReceipt, type ArtifactReceipt } from "./receipt.js";
import type { AdoptVerified } from "./store/adopted-read.js";
import { resolveScope } from "./store/components.js";
import { withPublishLease } from "./store/lease.js";
import { publishAdopted, revisionParentSegments } from "./store/publish.js";
import { checkOutsideStore, planOptions, type RetainOptions } from "./retain.js";

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
    await checkOutsideStore(realScope, kind, segments, verified.listing.root.absolute);
    const published = await publishAdopted({
      scope: realScope,
      kind,
      key,
      listing: verified.listing,
      nameFormat: TREE_EXEC,
      expected: expected.value,
      formats: [TREE_EXEC],
      verified: { digests: verified.digests, manifest: verified.manifest },
      ...planOptions(options),
    });
    return publishedReceipt(kind, key, TREE_EXEC, published);
  });
}
