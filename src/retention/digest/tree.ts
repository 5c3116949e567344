import { createHash, type Hash } from "node:crypto";
import { lstat, realpath } from "node:fs/promises";
import { OatsError, errnoCode } from "../../core/index.js";
// Types only: integrity.ts loads zod, which a bare digest (`oats digest`) has no use for.
import type { TreeFormat } from "./integrity.js";
import { packagePayloadExecFraming, treeExecFraming } from "./exec.js";
import {
  readLeavesInOrder,
  type FileConsumer,
  type FileEntry,
  type FileInfo,
  type LeafEntry,
  type SymlinkEntry,
} from "../../engine/index.js";
import type { TreeFraming } from "./framing.js";
import {
  EMIT_EVERY_BYTES,
  EMIT_EVERY_FILES,
  throwIfAborted,
  type ProgressListener,
  type ProgressPhase,
} from "./progress.js";
import { treeLegacyFraming } from "./legacy.js";
import { coresBusy } from "./busy.js";
import { legacyOrder } from "./order.js";
import { walkTree, type TreeListing } from "./walk.js";

export const FRAMINGS: Record<TreeFormat, TreeFraming> = {
  "oats.tree-legacy.v0": treeLegacyFraming,
  "oats.tree-exec.v1": treeExecFraming,
  "oats.package-payload-exec.v1": packagePayloadExecFraming,
};

export type TreeDigests = Partial<Record<TreeFormat, string>>;

/** Optional extra consumer of every leaf (a copy into staging), fed in the first pass. */
export type LeafSink = FileConsumer;

export type { ProgressListener } from "./progress.js";

/** How a digest reports and stops: progress events under `phase`, and an abort checked before each file. */
export interface DigestOptions {
  readonly onProgress?: ProgressListener;
  /** The phase events are reported under; `read` otherwise. */
  readonly phase?: ProgressPhase;
  /** The bytes all passes will read, when the caller knows them (a copy that was just made). */
  readonly totalBytes?: number;
  readonly signal?: AbortSignal;
}

/** Pieces shorter than this are gathered into one buffer before they reach the hash. */
const GATHER_BELOW = 16 << 10;
const GATHER_SIZE = 64 << 10;
/**
 * Gather buffers of finished hashes, for the next: a scope's fsck digests
 * thousands of trees, and a fresh 64 KiB buffer each was garbage the heap
 * kept until a collection (10,000 two-file trees held 20 MiB of it at once).
 */
const spareGathers: Buffer[] = [];
const MAX_SPARE_GATHERS = 4;
/** What an exec record head holds besides its path: "F", two u64s and the exec byte. */
const HEAD_BYTES = 18;

/**
 * One SHA-256 stream over framed records. A tree of small files feeds it a
 * record head and a few KiB of content per file; each Hash.update() call
 * costs about a microsecond of bookkeeping before a byte is hashed, so short
 * pieces are copied into a 64 KiB buffer and hashed together. The bytes and
 * their order are exactly those fed, so the digest is the same.
 */
class FramedHash {
  private readonly hash: Hash = createHash("sha256");
  private gathered = spareGathers.pop() ?? Buffer.allocUnsafe(GATHER_SIZE);
  private used = 0;
  constructor(readonly framing: TreeFraming) {
    this.feed(framing.header());
  }
  /** A file's record head: written straight into the gathered bytes where the framing can, else fed as its buffers. */
  fileHead(path: string, mode: number, size: number): void {
    const write = this.framing.writeFileHead;
    if (write !== undefined) {
      let end = write(this.gathered, this.used, path, mode, size);
      // Refused with room enough for an ASCII head: the path is not ASCII, and a flush would not help.
      if (end < 0 && this.used > 0 && this.used + path.length + HEAD_BYTES > GATHER_SIZE) {
        this.flush();
        end = write(this.gathered, 0, path, mode, size);
      }
      if (end >= 0) {
        this.used = end;
        return;
      }
    }
    this.feed(this.framing.fileHead(path, mode, size));
  }
  feed(pieces: Buffer[]): void {
    for (let i = 0; i < pieces.length; i++) this.update(pieces[i]!);
  }
  update(data: Buffer): void {
    if (data.length >= GATHER_BELOW) {
      this.flush();
      this.hash.update(data);
      return;
    }
    if (this.used + data.length > GATHER_SIZE) this.flush();
    this.gathered.set(data, this.used);
    this.used += data.length;
  }
  private flush(): void {
    if (this.used === 0) return;
    this.hash.update(this.gathered.subarray(0, this.used));
    this.used = 0;
  }
  /** The digest; the gather buffer goes back to the spares, and this hash takes nothing more. */
  value(): string {
    this.flush();
    if (spareGathers.length < MAX_SPARE_GATHERS) spareGathers.push(this.gathered);
    this.gathered = Buffer.alloc(0);
    return `sha256-${this.hash.digest("hex")}`;
  }
}

/** Hand a whole file to a consumer: its own whole() if it has one, else start, chunk and end, awaiting only what is
 * pending. */
