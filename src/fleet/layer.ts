import { createHash } from "node:crypto";
import { Readable } from "node:stream";
import { OatsError, errnoCode } from "../core/index.js";
import { TarWriter, TreeSink, type TarOutput } from "../acquisition/index.js";
import {
  digestListing,
  walkTree,
  TREE_EXEC,
  integrityText,
  type Integrity,
  retainedTreeDir,
  verifyTree,
  linksSettled,
} from "../retention/index.js";
import type { FileConsumer, FileInfo, FileEntry, SymlinkEntry, ArtifactKind } from "../retention/index.js";
import type { TreeLayer } from "./mapping.js";
import type { BlobSource } from "../oci/index.js";

/**
 * A retained tree's fleet layer: the bundle writer's tar with the entries at
 * the archive root (a `./` directory entry first, so even an empty tree is a
 * tar with one entry). The layer is never written to disk. Push generates it
 * twice: once into a hash only (its OCI digest and size, for the HEAD and
 * the manifest), and, when the registry lacks it, again straight into the
 * upload. Each pass hashes the tree from the very bytes it tars, as export
 * does, so a revision damaged or changed while it is read never becomes a
 * layer; the second pass hashes the tar it sends, and a tar that is not the
 * first pass's digest and size (a tree changed between the passes) is
 * refused before its last bytes leave (the registry, told the first digest,
 * would refuse it as well).
 */

type TreeRef = { kind: ArtifactKind; key: string; integrity: Integrity };

/** Test-only: called between the hashing pass and the upload pass of a tree (the fault-injection tests change the
 * tree there). */
export const layerTestHooks: { beforeUploadPass?: (dir: string) => void } = {};

/** Waits for the consumer after each leaf when asked to (the upload stream's backpressure). */
class PacedSink implements FileConsumer {
  constructor(
    private readonly inner: TreeSink,
    private readonly pace: () => void | Promise<void>,
  ) {}
  whole(entry: FileEntry, info: FileInfo, data: Buffer): void | Promise<void> {
    this.inner.whole(entry, info, data);
    return this.pace();
  }
  start(entry: FileEntry, info: FileInfo): void | Promise<void> {
    this.inner.start(entry, info);
    return this.pace();
  }
  chunk(data: Buffer): void | Promise<void> {
    this.inner.chunk(data);
    return this.pace();
  }
  end(entry: FileEntry, info: FileInfo): void | Promise<void> {
    this.inner.end(entry, info);
    return this.pace();
  }
  symlink(entry: SymlinkEntry): void | Promise<void> {
    this.inner.symlink(entry);
    return this.pace();
  }
}

/**
 * With `checkTree`, the tree is hashed as oats.tree-exec.v1 from the bytes
 * tarred and must be `ref`'s. The upload pass goes without: the tar encodes
 * every path, type, exec bit, content and link target, so a tar with the
 * hashing pass's sha256 and size is that pass's verified tree (one sha256
 * pass over the tree fewer).
 */
async function generateLayer(
  realScope: string,
  ref: TreeRef,
  out: TarOutput,
  checkTree: boolean,
  pace?: () => void | Promise<void>,
): Promise<{ digest: string; size: number }> {
  if (ref.integrity.format !== TREE_EXEC)
    throw new OatsError("internal-error", "a tree layer is made from an oats.tree-exec.v1 reference", {
      integrity: integrityText(ref.integrity),
    });
  const source = retainedTreeDir(realScope, ref);
  const hash = createHash("sha256");
  const tar = new TarWriter(out, hash);
  try {
    const listing = await walkTree(source);
    tar.header({ path: "./", type: "Directory", mode: 0o755, size: 0 });
    const sink = new TreeSink(tar, "");
    const digests = await digestListing(listing, checkTree ? [TREE_EXEC] : [], {
      sink: pace ? new PacedSink(sink, pace) : sink,
      sinkOrder: "bytes",
    });
    if (checkTree && digests[TREE_EXEC] !== ref.integrity.value) {
      // The full verification names the first path that differs.
      await verifyTree(realScope, ref);
      throw new OatsError(
        "integrity-mismatch",
        `${ref.kind} ${ref.key}: expected ${integrityText(ref.integrity)}, read ` +
          `${TREE_EXEC}:${digests[TREE_EXEC]} while making its layer`,
        {
          kind: ref.kind,
          key: ref.key,
          expected: ref.integrity.value,
          actual: digests[TREE_EXEC],
          dir: source,
          reason: "changed-while-exporting",
        },
      );
    }
    tar.end();
  } catch (error) {
    if (error instanceof OatsError || error === STOPPED) throw error;
    throw new OatsError(
      "internal-error",
      `cannot make the layer of ${ref.kind} ${ref.key}: ${errnoCode(error) ?? String(error)}`,
      { kind: ref.kind, key: ref.key },
    );
  }
  return { digest: `sha256:${hash.digest("hex")}`, size: tar.bytes };
}

