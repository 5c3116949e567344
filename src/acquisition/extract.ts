import { chmodSync, closeSync, constants, fchmodSync, mkdirSync, openSync, symlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { Parser, type ReadEntry } from "tar";
import { OatsError, asStepError, isOatsError } from "../errors.js";
import { DEFAULT_NAME_LIMITS, entryPath, entryRefusal, foldKey, symlinkTarget } from "./entry-path.js";

/**
 * Safe extraction of a tar stream (gzip detected by the parser) into an
 * empty staging directory that the caller owns and removes. Entries are
 * written by this module, never by tar's own unpacker, so every rule below is
 * ours and nothing is written that was not checked first:
 *
 * - names: relative, no `..`, under `prefix/` when one is given (npm's
 *   `package/`); absolute names and climbing names are refused;
 * - types: regular files, directories and symlinks only. Hard links, devices,
 *   FIFOs and anything else are refused;
 * - symlinks: relative text that resolves inside the tree, kept verbatim.
 *   Nothing is ever written through one, because a name under a symlink entry
 *   is refused;
 * - each name at most once, and no two names that fold to the same key
 *   (case, Unicode normalisation), which would merge on another filesystem;
 * - at most `maxEntries` entries and `maxBytes` expanded bytes (a
 *   decompression bomb stops at the limit, not at the disk's end); names
 *   (and symlink texts) of at most `maxPathBytes` bytes and `maxDepth`
 *   segments; pax and GNU long-name headers of at most `maxHeaderBytes`.
 *   Each limit is checked before any work proportional to what exceeds it:
 *   node-tar ignores (never buffers) a meta header over maxMetaEntrySize,
 *   which is set to maxHeaderBytes, and we refuse the ignored header; a
 *   name is measured before it is split;
 * - bookkeeping is linear: an entry claims only the ancestors not already
 *   claimed (a claimed name's ancestors are all claimed directories), so an
 *   archive's cost follows its size, not its depth squared;
 * - files get 0755 when the owner-exec bit is set, else 0644, directories
 *   0755, like retention; the destination root too, once extraction is
 *   complete (it is 0700 while the archive is being written into it).
 *
 * A refusal aborts the stream at once; the caller removes the directory.
 */

export interface ExtractLimits {
  readonly maxEntries: number;
  /** Expanded bytes of all files together. */
  readonly maxBytes: number;
  /** Bytes of one entry's name (after the pax or GNU long name is applied), and of a symlink's text. */
  readonly maxPathBytes: number;
  /** Segments of one entry's name; also the deepest directory a walked tree may have. */
  readonly maxDepth: number;
  /** Bytes of one pax extended header or GNU long-name/long-link header. */
  readonly maxHeaderBytes: number;
}

/** Far above any real package: this project's node_modules (about 2,000 entries) reaches depth 7 and 68-byte paths. */
export const DEFAULT_EXTRACT_LIMITS: ExtractLimits = {
  maxEntries: 100_000,
  maxBytes: 4 * 1024 ** 3,
  ...DEFAULT_NAME_LIMITS,
  maxHeaderBytes: 64 * 1024,
};

const LIMIT_NAMES = ["maxEntries", "maxBytes", "maxPathBytes", "maxDepth", "maxHeaderBytes"] as const;

/** The defaults with `limits` applied; each must be a positive safe integer (`invalid-input`). */
export function extractLimits(limits: Partial<ExtractLimits> | undefined): ExtractLimits {
  const merged: Record<string, unknown> = { ...DEFAULT_EXTRACT_LIMITS };
  for (const name of LIMIT_NAMES) if (limits?.[name] !== undefined) merged[name] = limits[name];
  for (const name of LIMIT_NAMES) {
    const value = merged[name];
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
      throw new OatsError("invalid-input", `extraction limit ${name} must be a positive integer, got ${JSON.stringify(value)}`, { [name]: value, reason: "invalid-limit" });
    }
  }
  return merged as unknown as ExtractLimits;
}

