import {
  chmodSync,
  closeSync,
  constants,
  fchmodSync,
  fsync,
  close,
  mkdirSync,
  openSync,
  symlinkSync,
  write,
  writeSync,
} from "node:fs";
import { chmod, open, readdir, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";
import { asStepError, errnoCode } from "../../core/index.js";
import type { FileConsumer, FileEntry, FileInfo, SymlinkEntry } from "../../engine/index.js";
import type { TreeListing } from "../digest/walk.js";
import { faultPoint } from "./faults.js";
import { fsyncDirectory } from "./components.js";
import { REVISION_DIRECTORY_MODE, heldMode, retainedMode } from "./modes.js";

/**
 * Writes the leaves of a tree into a staging directory as they are read and
 * hashed, so the bytes that were hashed are the bytes that were written.
 * Files are created exclusively and never through a symlink; verbatim link
 * text is kept; permission bits are kept except that group and other lose
 * write and setuid, setgid and sticky are dropped (retainedMode, modes.ts).
 * Directory modes are applied last, deepest first.
 *
 * Durability: up to PER_FILE_FSYNC_LIMIT files, each file and directory is
 * fsync'd (in parallel, as they are written). Beyond that, one syncfs of the
 * staging filesystem (`sync -f`, run without a shell) makes every file and
 * directory durable at once; per-file fsync of 20,000 small files costs
 * seconds of journal commits (docs/design/performance.md, "First retains:
 * publication and fsync"). If `sync -f` is
 * unavailable, it falls back to fsync of every file and directory.
 */

export const PER_FILE_FSYNC_LIMIT = 512;

/**
 * "auto" (the default) chooses by file count as above; "per-file" and
 * "syncfs" force one strategy (the benchmark measures both on the same tree).
 * "none" skips every fsync: for a private, transient copy (a dispatch's run
 * copy, src/captures/run-copy.ts) that no crash needs to find intact.
 */
export type Durability = "auto" | "per-file" | "syncfs" | "none";
const MAX_PENDING_FSYNCS = 32;
const WRITE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;

/**
 * Chunks at least this long (the 1 MiB pieces of a large file) are written
 * through the thread pool, so the write of one chunk overlaps the hashing of
 * the same chunk and the read of the next; smaller ones (whole small files)
 * are written synchronously, where a thread-pool round trip would cost more
 * than the copy.
 */
const ASYNC_WRITE_MIN = 256 << 10;

function writeAll(fd: number, data: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const from = (offset: number): void =>
      write(fd, data, offset, data.length - offset, null, (error, written) => {
        if (error) reject(error);
        else if (offset + written < data.length) from(offset + written);
        else resolve();
      });
    from(0);
  });
}

const fsyncAndClose = (fd: number) =>
  new Promise<void>((resolve, reject) =>
    fsync(fd, (syncError) =>
      close(fd, (closeError) => (syncError || closeError ? reject(syncError ?? closeError) : resolve())),
    ),
  );

export class StagingWriter implements FileConsumer {
  private fd: number | null = null;
  private current = "";
  private readonly pending = new Set<Promise<void>>();
  private pendingError: unknown = null;
  private readonly perFile: boolean;
  private readonly durable: boolean;
  /** Permission bits cleared on every file and directory written (0o022: no group/other write). */
  private readonly clearBits: number;
  /** Permission bits added to every file and directory written (0o200: a private, writable copy). */
  private readonly addBits: number;
  /** A revision's staging: files get the layer's modes, directories stay writable until sealed (sealStagedTree). */
  private readonly shared: boolean;

  /**
   * Set with `concurrentSmallFiles`: each small file is written through the
   * thread pool (open, write, chmod, close), several at a time, instead of
   * synchronously. Creating an inode can wait on the filesystem's journal
   * (hundreds of microseconds on a busy ext4), and several creates in flight
   * share those waits. Only without per-file fsync; flush() awaits them.
   */
  readonly whole?: (entry: FileEntry, info: FileInfo, data: Buffer) => void | Promise<void>;

  constructor(
    private readonly staging: string,
    private readonly listing: TreeListing,
    options: {
      durability?: Durability;
      clearModeBits?: number;
      addModeBits?: number;
      concurrentSmallFiles?: boolean;
      shared?: boolean;
    } = {},
  ) {
    this.durable = options.durability !== "none";
    this.perFile = this.durable && perFileDurability(listing, options.durability);
    this.clearBits = options.clearModeBits ?? 0;
    this.addBits = options.addModeBits ?? 0;
    this.shared = options.shared === true;
    if (options.concurrentSmallFiles && !this.perFile)
      this.whole = (entry, info, data) => this.writeWhole(entry, info, data);
  }

