import { EMIT_EVERY_FILES, throwIfAborted, type ProgressListener } from "../retention/index.js";
import { chmodSync } from "node:fs";
import type { Readable } from "node:stream";
import { Parser, type ReadEntry } from "tar";
import { OatsError, asStepError, isOatsError } from "../core/index.js";
import { DEFAULT_NAME_LIMITS, entryPath, entryRefusal } from "./entry-path.js";
import { TreeWriter } from "./tree-writer.js";

/**
 * Safe extraction of a tar stream (gzip detected by the parser) into an
 * empty staging directory that the caller owns and removes. Entries are
 * written by our TreeWriter (tree-writer.ts, shared with git commits), never
 * by tar's own unpacker, so every rule below is ours and nothing is written
 * that was not checked first:
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
      throw new OatsError(
        "invalid-input",
        `extraction limit ${name} must be a positive integer, got ${JSON.stringify(value)}`,
        { [name]: value, reason: "invalid-limit" },
      );
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
  /** `extract` events: entries written and their bytes (no totals: an archive is not listed before it is read). */
  readonly onProgress?: ProgressListener;
  /** Checked at each entry and chunk; an abort refuses with the interruption error, and the caller removes the
   * directory as on any refusal. */
  readonly signal?: AbortSignal;
}

export interface ExtractResult {
  readonly entries: number;
  readonly files: number;
  readonly bytes: number;
}

const FILE_TYPES = new Set(["File", "OldFile", "ContiguousFile"]);
const SPECIAL_TYPES = new Set(["CharacterDevice", "BlockDevice", "FIFO"]);

/**
 * Extract a tar stream (gzip or not) into `dest`, an empty staging directory the caller owns and removes, by the rules
 * of this module (src/acquisition/extract.ts). Refuses an entry that would land outside the tree
 * (`artifact-not-contained`), an entry type or name the rules forbid or a limit exceeded (`invalid-artifact`), a
 * corrupt archive (`invalid-input`) and bad limits (`invalid-input`, reason `invalid-limit`); an abort through
 * `options.signal` is an interruption.
 * @returns how many entries and files were written, and their bytes
 */
export function extractTar(input: Readable, dest: string, options: ExtractOptions): Promise<ExtractResult> {
  const origin = options.origin;
  const prefix = options.prefix ?? null;
  const limits = extractLimits(options.limits);
  const writer = new TreeWriter(dest, origin, limits);

  return new Promise<ExtractResult>((resolvePromise, reject) => {
    let failed = false;
    // Past maxMetaEntrySize node-tar skips a meta header's body instead of buffering it, and reports it as ignored:
    // refused below.
    const parser = new Parser({ strict: true, maxMetaEntrySize: limits.maxHeaderBytes });
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      writer.closeAll();
      input.unpipe(parser);
      input.destroy();
      reject(isOatsError(error) ? error : asStepError("extract", error, { archive: origin }));
    };

    const { onProgress, signal } = options;
    let nextReport = 0;
    const onEntry = (entry: ReadEntry) => {
      if (failed) return void entry.resume();
      try {
        throwIfAborted(signal);
        if (onProgress && writer.totals.entries >= nextReport) {
          nextReport = writer.totals.entries + EMIT_EVERY_FILES;
          onProgress({ phase: "extract", files: writer.totals.files, bytes: writer.totals.bytes });
        }
        writer.countEntry();
        const path = entryPath(entry.path, prefix, origin, limits);
        if (path === null) {
          if (entry.type !== "Directory")
            throw entryRefusal(origin, "unsupported-entry", entry.path, "only a directory may name the root");
          return void entry.resume();
        }
        if (entry.type === "Directory") {
          writer.directory(path);
          return void entry.resume();
        }
        if (entry.type === "SymbolicLink") {
          writer.symlink(path, entry.linkpath ?? "");
          return void entry.resume();
        }
        if (entry.type === "Link")
          throw entryRefusal(origin, "hard-link", entry.path, "hard links are refused", {
            target: entry.linkpath ?? null,
          });
        if (SPECIAL_TYPES.has(entry.type))
          throw entryRefusal(origin, "special-file", entry.path, `${entry.type} entries are refused`, {
            type: entry.type,
          });
        if (!FILE_TYPES.has(entry.type))
          throw entryRefusal(origin, "unsupported-entry", entry.path, `${entry.type} entries are not supported`, {
            type: entry.type,
          });
        const file = writer.file(path, entry.size, ((entry.mode ?? 0o644) & 0o100) !== 0, entry.path);
        entry.on("data", (chunk: Buffer) => {
          if (failed) return file.close();
          try {
            throwIfAborted(signal);
            file.write(chunk);
          } catch (error) {
            file.close();
            fail(error);
          }
        });
        entry.on("end", () => {
          try {
            file.finish();
          } catch (error) {
            file.close();
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
          ? entryRefusal(
              origin,
              "header-too-large",
              null,
              `the ${entry.type} header of ${entry.size} bytes exceeds the limit of ${limits.maxHeaderBytes}`,
              { limit: limits.maxHeaderBytes, size: entry.size, type: entry.type },
            )
          : entryRefusal(origin, "unsupported-entry", entry.path, "the tar parser skipped this entry", {
              type: entry.type,
            }),
      );
    });
    const corrupt = (message: string, code?: unknown) =>
      fail(
        entryRefusal(
          origin,
          "corrupt-archive",
          null,
          `not a readable tar archive: ${message}`,
          code === undefined ? {} : { tarCode: code },
        ),
      );
    parser.on("warn", (code: string, message: string | Error) =>
      corrupt(message instanceof Error ? message.message : message, code),
    );
    parser.on("error", (error: Error & { code?: string }) => corrupt(error.message, error.code));
    parser.on("end", () => {
      if (failed) return;
      if (writer.totals.entries === 0)
        return fail(entryRefusal(origin, "empty-archive", null, "the archive has no entries"));
      try {
        // Like every directory written above; 0700 only while the archive was being written into it.
        chmodSync(dest, 0o755);
      } catch (error) {
        return fail(error);
      }
      resolvePromise(writer.totals);
    });
    input.on("error", (error) =>
      fail(
        error instanceof OatsError
          ? error
          : entryRefusal(origin, "corrupt-archive", null, `cannot read the archive: ${error.message}`),
      ),
    );
    input.pipe(parser as unknown as NodeJS.WritableStream);
  });
}
