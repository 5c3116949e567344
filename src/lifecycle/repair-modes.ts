import { lstatSync } from "node:fs";
import { join } from "node:path";
import { readManifestBytes } from "../retention/index.js";

export interface RecordedModes {
  /** The manifest document as it was (put back when a repair is taken back). */
  readonly bytes: Buffer;
  readonly bits: Map<string, boolean>;
}

/**
 * A legacy-named revision (`oats.tree-legacy.v0`) is named by a digest that
 * does not cover modes, so bytes that verify for its name may still be
 * another tree: the same files with other owner-execute bits, another
 * `oats.tree-exec.v1` identity. What the revision was is known only from
 * the manifest retain wrote beside it (one row per file, with its exec
 * bit). Repair compares the tree it published with those rows and takes it
 * back when a bit differs. The manifest is diagnostic: one that is missing
 * or unreadable only means the modes cannot be compared, never a refusal.
 */

/** The owner-exec bit of each file the revision's manifest records, or null when it has no readable manifest. */
export function recordedExecBits(revisionDir: string): RecordedModes | null {
  const bytes = readManifestBytes(revisionDir);
  if (bytes === null) return null;
  let rows: unknown;
  try {
    rows = (JSON.parse(bytes.toString("utf8")) as { rows?: unknown }).rows;
  } catch {
    return null;
  }
  if (!Array.isArray(rows)) return null;
  const bits = new Map<string, boolean>();
  for (const row of rows as { path?: unknown; type?: unknown; exec?: unknown }[]) {
    if (row?.type !== "file") continue;
    if (typeof row.path !== "string" || typeof row.exec !== "boolean") return null;
    bits.set(row.path, row.exec);
  }
  return { bytes, bits };
}

export interface OtherExecBit {
  readonly path: string;
  readonly recorded: boolean;
  readonly found: boolean;
}

/** The first recorded file of `dir` (a stored revision, the operator's) whose owner-exec bit is another. */
export function otherExecBit(dir: string, recorded: RecordedModes): OtherExecBit | null {
  for (const [path, exec] of recorded.bits) {
    let found: boolean;
    try {
      found = (lstatSync(join(dir, path)).mode & 0o100) !== 0;
    } catch {
      // A recorded path the tree lacks: its legacy digest would differ, so verification already said so.
      continue;
    }
    if (found !== exec) return { path, recorded: exec, found };
  }
  return null;
}