export interface ExtractOptions {
  /** Names what is being extracted in refusals, e.g. the tarball's path. */
  readonly origin: string;
  /** The one top-level directory every entry sits under, removed (npm: "package"). */
  readonly prefix?: string | null;
  readonly limits?: Partial<ExtractLimits>;
}

export interface ExtractResult {
  readonly entries: number;
  readonly files: number;
  readonly bytes: number;
}

type Kind = "file" | "directory" | "symlink";

const FILE_TYPES = new Set(["File", "OldFile", "ContiguousFile"]);
const SPECIAL_TYPES = new Set(["CharacterDevice", "BlockDevice", "FIFO"]);

export function extractTar(input: Readable, dest: string, options: ExtractOptions): Promise<ExtractResult> {
  const origin = options.origin;
  const prefix = options.prefix ?? null;
  const limits = extractLimits(options.limits);
  const kinds = new Map<string, Kind>();
  const folded = new Map<string, string>();
  let entries = 0;
  let files = 0;
  let bytes = 0;

  return new Promise<ExtractResult>((resolvePromise, reject) => {
    let failed = false;
    // Past maxMetaEntrySize node-tar skips a meta header's body instead of buffering it, and reports it as ignored: refused below.
    const parser = new Parser({ strict: true, maxMetaEntrySize: limits.maxHeaderBytes });
    /** Files being written: closed on a failure that arrives from elsewhere (the input stream, the parser). */
    const openFiles = new Set<() => void>();
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      for (const close of openFiles) close();
      input.unpipe(parser);
      input.destroy();
      reject(isOatsError(error) ? error : asStepError("extract", error, { archive: origin }));
    };

    /**
     * Record a name (and its implicit parent directories), refusing duplicates, collisions and type conflicts.
     * Ancestors are looked up from the nearest one outwards and only until one is known: a known name's
     * ancestors were all claimed as directories when it was, so each entry costs its own length, not its depth squared.
     */
    const claim = (path: string, kind: Kind) => {
      const missing: string[] = [];
      for (let cut = path.lastIndexOf("/"); cut > 0; cut = path.lastIndexOf("/", cut - 1)) {
        const parent = path.slice(0, cut);
        const existing = kinds.get(parent);
        if (existing === "symlink") throw entryRefusal(origin, "through-symlink", path, `${parent} is a symlink in this archive; nothing is written through one`);
        if (existing === "file") throw entryRefusal(origin, "type-conflict", path, `${parent} is a file in this archive`);
        if (existing === "directory") break;
        missing.push(parent);
      }
      for (let index = missing.length - 1; index >= 0; index--) claimName(missing[index]!, "directory", path);
      const existing = kinds.get(path);
      if (existing !== undefined) {
        // A directory entry after a file below it created the directory implicitly is fine, once.
        throw entryRefusal(origin, existing === kind ? "duplicate-entry" : "type-conflict", path, existing === kind ? "the name appears more than once" : `the name is both a ${existing} and a ${kind}`);
      }
      claimName(path, kind, path);
    };
    const implicit = new Set<string>();
    const claimName = (name: string, kind: Kind, entry: string) => {
      const key = foldKey(name);
      const other = folded.get(key);
      if (other !== undefined && other !== name) throw entryRefusal(origin, "case-collision", entry, `${JSON.stringify(name)} and ${JSON.stringify(other)} are the same name on a case-insensitive filesystem`, { collidesWith: other });
      folded.set(key, name);
      kinds.set(name, kind);
      if (kind === "directory" && name !== entry) {
        implicit.add(name);
        mkdirSync(join(dest, name), { mode: 0o755 });
      }
    };

    const onEntry = (entry: ReadEntry) => {
      if (failed) return void entry.resume();
      try {
        entries += 1;
        if (entries > limits.maxEntries) throw entryRefusal(origin, "too-many-entries", null, `more than ${limits.maxEntries} entries`, { limit: limits.maxEntries });
        const path = entryPath(entry.path, prefix, origin, limits);
        if (path === null) {
          if (entry.type !== "Directory") throw entryRefusal(origin, "unsupported-entry", entry.path, "only a directory may name the root");
          return void entry.resume();
        }
        if (entry.type === "Directory") {
          if (implicit.has(path)) {
            implicit.delete(path);
          } else {
            claim(path, "directory");
            mkdirSync(join(dest, path), { mode: 0o755 });
          }
          return void entry.resume();
        }
        if (entry.type === "SymbolicLink") {
          const target = symlinkTarget(path, entry.linkpath ?? "", origin, limits.maxPathBytes);
          claim(path, "symlink");
          symlinkSync(target, join(dest, path));
          return void entry.resume();
        }
        if (entry.type === "Link") throw entryRefusal(origin, "hard-link", entry.path, "hard links are refused", { target: entry.linkpath ?? null });
        if (SPECIAL_TYPES.has(entry.type)) throw entryRefusal(origin, "special-file", entry.path, `${entry.type} entries are refused`, { type: entry.type });
        if (!FILE_TYPES.has(entry.type)) throw entryRefusal(origin, "unsupported-entry", entry.path, `${entry.type} entries are not supported`, { type: entry.type });
        if (bytes + entry.size > limits.maxBytes) throw entryRefusal(origin, "too-large", entry.path, `the archive expands to more than ${limits.maxBytes} bytes`, { limit: limits.maxBytes });
        claim(path, "file");
        const mode = ((entry.mode ?? 0o644) & 0o100) !== 0 ? 0o755 : 0o644;
        const fd = openSync(join(dest, path), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
        files += 1;
        let open = true;
        const close = () => {
          if (!open) return;
          open = false;
          openFiles.delete(close);
          closeSync(fd);
        };
        openFiles.add(close);
        entry.on("data", (chunk: Buffer) => {
          if (failed) return close();
          try {
            bytes += chunk.length;
            if (bytes > limits.maxBytes) throw entryRefusal(origin, "too-large", entry.path, `the archive expands to more than ${limits.maxBytes} bytes`, { limit: limits.maxBytes });
            writeSync(fd, chunk);
          } catch (error) {
            close();
            fail(error);
          }
        });
        entry.on("end", () => {
          if (!open) return;
          try {
            fchmodSync(fd, mode);
            close();
          } catch (error) {
            close();
            fail(error);
          }
        });
      } catch (error) {
        entry.resume();
        fail(error);
      }
    };

    parser.on("entry", onEntry);
    parser.on("ignoredEntry", (entry: ReadEntry) => {
      // Nothing is filtered, so only an oversized meta header (pax, GNU long name or link) is ever ignored.
      fail(
        entry.meta
          ? entryRefusal(origin, "header-too-large", null, `the ${entry.type} header of ${entry.size} bytes exceeds the limit of ${limits.maxHeaderBytes}`, { limit: limits.maxHeaderBytes, size: entry.size, type: entry.type })
          : entryRefusal(origin, "unsupported-entry", entry.path, "the tar parser skipped this entry", { type: entry.type }),
      );
    });
    const corrupt = (message: string, code?: unknown) =>
      fail(entryRefusal(origin, "corrupt-archive", null, `not a readable tar archive: ${message}`, code === undefined ? {} : { tarCode: code }));
    parser.on("warn", (code: string, message: string | Error) => corrupt(message instanceof Error ? message.message : message, code));
    parser.on("error", (error: Error & { code?: string }) => corrupt(error.message, error.code));
    parser.on("end", () => {
      if (failed) return;
      if (entries === 0) return fail(entryRefusal(origin, "empty-archive", null, "the archive has no entries"));
      try {
        // Like every directory written above; 0700 only while the archive was being written into it.
        chmodSync(dest, 0o755);
      } catch (error) {
        return fail(error);
      }
      resolvePromise({ entries, files, bytes });
    });
    input.on("error", (error) => fail(error instanceof OatsError ? error : entryRefusal(origin, "corrupt-archive", null, `cannot read the archive: ${error.message}`)));
    input.pipe(parser as unknown as NodeJS.WritableStream);
  });
}