  private writeWhole(entry: FileEntry, info: FileInfo, data: Buffer): void | Promise<void> {
    if (this.pendingError) throw this.pendingError;
    faultPoint("copy", entry.path);
    // The reader reuses its buffer for the next small file.
    const bytes = Buffer.from(data);
    const path = join(this.staging, entry.path);
    const mode = this.fileMode(info.mode);
    const done = (async () => {
      const handle = await open(path, WRITE_FLAGS, 0o600);
      try {
        let written = 0;
        while (written < bytes.length)
          written += (await handle.write(bytes, written, bytes.length - written, null)).bytesWritten;
        await handle.chmod(mode);
      } finally {
        await handle.close();
      }
    })().then(
      () => {
        this.pending.delete(done);
      },
      (error: unknown) => {
        this.pending.delete(done);
        this.pendingError ??= asStepError("copy", error, { path: entry.path });
      },
    );
    this.pending.add(done);
    if (this.pending.size >= MAX_PENDING_FSYNCS) return Promise.race(this.pending);
  }

  private fileMode(mode: number): number {
    if (this.shared) return heldMode((mode & 0o100) !== 0);
    return (retainedMode(mode) & ~this.clearBits) | this.addBits;
  }

  private directoryMode(mode: number): number {
    return (retainedMode(mode) & ~this.clearBits) | this.addBits;
  }

  /** Wait for every write in flight (after a failed pass, before the staging is removed). */
  async settle(): Promise<void> {
    await Promise.all(this.pending);
  }

  /** Create the directory skeleton, parents first, writable until flush() applies the real modes. */
  prepareDirectories(): void {
    try {
      for (const directory of [...this.listing.directories].reverse())
        mkdirSync(join(this.staging, directory.path), { mode: 0o700 });
    } catch (error) {
      throw asStepError("copy", error, { path: this.current });
    }
  }

  start(entry: FileEntry): void {
    this.current = entry.path;
    try {
      faultPoint("copy", entry.path);
      this.fd = openSync(join(this.staging, entry.path), WRITE_FLAGS, 0o600);
    } catch (error) {
      throw asStepError("copy", error, { path: entry.path });
    }
  }

  chunk(data: Buffer): void | Promise<void> {
    if (data.length >= ASYNC_WRITE_MIN) {
      const path = this.current;
      return writeAll(this.fd!, data).catch((error: unknown) => {
        throw asStepError("copy", error, { path });
      });
    }
    try {
      let written = 0;
      while (written < data.length) written += writeSync(this.fd!, data, written, data.length - written);
    } catch (error) {
      throw asStepError("copy", error, { path: this.current });
    }
  }

  end(_entry: FileEntry, info: FileInfo): void | Promise<void> {
    const fd = this.fd!;
    this.fd = null;
    try {
      fchmodSync(fd, this.fileMode(info.mode));
    } catch (error) {
      closeSync(fd);
      throw asStepError("copy", error, { path: this.current });
    }
    if (!this.perFile) {
      closeSync(fd);
      return;
    }
    const path = this.current;
    const done = fsyncAndClose(fd).then(
      () => {
        this.pending.delete(done);
      },
      (error) => {
        this.pending.delete(done);
        this.pendingError ??= asStepError("fsync", error, { path });
      },
    );
    this.pending.add(done);
    if (this.pending.size >= MAX_PENDING_FSYNCS) return Promise.race(this.pending);
  }

  symlink(entry: SymlinkEntry): void {
    try {
      faultPoint("copy", entry.path);
      symlinkSync(entry.target, join(this.staging, entry.path));
    } catch (error) {
      throw asStepError("copy", error, { path: entry.path });
    }
  }

