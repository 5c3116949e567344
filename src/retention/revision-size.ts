import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";

/**
 * What a retained revision occupies: its regular files and their bytes
 * (symlinks and directories count as entries, not bytes). Read with lstat
 * only, never following a link, iteratively, and never verified: this is
 * for listing (`oats ls`), not a verdict.
 */
export interface RevisionSize {
  readonly files: number;
  readonly bytes: number;
}

/**
 * How many regular files a revision directory holds and their bytes, by lstat, never following a link: a listing,
 * not a verification.
 */
export function revisionSize(dir: string): RevisionSize {
  let files = 0;
  let bytes = 0;
  const pending = [dir];
  while (pending.length > 0) {
    const current = pending.pop()!;
    for (const entry of readdirSync(current, { withFileTypes: true })) {
      const path = join(current, entry.name);
      if (entry.isDirectory()) pending.push(path);
      else if (entry.isFile()) {
        files += 1;
        bytes += lstatSync(path).size;
      }
    }
  }
  return { files, bytes };
}

/** 1234 -> "1.2 KiB"; bytes below 1 KiB are exact. */
export function formatBytes(bytes: number): string {
  const units = ["KiB", "MiB", "GiB", "TiB"];
  if (bytes < 1024) return `${bytes} B`;
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}