/** The first pass: the layer's OCI digest and size, from a tar generated into a hash only. */
export async function hashTreeLayer(realScope: string, ref: TreeRef): Promise<TreeLayer> {
  // Another publisher linking a file the tree shares changes its ctime, not its bytes: hash again.
  const { digest, size } = await linksSettled(() => generateLayer(realScope, ref, () => {}, true));
  return { kind: ref.kind, key: ref.key, integrity: integrityText(ref.integrity), digest, size };
}

const STOPPED = Symbol("upload stream closed");

/**
 * The second pass, as an upload source: each `open` generates the whole tar
 * again (bytes before `start` are skipped, so a resumed upload continues
 * correctly) and ends the stream only when the tar is exactly the first
 * pass's digest and size; otherwise it fails with integrity-mismatch
 * (`changed-between-passes`) while still holding back its last bytes.
 */
export function treeLayerSource(realScope: string, ref: TreeRef, layer: { digest: string; size: number }): BlobSource {
  return {
    digest: layer.digest,
    size: layer.size,
    open(start: number, end: number): Readable {
      let waiting: (() => void) | null = null;
      let stopped = false;
      let full = false;
      let position = 0;
      let held: Buffer | null = null;
      const wake = () => {
        const resume = waiting;
        waiting = null;
        resume?.();
      };
      const stream = new Readable({
        read: wake,
        destroy(error, callback) {
          stopped = true;
          wake();
          callback(error);
        },
      });
      const emit: TarOutput = (data) => {
        if (stopped) throw STOPPED;
        const at = position;
        position += data.length;
        const from = Math.max(start, at);
        const to = Math.min(end, position);
        if (to <= from) return;
        // The writer reuses its buffers; the stream keeps its own copy. The newest slice is held back until the tar
        // is known to be right.
        if (held !== null && !stream.push(held)) full = true;
        held = Buffer.from(data.subarray(from - at, to - at));
      };
      const pace = (): void | Promise<void> => {
        if (stopped) throw STOPPED;
        if (!full) return;
        full = false;
        return new Promise<void>((resolve) => {
          waiting = resolve;
        });
      };
      const run = async () => {
        layerTestHooks.beforeUploadPass?.(retainedTreeDir(realScope, ref));
        const made = await generateLayer(realScope, ref, emit, false, pace);
        if (stopped) return;
        if (made.digest !== layer.digest || made.size !== layer.size) {
          throw new OatsError(
            "integrity-mismatch",
            `${ref.kind} ${ref.key}: its layer was ${layer.digest} (${layer.size} ` +
              `bytes) when hashed and ${made.digest} (${made.size} bytes) when uploaded`,
            {
              kind: ref.kind,
              key: ref.key,
              expected: layer.digest,
              actual: made.digest,
              expectedSize: layer.size,
              actualSize: made.size,
              reason: "changed-between-passes",
            },
          );
        }
        if (held !== null) stream.push(held);
        stream.push(null);
      };
      run().catch((error: unknown) => {
        if (!stopped)
          stream.destroy(
            error instanceof Error
              ? error
              : new OatsError("internal-error", "the layer stream stopped", { kind: ref.kind, key: ref.key }),
          );
      });
      return stream;
    },
  };
}
