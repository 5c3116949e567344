import type { Readable } from "node:stream";
import { Parser, type ReadEntry } from "tar";
import { OatsError, asStepError, isOatsError } from "../errors.js";
import { entryPath, entryRefusal } from "./entry-path.js";
import { TreeWriter } from "./tree-writer.js";

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
 *   decompression bomb stops at the limit, not at the disk's end);
 * - files get 0755 when the owner-exec bit is set, else 0644, like retention.
 *
 * A refusal aborts the stream at once; the caller removes the directory.
 */

export interface ExtractLimits {
  readonly maxEntries: number;
  readonly maxBytes: number;
}

export const DEFAULT_EXTRACT_LIMITS: ExtractLimits = { maxEntries: 100_000, maxBytes: 4 * 1024 ** 3 };

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

const FILE_TYPES = new Set(["File", "OldFile", "ContiguousFile"]);
const SPECIAL_TYPES = new Set(["CharacterDevice", "BlockDevice", "FIFO"]);

export function extractTar(input: Readable, dest: string, options: ExtractOptions): Promise<ExtractResult> {
  const origin = options.origin;
  const prefix = options.prefix ?? null;
  const limits = { ...DEFAULT_EXTRACT_LIMITS, ...(options.limits ?? {}) };
  const writer = new TreeWriter(dest, origin, limits);

  return new Promise<ExtractResult>((resolvePromise, reject) => {
    let failed = false;
    const parser = new Parser({ strict: true });
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      writer.closeAll();
      input.unpipe(parser);
      input.destroy();
      reject(isOatsError(error) ? error : asStepError("extract", error, { archive: origin }));
    };

    const onEntry = (entry: ReadEntry) => {
      if (failed) return void entry.resume();
      try {
        writer.countEntry();
        const path = entryPath(entry.path, prefix, origin);
        if (path === null) {
          if (entry.type !== "Directory") throw entryRefusal(origin, "unsupported-entry", entry.path, "only a directory may name the root");
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
        if (entry.type === "Link") throw entryRefusal(origin, "hard-link", entry.path, "hard links are refused", { target: entry.linkpath ?? null });
        if (SPECIAL_TYPES.has(entry.type)) throw entryRefusal(origin, "special-file", entry.path, `${entry.type} entries are refused`, { type: entry.type });
        if (!FILE_TYPES.has(entry.type)) throw entryRefusal(origin, "unsupported-entry", entry.path, `${entry.type} entries are not supported`, { type: entry.type });
        const file = writer.file(path, entry.size, ((entry.mode ?? 0o644) & 0o100) !== 0, entry.path);
        entry.on("data", (chunk: Buffer) => {
          if (failed) return file.close();
          try {
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
    const corrupt = (message: string, code?: unknown) =>
      fail(entryRefusal(origin, "corrupt-archive", null, `not a readable tar archive: ${message}`, code === undefined ? {} : { tarCode: code }));
    parser.on("warn", (code: string, message: string | Error) => corrupt(message instanceof Error ? message.message : message, code));
    parser.on("error", (error: Error & { code?: string }) => corrupt(error.message, error.code));
    parser.on("end", () => {
      if (failed) return;
      if (writer.totals.entries === 0) return fail(entryRefusal(origin, "empty-archive", null, "the archive has no entries"));
      resolvePromise(writer.totals);
    });
    input.on("error", (error) => fail(error instanceof OatsError ? error : entryRefusal(origin, "corrupt-archive", null, `cannot read the archive: ${error.message}`)));
    input.pipe(parser as unknown as NodeJS.WritableStream);
  });
}
