import { lstatSync, realpathSync, statSync } from "node:fs";
import { join, resolve, sep } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import { retainedTreeDir, resolveScope, verifyAllTrees } from "../retention/index.js";
import type { ArtifactRefRecord, ResolutionRecord } from "./record.js";
import { readRecordBytes } from "./store.js";

/**
 * Reading a resolution never consults today's lock, source or installed
 * store: the record says exactly which retained artifacts it uses, and with
 * `verify` every one of them is re-hashed.
 */

export interface ReadResolutionOptions {
  /** Re-verify every referenced artifact (full digest, no shortcuts). */
  readonly verify?: boolean;
}

export interface ReadResolution {
  readonly id: string;
  readonly path: string;
  readonly record: ResolutionRecord;
  /** Absolute path of every entry point, inside its retained artifact. */
  readonly entrypoints: Record<string, string>;
  readonly verified: boolean;
}

/** Every artifact a record references, each once. */
export function referencedArtifacts(record: ResolutionRecord): ArtifactRefRecord[] {
  const seen = new Map<string, ArtifactRefRecord>();
  const add = (ref: ArtifactRefRecord) => seen.set(`${ref.kind}\0${ref.key}\0${ref.integrity.value}`, ref);
  if (record.source) add(record.source.artifact);
  for (const entry of Object.values(record.artifacts)) add(entry.artifact);
  for (const entrypoint of Object.values(record.entrypoints)) add(entrypoint.artifact);
  return [...seen.values()];
}

/**
 * Resolve an entry point inside its retained artifact, following symlinks
 * inside the tree: the target must exist and stay inside the artifact.
 */
export async function resolveEntrypoint(
  scope: string,
  name: string,
  entrypoint: { artifact: ArtifactRefRecord; path: string },
): Promise<string> {
  return resolveEntrypointAt(resolveScope(scope), name, entrypoint);
}

/**
 * resolveEntrypoint in a scope already resolved (resolveScope): a record's
 * entry points are resolved against the scope its read resolved once. The
 * check below still refuses a symlink anywhere on the path, the scope's own
 * components included: the real path must be the path itself.
 */
function resolveEntrypointAt(
  realScope: string,
  name: string,
  entrypoint: { artifact: ArtifactRefRecord; path: string },
): string {
  const dir = retainedTreeDir(realScope, entrypoint.artifact);
  const quick = resolvedInOneStep(dir, entrypoint.path);
  if (quick !== null) return quick;
  let root: string;
  try {
    root = realpathSync.native(dir);
  } catch {
    throw new OatsError(
      "artifact-not-found",
      `entry point ${name}: artifact ${entrypoint.artifact.key} is not retained in this scope`,
      { entrypoint: name, dir },
    );
  }
  // Synchronous calls: three thread-pool round trips per entry point cost ten
  // times more than the calls themselves (docs/design/performance.md, row 7b).
  // Every store component down to the revision is a real directory, never a symlink (contract section 3).
  if (root !== dir) {
    throw new OatsError(
      "invalid-artifact-store",
      `entry point ${name}: the revision of ${entrypoint.artifact.key} is reached through a symlink: ${dir}`,
      { entrypoint: name, dir, resolved: root, reason: "symlink" },
    );
  }
  return resolveEntrypointIn(root, name, entrypoint);
}

/**
 * The common case in one path resolution instead of two: the entry point's
 * real path lies below `dir` itself. Every prefix of a real path is a real
 * directory, so `dir` was reached through no symlink, exactly what
 * resolveEntrypointAt's first check establishes; the lexical check and the
 * regular-file check are resolveEntrypointIn's. Null on anything else, and
 * the full resolution then finds (and words) the refusal.
 */
