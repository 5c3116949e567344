import { createHash, type Hash } from "node:crypto";
import type { FileConsumer, FileEntry, FileInfo, SymlinkEntry } from "../../engine/index.js";
import type { ManifestRow } from "./manifest.js";

/**
 * A leaf consumer that measures one manifest row per leaf (a file's size,
 * exec bit and SHA-256; a symlink's target) while another pass hashes the
 * tree, and hands each row to `add`: kept as objects (ManifestBuilder, for
 * diagnosis) or only as encoded bytes (ManifestRecorder, for publication).
 */
export abstract class ManifestRowSink implements FileConsumer {
  private hash: Hash | null = null;

  protected abstract add(row: ManifestRow): void;

  start(): void {
    this.hash = createHash("sha256");
  }
  chunk(data: Buffer): void {
    this.hash!.update(data);
  }
  end(entry: FileEntry, info: FileInfo): void {
    const sha256 = this.hash!.digest("hex");
    this.hash = null;
    this.add({ path: entry.path, type: "file", exec: (info.mode & 0o100) !== 0, size: info.size, sha256 });
  }
  symlink(entry: SymlinkEntry): void {
    this.add({ path: entry.path, type: "symlink", target: entry.target });
  }
}
