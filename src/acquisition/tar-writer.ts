import { writeSync } from "node:fs";
import type { Hash } from "node:crypto";
import { BLOCK_SIZE, END_OF_ARCHIVE, encodeEntryHeader, type TarEntryHeader } from "./tar-format.js";
import type { FileConsumer, FileInfo, FileEntry, SymlinkEntry } from "../retention/index.js";
import type { SyncBehind } from "./sync-behind.js";

/**
 * The one tar writer of the project: bundles (bundle.ts) and fleet tree
 * layers (src/fleet/) both write through it, so a tree has one
 * byte-reproducible tar form.
 */

const ZEROS = Buffer.alloc(BLOCK_SIZE);
const WRITE_BUFFER = 1 << 20;

/** Where a writer's bytes go instead of a file: called in order; `data` is only valid during the call. */
export type TarOutput = (data: Buffer) => void;

/**
 * A plain ustar writer (PAX headers for long or non-ASCII names and link
 * text) into a file descriptor or a `TarOutput`, buffered. Output is reproducible: mtime 0,
 * owner 0, file modes 0755 or 0644 from the exec bit, symlinks 0777. With a
 * `hash`, every byte written is also fed to it (a fleet layer's OCI digest
 * is known when its file is complete, without reading it back).
 */
export class TarWriter {
  private readonly buffer = Buffer.allocUnsafe(WRITE_BUFFER);
  private readonly block = Buffer.alloc(BLOCK_SIZE);
  private used = 0;
  bytes = 0;

  constructor(
    private readonly fd: number | TarOutput,
    private readonly hash?: Hash,
    /** Told of every write into `fd`, to start the file's writeback early (export). */
    private readonly behind?: SyncBehind,
  ) {}

  private writeFd(data: Buffer): void {
    this.hash?.update(data);
    if (typeof this.fd === "function") {
      this.fd(data);
      return;
    }
    let done = 0;
    while (done < data.length) done += writeSync(this.fd, data, done, data.length - done);
    this.behind?.wrote(data.length);
  }

  write(data: Buffer): void {
    this.bytes += data.length;
    if (data.length >= WRITE_BUFFER / 2) {
      this.flush();
      this.writeFd(data);
      return;
    }
    if (this.used + data.length > WRITE_BUFFER) this.flush();
    data.copy(this.buffer, this.used);
    this.used += data.length;
  }

  flush(): void {
    if (this.used === 0) return;
    this.writeFd(this.buffer.subarray(0, this.used));
    this.used = 0;
  }

  pad(size: number): void {
    const rest = size % BLOCK_SIZE;
    if (rest !== 0) this.write(ZEROS.subarray(0, BLOCK_SIZE - rest));
  }

  /** One entry's header (tar-format.ts), preceded by a pax header when its path or link text needs one. */
  header(entry: TarEntryHeader): void {
    const pax = encodeEntryHeader(this.block, entry);
    if (pax) this.write(pax);
    this.write(this.block);
  }

  file(path: string, exec: boolean, size: number): void {
    this.header({ path, type: "File", mode: exec ? 0o755 : 0o644, size });
  }

  wholeFile(path: string, bytes: Buffer): void {
    this.file(path, false, bytes.length);
    this.write(bytes);
    this.pad(bytes.length);
  }

  directory(path: string): void {
    this.header({ path: `${path}/`, type: "Directory", mode: 0o755, size: 0 });
  }

  symlink(path: string, target: string): void {
    this.header({ path, type: "SymbolicLink", linkpath: target, mode: 0o777, size: 0 });
  }

  end(): void {
    this.write(END_OF_ARCHIVE);
    this.flush();
  }
}

/** Feeds every leaf of a tree, as it is hashed, into the tar under `prefix/` (at the archive's root when `prefix` is
 * empty). */
export class TreeSink implements FileConsumer {
  constructor(
    private readonly tar: TarWriter,
    private readonly prefix: string,
  ) {}
  private name(path: string): string {
    return this.prefix === "" ? path : `${this.prefix}/${path}`;
  }
  whole(entry: FileEntry, info: FileInfo, data: Buffer): void {
    this.tar.file(this.name(entry.path), (info.mode & 0o100) !== 0, info.size);
    this.tar.write(data);
    this.tar.pad(info.size);
  }
  start(entry: FileEntry, info: FileInfo): void {
    this.tar.file(this.name(entry.path), (info.mode & 0o100) !== 0, info.size);
  }
  chunk(data: Buffer): void {
    this.tar.write(data);
  }
  end(_entry: FileEntry, info: FileInfo): void {
    this.tar.pad(info.size);
  }
  symlink(entry: SymlinkEntry): void {
    this.tar.symlink(this.name(entry.path), entry.target);
  }
}
