import { closeSync, constants, fchmodSync, mkdirSync, openSync, symlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { entryRefusal, foldKey, symlinkTarget } from "./entry-path.js";

/**
 * The writing half of safe extraction, shared by every reader of an archive
 * (a tar stream in extract.ts, a git commit's object database in git.ts): it
 * writes directories, symlinks and files into an empty staging directory the
 * caller owns, after checking each name against everything written before.
 *
 * - each name at most once, no name below a symlink or a file, no two names
 *   that fold to the same key (case, Unicode normalisation);
 * - at most `maxEntries` entries and `maxBytes` bytes written (checked
 *   against the declared size before a file is opened and on every chunk);
 * - files are created `O_CREAT | O_EXCL | O_NOFOLLOW`, 0755 when the
 *   owner-exec bit is set, else 0644; symlink text must pass symlinkTarget
 *   (at most `maxPathBytes` bytes);
 * - bookkeeping is linear: an entry claims only the ancestors not already
 *   claimed (a claimed name's ancestors are all claimed directories), so the
 *   cost follows the archive's size, not its depth squared.
 *
 * Names must already be normalised relative paths (entryPath); this module
 * never follows a link, so lexical containment is containment.
 */

export interface TreeLimits {
  readonly maxEntries: number;
  readonly maxBytes: number;
  /** Bytes of a symlink's text (names are measured by entryPath before they get here). */
  readonly maxPathBytes: number;
}

export type TreeEntryKind = "file" | "directory" | "symlink";

export interface TreeTotals {
  readonly entries: number;
  readonly files: number;
  readonly bytes: number;
}

/** One file being written: `write` each chunk, then `finish` (or `close` on a failure elsewhere). */
export interface FileSink {
  write(chunk: Buffer): void;
  finish(): void;
  close(): void;
}

export class TreeWriter {
  private readonly kinds = new Map<string, TreeEntryKind>();
  private readonly folded = new Map<string, string>();
  /** Directories created because a name below them came first; their own entry may still follow, once. */
  private readonly implicit = new Set<string>();
  private readonly open = new Set<FileSink>();
  private entryCount = 0;
  private fileCount = 0;
  private byteCount = 0;

  constructor(
    private readonly dest: string,
    private readonly origin: string,
    private readonly limits: TreeLimits,
  ) {}

  get totals(): TreeTotals {
    return { entries: this.entryCount, files: this.fileCount, bytes: this.byteCount };
  }

  /** Count one entry of the archive (the root included), refusing past maxEntries. */
  countEntry(): void {
    this.entryCount += 1;
    if (this.entryCount > this.limits.maxEntries)
      throw entryRefusal(this.origin, "too-many-entries", null, `more than ${this.limits.maxEntries} entries`, {
        limit: this.limits.maxEntries,
      });
  }

  directory(path: string): void {
    if (this.implicit.has(path)) {
      this.implicit.delete(path);
      return;
    }
    this.claim(path, "directory");
    mkdirSync(join(this.dest, path), { mode: 0o755 });
  }

  symlink(path: string, linkText: string): void {
    const target = symlinkTarget(path, linkText, this.origin, this.limits.maxPathBytes);
    this.claim(path, "symlink");
    symlinkSync(target, join(this.dest, path));
  }

  /** Open a new file of `size` declared bytes; `rawName` names it in refusals. */
  file(path: string, size: number, executable: boolean, rawName: string = path): FileSink {
    if (this.byteCount + size > this.limits.maxBytes) throw this.tooLarge(rawName);
    this.claim(path, "file");
    const mode = executable ? 0o755 : 0o644;
    const fd = openSync(
      join(this.dest, path),
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      mode,
    );
    this.fileCount += 1;
    let isOpen = true;
    const sink: FileSink = {
      write: (chunk) => {
        this.byteCount += chunk.length;
        if (this.byteCount > this.limits.maxBytes) throw this.tooLarge(rawName);
        writeSync(fd, chunk);
      },
      finish: () => {
        if (!isOpen) return;
        fchmodSync(fd, mode);
        sink.close();
      },
      close: () => {
        if (!isOpen) return;
        isOpen = false;
        this.open.delete(sink);
        closeSync(fd);
      },
    };
    this.open.add(sink);
    return sink;
  }

  /** Close every file still open (a failure arrived from elsewhere: the input, the parser). */
  closeAll(): void {
    for (const sink of [...this.open]) sink.close();
  }

  private tooLarge(entry: string) {
    return entryRefusal(
      this.origin,
      "too-large",
      entry,
      `the archive expands to more than ${this.limits.maxBytes} bytes`,
      { limit: this.limits.maxBytes },
    );
  }

  /**
   * Record a name (and its implicit parent directories), refusing duplicates, collisions and type conflicts.
   * Ancestors are looked up from the nearest one outwards and only until one is known: a known name's
   * ancestors were all claimed as directories when it was, so each entry costs its own length, not its depth squared.
   */
  private claim(path: string, kind: TreeEntryKind): void {
    const missing: string[] = [];
    for (let cut = path.lastIndexOf("/"); cut > 0; cut = path.lastIndexOf("/", cut - 1)) {
      const parent = path.slice(0, cut);
      const existing = this.kinds.get(parent);
      if (existing === "symlink")
        throw entryRefusal(
          this.origin,
          "through-symlink",
          path,
          `${parent} is a symlink in this archive; nothing is written through one`,
        );
      if (existing === "file")
        throw entryRefusal(this.origin, "type-conflict", path, `${parent} is a file in this archive`);
      if (existing === "directory") break;
      missing.push(parent);
    }
    for (let index = missing.length - 1; index >= 0; index--) this.claimName(missing[index]!, "directory", path);
    const existing = this.kinds.get(path);
    if (existing !== undefined) {
      throw entryRefusal(
        this.origin,
        existing === kind ? "duplicate-entry" : "type-conflict",
        path,
        existing === kind ? "the name appears more than once" : `the name is both a ${existing} and a ${kind}`,
      );
    }
    this.claimName(path, kind, path);
  }

  private claimName(name: string, kind: TreeEntryKind, entry: string): void {
    const key = foldKey(name);
    const other = this.folded.get(key);
    if (other !== undefined && other !== name)
      throw entryRefusal(
        this.origin,
        "case-collision",
        entry,
        `${JSON.stringify(name)} and ${JSON.stringify(other)} are the same name on a case-insensitive filesystem`,
        { collidesWith: other },
      );
    this.folded.set(key, name);
    this.kinds.set(name, kind);
    if (kind === "directory" && name !== entry) {
      this.implicit.add(name);
      mkdirSync(join(this.dest, name), { mode: 0o755 });
    }
  }
}