  /** Close a file left open by a failed pass. */
  abort(): void {
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  /** Apply directory modes and make everything durable. */
  async flush(): Promise<void> {
    await Promise.all(this.pending);
    if (this.pendingError) throw this.pendingError;
    try {
      // A shared revision's directories stay writable until its files are linked (sealStagedTree).
      if (!this.shared) {
        for (const directory of this.listing.directories) {
          // The mode the walk's own descriptor saw: a path lookup now could be redirected.
          chmodSync(join(this.staging, directory.path), this.directoryMode(directory.mode));
        }
        chmodSync(this.staging, this.directoryMode(this.listing.root.mode));
      }
    } catch (error) {
      throw asStepError("copy", error, { path: "(directory modes)" });
    }
    if (!this.durable) return;
    // Small trees: files were fsync'd as they were written; the directories remain.
    await makeDurable(this.staging, this.listing, { perFile: this.perFile, filesSynced: this.perFile });
  }
}

/**
 * Make a staged revision's directories read-only (REVISION_DIRECTORY_MODE),
 * once its files are linked, and make the tree durable again with the layer
 * directories its files were linked into (`touched`): a per-file tree fsyncs
 * each directory, a larger one takes one more syncfs.
 */
export async function sealStagedTree(
  staging: string,
  listing: TreeListing,
  perFile: boolean,
  touched: readonly string[],
): Promise<void> {
  try {
    for (const directory of listing.directories) chmodSync(join(staging, directory.path), REVISION_DIRECTORY_MODE);
    chmodSync(staging, REVISION_DIRECTORY_MODE);
  } catch (error) {
    throw asStepError("copy", error, { path: "(directory modes)" });
  }
  await makeDurable(staging, listing, { perFile, filesSynced: true });
  try {
    if (perFile) for (const dir of touched) fsyncDirectory(dir);
  } catch (error) {
    throw asStepError("fsync", error);
  }
}

/** Whether a tree is made durable file by file (true) or by one syncfs (false): the rule above. */
export function perFileDurability(listing: TreeListing, durability: Durability = "auto"): boolean {
  if (durability === "none") return false;
  if (durability !== "auto") return durability === "per-file";
  let files = 0;
  for (const leaf of listing.leaves) if (leaf.type === "file") files += 1;
  return files <= PER_FILE_FSYNC_LIMIT;
}

/**
 * Make a tree written under `dir` (with `listing`'s relative paths) durable:
 * with `perFile`, an fsync of every file (unless the writer already did:
 * `filesSynced`) and of every directory; otherwise one syncfs of the
 * filesystem, falling back to fsync of everything. Used by StagingWriter and
 * by publications that adopt a tree written elsewhere (publishAdopted).
 * Failures are `internal-error` with `step: fsync`.
 */
export async function makeDurable(
  dir: string,
  listing: TreeListing,
  options: { perFile: boolean; filesSynced: boolean },
): Promise<void> {
  try {
    faultPoint("fsync", dir);
    if (options.perFile) {
      if (!options.filesSynced) await fsyncFiles(dir, listing);
      fsyncDirectories(dir, listing);
    } else if (!(await syncFilesystem(dir))) {
      await fsyncFiles(dir, listing);
      fsyncDirectories(dir, listing);
    }
  } catch (error) {
    throw asStepError("fsync", error);
  }
}

function fsyncDirectories(dir: string, listing: TreeListing): void {
  for (const directory of listing.directories) fsyncDirectory(join(dir, directory.path));
  fsyncDirectory(dir);
}

async function fsyncFiles(dir: string, listing: TreeListing): Promise<void> {
  const files = listing.leaves.filter((leaf) => leaf.type === "file").map((leaf) => join(dir, leaf.path));
  let next = 0;
  const worker = async () => {
    while (next < files.length)
      await fsyncAndClose(openSync(files[next++]!, constants.O_RDONLY | constants.O_NOFOLLOW));
  };
  await Promise.all(Array.from({ length: 16 }, worker));
}

/** syncfs(2) through coreutils' `sync -f`; false when it is not available here. */
function syncFilesystem(dir: string): Promise<boolean> {
  if (process.platform !== "linux") return Promise.resolve(false);
  return new Promise((resolve) => {
    // Loaded here, not with the module: a verify or a digest never runs it, and child_process costs a start about 5 ms.
    const { execFile } = createRequire(import.meta.url)("node:child_process") as typeof import("node:child_process");
    execFile("sync", ["-f", dir], { timeout: 120_000 }, (error) => resolve(!error));
  });
}

/**
 * Remove a staging tree, even one whose directories were made read-only to
 * match their source: write permission is restored, never followed through
 * a symlink, before removal.
 */
export async function removeTree(path: string): Promise<void> {
  try {
    await rm(path, { recursive: true, force: true });
    return;
  } catch (error) {
    if (errnoCode(error) !== "EACCES" && errnoCode(error) !== "EPERM") throw error;
  }
  await restoreWrite(path);
  await rm(path, { recursive: true, force: true });
}

async function restoreWrite(dir: string): Promise<void> {
  await chmod(dir, 0o700);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await restoreWrite(join(dir, entry.name));
  }
}
