import { createHash } from "node:crypto";
import { lstatSync } from "node:fs";
import { join } from "node:path";
import { errnoCode } from "../../core/index.js";
import type { FileConsumer, FileEntry, FileInfo, SymlinkEntry } from "../../engine/index.js";
import { hashFileHere } from "../parallel/file-hashes.js";
import { FALLBACK_CODES, heldPath, linkNew } from "./shared-layer.js";
import type { StagingWriter } from "./staging-writer.js";

/**
 * The copy pass of a publication into the shared file layer: a small file
 * (handed over whole) whose content the layer already holds is not written
 * at all, but linked from its held file, which is hashed first (once per
 * publication) and linked only if it verifies; everything else is written by
 * the staging writer as before, and shared after the read-back
 * (shareStagedTree). Writing a copy only to replace it by a link costs more
 * than the copy: freeing a just-written file's blocks is the slowest step
 * of a link-over on the filesystems measured.
 */
export class SharingWriter implements FileConsumer {
  /** Paths (relative) linked from a verified held file during the pass. */
  readonly linked = new Set<string>();
  /** The first errno of a link the filesystem refused. */
  fallback: string | null = null;
  private readonly verdicts = new Map<string, boolean>();

  constructor(
    private readonly scope: string,
    private readonly staging: string,
    private readonly inner: StagingWriter,
  ) {}

  whole(entry: FileEntry, info: FileInfo, data: Buffer): void | Promise<void> {
    if (this.fallback === null) {
      const exec = (info.mode & 0o100) !== 0;
      const sha256 = createHash("sha256").update(data).digest("hex");
      const held = heldPath(this.scope, sha256, exec);
      if (this.verified(held, sha256, exec, data.length)) {
        try {
          linkNew(held, join(this.staging, entry.path));
          this.linked.add(entry.path);
          return;
        } catch (error) {
          const code = errnoCode(error);
          if (!code || !FALLBACK_CODES.has(code)) throw error;
          this.fallback = code;
        }
      }
    }
    this.inner.start(entry);
    const chunked = data.length > 0 ? this.inner.chunk(data) : undefined;
    return chunked ? chunked.then(() => this.inner.end(entry, info)) : this.inner.end(entry, info);
  }

  /** Whether the layer holds this content at `held`, verified (hashed) once per publication. */
  private verified(held: string, sha256: string, exec: boolean, size: number): boolean {
    let verdict = this.verdicts.get(held);
    if (verdict === undefined) {
      let present = false;
      try {
        present = lstatSync(held).isFile();
      } catch {
        present = false;
      }
      const found = present ? hashFileHere(held) : null;
      verdict =
        found !== null && found.sha256 === sha256 && found.size === size && ((found.mode & 0o100) !== 0) === exec;
      // An absent file may be stored by this very publication later (shareStagedTree): asked again then, not here.
      if (present) this.verdicts.set(held, verdict);
    }
    return verdict;
  }

  start(entry: FileEntry): void {
    this.inner.start(entry);
  }
  chunk(data: Buffer): void | Promise<void> {
    return this.inner.chunk(data);
  }
  end(entry: FileEntry, info: FileInfo): void | Promise<void> {
    return this.inner.end(entry, info);
  }
  symlink(entry: SymlinkEntry): void {
    this.inner.symlink(entry);
  }
}
