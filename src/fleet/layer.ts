import { createHash } from "node:crypto";
import { closeSync, constants, openSync } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode } from "../errors.js";
import { TarWriter, TreeSink } from "../acquisition/tar-writer.js";
import { digestListing } from "../retention/digest/tree.js";
import { walkTree } from "../retention/digest/walk.js";
import { TREE_EXEC, integrityText, type Integrity } from "../retention/integrity.js";
import type { ArtifactKind } from "../retention/ids.js";
import { retainedTreeDir } from "../retention/store/layout.js";
import { verifyTree } from "../retention/verify.js";
import type { TreeLayer } from "./mapping.js";

/**
 * Write one retained tree as its fleet layer: the bundle writer's tar with
 * the entries at the archive root (a `./` directory entry first, so even an
 * empty tree is a tar with one entry). The tree is hashed from the very
 * bytes written, as export does, so a revision damaged or changed while it
 * is read never becomes a layer; the layer's OCI digest is taken from the
 * same bytes as they are written.
 */
export async function writeTreeLayer(
  realScope: string,
  ref: { kind: ArtifactKind; key: string; integrity: Integrity },
  dir: string,
  name: string,
): Promise<TreeLayer & { path: string }> {
  if (ref.integrity.format !== TREE_EXEC) throw new OatsError("internal-error", "a tree layer is written from an oats.tree-exec.v1 reference", { integrity: integrityText(ref.integrity) });
  const source = retainedTreeDir(realScope, ref);
  const listing = await walkTree(source);
  const path = join(dir, name);
  const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  const hash = createHash("sha256");
  let size: number;
  try {
    const tar = new TarWriter(fd, hash);
    tar.header({ path: "./", type: "Directory", mode: 0o755, size: 0 });
    const digests = await digestListing(listing, [TREE_EXEC], { sink: new TreeSink(tar, ""), sinkOrder: "bytes" });
    if (digests[TREE_EXEC] !== ref.integrity.value) {
      // The full verification names the first path that differs.
      await verifyTree(realScope, ref);
      throw new OatsError("integrity-mismatch", `${ref.kind} ${ref.key}: expected ${integrityText(ref.integrity)}, read ${TREE_EXEC}:${digests[TREE_EXEC]} while writing its layer`, {
        kind: ref.kind,
        key: ref.key,
        expected: ref.integrity.value,
        actual: digests[TREE_EXEC],
        dir: source,
        reason: "changed-while-exporting",
      });
    }
    tar.end();
    size = tar.bytes;
  } catch (error) {
    if (error instanceof OatsError) throw error;
    throw new OatsError("internal-error", `cannot write the layer of ${ref.kind} ${ref.key}: ${errnoCode(error) ?? String(error)}`, { kind: ref.kind, key: ref.key });
  } finally {
    closeSync(fd);
  }
  return { kind: ref.kind, key: ref.key, integrity: integrityText(ref.integrity), digest: `sha256:${hash.digest("hex")}`, size, path };
}