function resolvedInOneStep(dir: string, path: string): string | null {
  if (!resolve(dir, path).startsWith(dir + sep)) return null;
  let target: string;
  try {
    target = realpathSync.native(join(dir, path));
  } catch {
    return null;
  }
  if (!target.startsWith(dir + sep)) return null;
  // lstat: the target is a real path, so this is the file itself; a symlink put there since is left to the
  // full resolution.
  try {
    return lstatSync(target).isFile() ? target : null;
  } catch {
    return null;
  }
}

/**
 * Resolve an entry point inside `root`, a real directory holding a copy of
 * its artifact (the revision itself, or a dispatch's run copy): the same
 * containment rules as resolveEntrypoint.
 */
export function resolveEntrypointIn(
  root: string,
  name: string,
  entrypoint: { artifact: ArtifactRefRecord; path: string },
): string {
  let target: string;
  // Lexically first: a path that climbs out is not contained, whether or not something exists there.
  if (!resolve(root, entrypoint.path).startsWith(root + sep)) {
    throw new OatsError(
      "artifact-not-contained",
      `entry point ${name}: ${entrypoint.path} climbs out of its artifact ${entrypoint.artifact.key}`,
      {
        entrypoint: name,
        path: entrypoint.path,
      },
    );
  }
  try {
    target = realpathSync.native(join(root, entrypoint.path));
  } catch (error) {
    const code = errnoCode(error);
    throw new OatsError(
      code === "ELOOP" ? "artifact-not-contained" : "artifact-not-found",
      `entry point ${name}: ${entrypoint.path} does not resolve inside ${entrypoint.artifact.key}`,
      {
        entrypoint: name,
        path: entrypoint.path,
        errno: code,
      },
    );
  }
  if (!target.startsWith(root + sep)) {
    throw new OatsError(
      "artifact-not-contained",
      `entry point ${name}: ${entrypoint.path} resolves outside its artifact ${entrypoint.artifact.key}`,
      {
        entrypoint: name,
        path: entrypoint.path,
        resolved: target,
      },
    );
  }
  // An entry point is something to run: a directory (or anything but a regular file) is not one.
  if (!statSync(target).isFile()) {
    throw new OatsError(
      "artifact-not-found",
      `entry point ${name}: ${entrypoint.path} in ${entrypoint.artifact.key} is not a regular file`,
      {
        entrypoint: name,
        path: entrypoint.path,
        reason: "not-a-file",
      },
    );
  }
  return target;
}

/**
 * A stored record by id, with every entry point resolved to its path inside its retained tree. With
 * `options.verify` every artifact the record references is re-hashed first (`integrity-mismatch`,
 * `artifact-not-found`). Refuses an unknown id (`resolution-not-found`) and a record that is not its id's bytes.
 */
export async function readResolution(
  scope: string,
  id: string,
  options: ReadResolutionOptions = {},
): Promise<ReadResolution> {
  const realScope = resolveScope(scope);
  const { id: canonicalId, path, record } = readRecordBytes(realScope, id);
  if (options.verify) {
    // On every core; the refusal is the one a loop in record order would meet first.
    await verifyAllTrees(realScope, referencedArtifacts(record));
  }
  const entrypoints: Record<string, string> = Object.create(null);
  for (const [name, entrypoint] of Object.entries(record.entrypoints))
    entrypoints[name] = resolveEntrypointAt(realScope, name, entrypoint);
  return { id: canonicalId, path, record, entrypoints, verified: options.verify === true };
}

/** Only complete and reconstructed records can be dispatched; partial and unknown refuse with what is unresolved. */
export function checkReadiness(record: Pick<ResolutionRecord, "status" | "unresolved" | "evidence">): void {
  if (record.status === "complete" && record.unresolved.length === 0) return;
  if (record.status === "reconstructed" && record.evidence.length > 0 && record.unresolved.length === 0) return;
  throw new OatsError(
    "resolution-incomplete",
    `resolution is ${record.status}: ${record.unresolved.length} input(s) unresolved`,
    {
      status: record.status,
      unresolved: record.unresolved,
    },
  );
}
