import { lstatSync } from "node:fs";
import { OatsError, errnoCode } from "../core/index.js";
import { recordReader, resolutionPath } from "../resolution/index.js";
import { blobPath, resolveScope, retainedTreeDir, type ArtifactRef } from "../retention/index.js";
import { DEFAULT_GRACE_MS } from "./gc.js";
import { parsePinRef, pinRefText } from "./pins.js";
import { collectRoots, recordClosure, type Reachable } from "./roots.js";

/**
 * Why gc keeps an item (`oats gc --why`, as `nix-store --query --roots` answers for a store path): every root that
 * reaches it, with the record it reaches it through, or, when none does, whether its grace period still keeps it.
 * Pure reading, like a dry run: it takes no lock, so a publisher in flight may change the answer a moment later.
 */

export interface KeptBy {
  /** The root: `pin`, `instance:<name>`, `job:<id>`, `run:<handle>` or `run-file:<path>`. */
  readonly root: string;
  /** The resolution record through which the root reaches the item; absent for a pin of the item itself. */
  readonly via?: string;
}

export interface GcWhy {
  readonly scope: string;
  /** The item, as gc names it: `<kind>:<key>@<integrity>`, a resolution id or a blob digest. */
  readonly ref: string;
  readonly type: "revision" | "record" | "blob";
  readonly path: string;
  /** Every root that reaches the item; empty when none does. */
  readonly keptBy: KeptBy[];
  /** How old the item is (its mtime), and the grace period asked about. */
  readonly ageMs: number;
  readonly graceMs: number;
  /** What the next `gc --delete` with that grace does with it. */
  readonly verdict: "kept-by-roots" | "kept-young" | "collectable";
}

type Target = { type: "revision"; ref: ArtifactRef; text: string } | { type: "record" | "blob"; id: string };

function targetOf(input: string): Target {
  const parsed = parsePinRef(input);
  if (parsed.type === "resolution") return { type: "record", id: parsed.id };
  const ref: ArtifactRef = { kind: parsed.kind, key: parsed.key, integrity: parsed.integrity };
  return { type: "revision", ref, text: pinRefText(parsed) };
}

function reaches(reachable: Reachable, target: Target, path: string): boolean {
  if (target.type === "revision") return reachable.revisions.has(path);
  return target.type === "record" ? reachable.records.has(target.id) : reachable.blobs.has(target.id);
}

function ageOf(path: string, what: string): number {
  try {
    return Math.max(0, Date.now() - lstatSync(path).mtimeMs);
  } catch (error) {
    if (errnoCode(error) === "ENOENT")
      throw new OatsError("artifact-not-found", `${what} is not in this scope; gc has nothing to keep or collect`, {
        ref: what,
        path,
      });
    throw error;
  }
}

/** Every root that keeps `input` (an artifact reference, a resolution id or a blob digest) from gc, and why not. */
export function gcWhy(scope: string, input: string, options: { graceMs?: number } = {}): GcWhy {
  const realScope = resolveScope(scope);
  let target = targetOf(input);
  let path = target.type === "revision" ? retainedTreeDir(realScope, target.ref) : resolutionPath(realScope, target.id);
  // A `sha256-<hex>` that is no record may be a blob.
  if (target.type === "record" && !exists(path) && exists(blobPath(realScope, target.id))) {
    target = { type: "blob", id: target.id };
    path = blobPath(realScope, target.id);
  }
  const text = target.type === "revision" ? target.text : target.id;
  const ageMs = ageOf(path, text);
  const graceMs = options.graceMs ?? DEFAULT_GRACE_MS;
  const roots = collectRoots(realScope);
  const keptBy: KeptBy[] = [];
  if (target.type === "revision") {
    for (const ref of roots.artifacts) if (retainedTreeDir(realScope, ref) === path) keptBy.push({ root: "pin" });
  }
  const readRecord = recordReader(realScope);
  for (const [id, whys] of roots.records) {
    const reachable: Reachable = { revisions: new Set(), records: new Set([id]), blobs: new Set(), copies: new Map() };
    try {
      recordClosure(realScope, readRecord(id).record, reachable);
    } catch (error) {
      if (error instanceof OatsError && error.code === "resolution-not-found") continue;
      throw error;
    }
    if (reaches(reachable, target, path)) for (const root of whys) keptBy.push({ root, via: id });
  }
  const verdict = keptBy.length > 0 ? "kept-by-roots" : ageMs < graceMs ? "kept-young" : "collectable";
  return { scope: realScope, ref: text, type: target.type, path, keptBy, ageMs, graceMs, verdict };
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}
