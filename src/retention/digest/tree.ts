import { createHash, type Hash } from "node:crypto";
import { lstat, realpath } from "node:fs/promises";
import { OatsError, errnoCode } from "../../errors.js";
import { TREE_EXEC, type TreeFormat } from "../integrity.js";
import { packagePayloadExecFraming, treeExecFraming } from "./exec.js";
import { readLeavesInOrder, type FileConsumer, type FileInfo } from "./file-reader.js";
import type { TreeFraming } from "./framing.js";
import { treeLegacyFraming } from "./legacy.js";
import { legacyOrder, walkTree, type FileEntry, type LeafEntry, type SymlinkEntry, type TreeListing } from "./walk.js";

export const FRAMINGS: Record<TreeFormat, TreeFraming> = {
  "oats.tree-legacy.v0": treeLegacyFraming,
  "oats.tree-exec.v1": treeExecFraming,
  "oats.package-payload-exec.v1": packagePayloadExecFraming,
};

export type TreeDigests = Partial<Record<TreeFormat, string>>;

/** Optional extra consumer of every leaf (a copy into staging), fed in the first pass. */
export type LeafSink = FileConsumer;

/** Progress callback: bytes of file content consumed so far in this pass. */
export type ProgressListener = (bytesDone: number) => void;

class FramedHash {
  private readonly hash: Hash = createHash("sha256");
  constructor(readonly framing: TreeFraming) {
    this.feed(framing.header());
  }
  feed(pieces: Buffer[]): void {
    for (const piece of pieces) this.hash.update(piece);
  }
  update(data: Buffer): void {
    this.hash.update(data);
  }
  value(): string {
    return `sha256-${this.hash.digest("hex")}`;
  }
}

function sameSequence(a: readonly LeafEntry[], b: readonly LeafEntry[]): boolean {
  return a.length === b.length && a.every((leaf, index) => leaf === b[index]);
}

/**
 * Hash `formats` over one listing. Formats that feed records in the same
 * sequence share one read of each file; legacy order usually differs from
 * byte order, and then takes a second pass (served from the page cache).
 */
export async function digestListing(
  listing: TreeListing,
  formats: readonly TreeFormat[],
  options: { sink?: LeafSink; sinkOrder?: "legacy" | "bytes"; onProgress?: ProgressListener } = {},
): Promise<TreeDigests> {
  const byteOrder = listing.leaves;
  const legacy = formats.includes("oats.tree-legacy.v0") || options.sinkOrder === "legacy" ? legacyOrder(listing.root) : byteOrder;
  const shared = sameSequence(byteOrder, legacy);
  const passes: { order: readonly LeafEntry[]; framings: TreeFraming[]; sink?: LeafSink }[] = [];
  const passFor = (order: readonly LeafEntry[]) => {
    let pass = passes.find((candidate) => candidate.order === order);
    if (!pass) passes.push((pass = { order, framings: [] }));
    return pass;
  };
  const orderOf = (kind: "legacy" | "bytes") => (kind === "legacy" && !shared ? legacy : byteOrder);
  if (options.sink) passFor(orderOf(options.sinkOrder ?? "bytes")).sink = options.sink;
  for (const format of formats) passFor(orderOf(FRAMINGS[format].order)).framings.push(FRAMINGS[format]);

  const digests: TreeDigests = {};
  let bytesDone = 0;
  for (const pass of passes) {
    const hashes = pass.framings.map((framing) => new FramedHash(framing));
    let active: FramedHash[] = [];
    const sink = pass.sink;
    const consumer: FileConsumer = {
      start(entry: FileEntry, info: FileInfo) {
        active = hashes.filter((hash) => hash.framing.includes(entry.path));
        for (const hash of active) hash.feed(hash.framing.fileHead(entry.path, info.mode, info.size));
        return sink?.start(entry, info);
      },
      chunk(data: Buffer) {
        for (const hash of active) hash.update(data);
        bytesDone += data.length;
        options.onProgress?.(bytesDone);
        return sink?.chunk(data);
      },
      end(entry: FileEntry, info: FileInfo) {
        for (const hash of active) hash.feed(hash.framing.fileTail());
        return sink?.end(entry, info);
      },
      symlink(entry: SymlinkEntry) {
        for (const hash of hashes) if (hash.framing.includes(entry.path)) hash.feed(hash.framing.symlink(entry.path, entry.target));
        return sink?.symlink(entry);
      },
    };
    await readLeavesInOrder(pass.order, consumer);
    for (const hash of hashes) digests[hash.framing.format] = hash.value();
  }
  return digests;
}

/** Resolve and check a tree root: it must exist and be a directory. */
export async function treeRoot(dir: string): Promise<string> {
  let resolved: string;
  try {
    resolved = await realpath(dir);
    const stats = await lstat(resolved);
    if (!stats.isDirectory()) throw Object.assign(new Error("not a directory"), { code: "ENOTDIR" });
  } catch (error) {
    const code = errnoCode(error);
    throw new OatsError(code === "ENOENT" ? "artifact-not-found" : "invalid-artifact", `not a directory: ${dir}`, { path: dir, errno: code });
  }
  return resolved;
}

/** Digest a directory tree in one or more formats. */
export async function digestTree(dir: string, formats: readonly TreeFormat[] = [TREE_EXEC], options: { onProgress?: ProgressListener } = {}): Promise<TreeDigests> {
  const root = await treeRoot(dir);
  const listing = await walkTree(root);
  return digestListing(listing, formats, options);
}
