import type { Command } from "commander";
import { usageError } from "./envelope.js";

/**
 * The archive limits as flags (retain of a package tarball, import of a
 * bundle; --max-depth also bounds the walk of a retained directory). Values
 * are positive decimal integers; the defaults are the library's
 * (DEFAULT_EXTRACT_LIMITS), which no real package comes near.
 */

export interface LimitFlags {
  maxEntries?: number;
  maxBytes?: number;
  maxPathBytes?: number;
  maxDepth?: number;
  maxHeaderBytes?: number;
}

const FLAGS = [
  ["maxEntries", "--max-entries <n>", "refuse an archive with more entries (default 100000)"],
  ["maxBytes", "--max-expanded-bytes <n>", "refuse an archive whose files expand to more bytes (default 4 GiB)"],
  [
    "maxPathBytes",
    "--max-path-bytes <n>",
    "refuse an entry name or symlink text longer than this many bytes (default 4096)",
  ],
  [
    "maxDepth",
    "--max-depth <n>",
    "refuse a path deeper than this many levels, in an archive or a walked tree (default 256)",
  ],
  [
    "maxHeaderBytes",
    "--max-header-bytes <n>",
    "refuse a pax or GNU long-name header larger than this many bytes (default 65536)",
  ],
] as const;

export function defineLimitFlags(command: Command): Command {
  for (const [, flag, description] of FLAGS) command.option(flag, description);
  return command;
}

/** Take the limit flags out of commander's options: the parsed limits, and the options that remain. */
export function takeLimitFlags(options: Record<string, unknown>): {
  limits: LimitFlags;
  rest: Record<string, unknown>;
} {
  const rest = { ...options };
  const limits: LimitFlags = {};
  for (const [name, flag] of FLAGS) {
    // commander names --max-expanded-bytes maxExpandedBytes.
    const key = flag.slice(2, flag.indexOf(" ")).replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase());
    const raw = rest[key];
    delete rest[key];
    if (raw === undefined) continue;
    const value = typeof raw === "string" && /^[1-9][0-9]*$/.test(raw) ? Number(raw) : NaN;
    if (!Number.isSafeInteger(value))
      throw usageError(`${flag.slice(0, flag.indexOf(" "))} must be a positive integer, got ${JSON.stringify(raw)}`, {
        flag: flag.slice(0, flag.indexOf(" ")),
        value: raw,
      });
    limits[name] = value;
  }
  return { limits, rest };
}

/** Whether any limit other than --max-depth was given (those apply to archives only). */
export function archiveOnlyLimits(limits: LimitFlags): string[] {
  return FLAGS.filter(([name]) => name !== "maxDepth" && limits[name] !== undefined).map(([, flag]) =>
    flag.slice(0, flag.indexOf(" ")),
  );
}