function wholeInParts(sink: FileConsumer, entry: FileEntry, info: FileInfo, data: Buffer): void | Promise<void> {
  if (sink.whole) return sink.whole(entry, info, data);
  const chunkAndEnd = (): void | Promise<void> => {
    const chunked = data.length > 0 ? sink.chunk(data) : undefined;
    return chunked ? chunked.then(() => sink.end(entry, info)) : sink.end(entry, info);
  };
  const started = sink.start(entry, info);
  return started ? started.then(chunkAndEnd) : chunkAndEnd();
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
  options: DigestOptions & { sink?: LeafSink; sinkOrder?: "legacy" | "bytes" } = {},
): Promise<TreeDigests> {
  const byteOrder = listing.leaves;
  const legacy =
    formats.includes("oats.tree-legacy.v0") || options.sinkOrder === "legacy" ? legacyOrder(listing.root) : byteOrder;
  const shared = sameSequence(byteOrder, legacy);
  const passes: { order: readonly LeafEntry[]; framings: TreeFraming[]; sink?: LeafSink }[] = [];
  const passFor = (order: readonly LeafEntry[]) => {
    let pass = passes.find((candidate) => candidate.order === order);
    if (!pass) {
      pass = { order, framings: [] };
      passes.push(pass);
    }
    return pass;
  };
  const orderOf = (kind: "legacy" | "bytes") => (kind === "legacy" && !shared ? legacy : byteOrder);
  if (options.sink) passFor(orderOf(options.sinkOrder ?? "bytes")).sink = options.sink;
  for (const format of formats) passFor(orderOf(FRAMINGS[format].order)).framings.push(FRAMINGS[format]);

  const digests: TreeDigests = {};
  let bytesDone = 0;
  let filesDone = 0;
  const { onProgress, signal } = options;
  // Reporting is counted, not timed: one comparison per file, one event per EMIT_EVERY_FILES files or
  // EMIT_EVERY_BYTES bytes.
  let nextFiles = 0;
  let nextBytes = 0;
  const totals = onProgress ? progressTotals(listing, passes.length, options.totalBytes) : {};
  const phase = options.phase ?? "read";
  const emit = () => {
    nextFiles = filesDone + EMIT_EVERY_FILES;
    nextBytes = bytesDone + EMIT_EVERY_BYTES;
    onProgress!({ phase, files: filesDone, bytes: bytesDone, ...totals });
  };
  const fileDone = () => {
    filesDone += 1;
    if (onProgress && (filesDone >= nextFiles || bytesDone >= nextBytes)) emit();
  };
  if (onProgress) emit();
  for (const pass of passes) {
    const hashes = pass.framings.map((framing) => new FramedHash(framing));
    // Which hashes take the current file; filtered per file only when some framing skips paths.
    const everyFile = hashes.every((hash) => hash.framing.includesAll);
    let active: FramedHash[] = hashes;
    const sink = pass.sink;
    const consumer: FileConsumer = {
      whole(entry: FileEntry, info: FileInfo, data: Buffer) {
        if (signal?.aborted) throwIfAborted(signal);
        if (!everyFile) active = hashes.filter((hash) => hash.framing.includes(entry.path));
        for (let i = 0; i < active.length; i++) {
          const hash = active[i]!;
          hash.fileHead(entry.path, info.mode, info.size);
          hash.update(data);
          hash.feed(hash.framing.fileTail());
        }
        bytesDone += data.length;
        fileDone();
        return sink ? wholeInParts(sink, entry, info, data) : undefined;
      },
      start(entry: FileEntry, info: FileInfo) {
        if (signal?.aborted) throwIfAborted(signal);
        if (!everyFile) active = hashes.filter((hash) => hash.framing.includes(entry.path));
        for (const hash of active) hash.fileHead(entry.path, info.mode, info.size);
        return sink?.start(entry, info);
      },
      chunk(data: Buffer) {
        // The sink first: a write it hands to the thread pool then overlaps the hashing.
        const written = sink?.chunk(data);
        for (const hash of active) hash.update(data);
        bytesDone += data.length;
        if (onProgress && bytesDone >= nextBytes) emit();
        return written;
      },
      end(entry: FileEntry, info: FileInfo) {
        for (const hash of active) hash.feed(hash.framing.fileTail());
        fileDone();
        return sink?.end(entry, info);
      },
      symlink(entry: SymlinkEntry) {
        for (const hash of hashes)
          if (hash.framing.includes(entry.path)) hash.feed(hash.framing.symlink(entry.path, entry.target));
        return sink?.symlink(entry);
      },
    };
    // A copy keeps its reads overlapped with its writes; a pure hash reads inline when the cores are taken, and while
    // the cache is warm.
    await readLeavesInOrder(pass.order, consumer, {
      inline: sink ? false : coresBusy() ? true : "warm",
      cold: listing.cold === true,
    });
    for (const hash of hashes) digests[hash.framing.format] = hash.value();
  }
  if (onProgress) emit();
  return digests;
}

/** What a walk tells before anything is read: the files, once per pass; bytes only when the caller knows them. */
function progressTotals(
  listing: TreeListing,
  passes: number,
  totalBytes: number | undefined,
): { totalFiles: number; totalBytes?: number } {
  let files = 0;
  for (const leaf of listing.leaves) if (leaf.type === "file") files += 1;
  return { totalFiles: files * passes, ...(totalBytes === undefined ? {} : { totalBytes }) };
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
    throw new OatsError(code === "ENOENT" ? "artifact-not-found" : "invalid-artifact", `not a directory: ${dir}`, {
      path: dir,
      errno: code,
    });
  }
  return resolved;
}

/** Digest a directory tree in one or more formats (oats.tree-exec.v1 by default). */
export async function digestTree(
  dir: string,
  formats: readonly TreeFormat[] = [treeExecFraming.format],
  options: DigestOptions & { maxDepth?: number; sink?: LeafSink; sinkOrder?: "legacy" | "bytes" } = {},
): Promise<TreeDigests> {
  throwIfAborted(options.signal);
  const root = await treeRoot(dir);
  const listing = await walkTree(root, options.maxDepth === undefined ? {} : { maxDepth: options.maxDepth });
  return digestListing(listing, formats, options);
}
