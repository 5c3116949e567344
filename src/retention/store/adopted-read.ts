import { lstat } from "node:fs/promises";
import { OatsError } from "../../core/index.js";
import type { TreeDigests } from "../digest/tree.js";
import type { PublishPlan } from "./publish.js";

/**
 * The result of a read the caller made of the tree it hands to
 * publishAdopted: every file read and hashed in `formats`, and the
 * manifest document built from the same read. For a tree this process wrote itself, with nothing in it writable by
 * anyone else (the extractor: files 0644/0755 set by fchmod, directories
 * 0755, every component above them ours and 0755), nobody but this user can
 * change it between that read and the move, so reading it back would only
 * hash the same page-cache bytes again. What another user might still do is
 * rename a directory above it, where a parent is writable by them, and put
 * another tree at the path; a tree of ours they cannot move (that needs
 * write permission on it), so the move is checked to have taken the very
 * directory that was read (`listing.root` dev and ino).
 */
export interface AdoptVerified {
  readonly digests: TreeDigests;
  /** The revision manifest of that read (a ManifestRecorder fed as its sink). */
  readonly manifest: { bytes(): Buffer };
}

/** The caller's verified read (AdoptVerified), once the staged directory is shown to be the one it read. */
export async function adoptedAsVerified(
  plan: Pick<PublishPlan, "kind" | "key" | "listing" | "formats">,
  verified: AdoptVerified,
  staging: string,
): Promise<{ staged: TreeDigests; manifest: { bytes(): Buffer } }> {
  const stats = await lstat(staging);
  const root = plan.listing.root;
  if (!stats.isDirectory() || stats.dev !== root.dev || stats.ino !== root.ino) {
    throw new OatsError(
      "integrity-mismatch",
      `${plan.kind} ${plan.key}: the tree moved into staging is not the directory that was verified: ${root.absolute}`,
      {
        kind: plan.kind,
        key: plan.key,
        source: root.absolute,
        staging,
        reason: "adopted-tree-replaced",
      },
    );
  }
  for (const format of plan.formats)
    if (verified.digests[format] === undefined)
      throw new OatsError("internal-error", `verified read lacks ${format}`, { format });
  return { staged: verified.digests, manifest: verified.manifest };
}
