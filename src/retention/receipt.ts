import type { TreeDigests } from "./digest/tree.js";
import type { ArtifactKind } from "./store/ids.js";
import { TREE_EXEC, type Integrity, type TreeFormat } from "./digest/integrity.js";
import type { LeftOut } from "./store/empty-directories.js";
import type { FilesOutcome } from "./store/shared-layer.js";
import type { PublishResult } from "./store/publish.js";

/** What every retention and verification call returns. */
export interface ArtifactReceipt {
  readonly kind: ArtifactKind;
  readonly key: string;
  /** The integrity that names the revision (tree-legacy for lock-named capabilities, else tree-exec). */
  readonly integrity: Integrity;
  /** The oats.tree-exec.v1 digest of the same tree, measured in the same operation. */
  readonly execIntegrity: Integrity;
  readonly dir: string;
  readonly status: "retained" | "kept" | "verified";
  /**
   * A retain only, when the source held directories with no file or symlink
   * at any depth: identity does not cover them, so the store does not hold
   * them (store/empty-directories.ts).
   */
  readonly leftOut?: LeftOut;
  /**
   * A retain that published a new revision: how many of its regular files
   * were linked to files the shared layer held, stored new into it, or
   * copied (a link refused: `fallback` names why), and the held files that
   * did not verify and were replaced (store/shared-layer.ts).
   */
  readonly files?: FilesOutcome;
}

export function receipt(
  kind: ArtifactKind,
  key: string,
  nameFormat: TreeFormat,
  digests: TreeDigests,
  dir: string,
  status: ArtifactReceipt["status"],
  left?: LeftOut,
  files?: FilesOutcome,
): ArtifactReceipt {
  return {
    kind,
    key,
    integrity: { format: nameFormat, value: digests[nameFormat]! },
    execIntegrity: { format: TREE_EXEC, value: digests[TREE_EXEC]! },
    dir,
    status,
    ...(left ? { leftOut: left } : {}),
    ...(files ? { files } : {}),
  };
}

/** The receipt of a revision a retain published or kept, named in `nameFormat`. */
export function publishedReceipt(
  kind: ArtifactKind,
  key: string,
  nameFormat: TreeFormat,
  published: PublishResult,
): ArtifactReceipt {
  const { digests, dir, status, leftOut, files } = published;
  return receipt(kind, key, nameFormat, digests, dir, status, leftOut, files);
}
