import { lstatSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import { ARTIFACT_KINDS, IDENTIFIER_PATTERN, SOURCE_KEY_PATTERN, type ArtifactKind } from "./store/ids.js";
import { TREE_EXEC, TREE_LEGACY, type Integrity } from "./digest/integrity.js";
import { inspectStore, inspectStoreAt, resolveScope } from "./store/components.js";
import {
  AGENTS_DIR,
  EXEC_REVISIONS_DIR,
  EXTRACT_STORE,
  FILE_STORES,
  RUN_COPIES_STORE,
  STAGING_PREFIX,
  hostTag,
  parseStagingName,
} from "./store/layout.js";
import { isManifestName } from "./store/manifest.js";
import { removeTree } from "./store/staging-writer.js";
import { listHeldFiles } from "./store/shared-layer.js";
import { verifyTrees } from "./verify-many.js";

/** What the store holds: retained revisions, and anything else found where revisions live. */

export interface RetainedEntry {
  readonly kind: ArtifactKind;
  readonly key: string;
  readonly integrity: Integrity;
  readonly dir: string;
}

export interface StoreListing {
  readonly revisions: RetainedEntry[];
  /** Dot-prefixed staging left in revision directories. */
  readonly staging: string[];
  /** Entries that are neither revisions, staging, locks nor the managed .gitignore. */
  readonly unexpected: string[];
  /** Revision manifests (`.manifest-sha256-<hex>.json`) whose revision directory is not there. */
  readonly orphanManifests: string[];
}

const REVISION_NAME = /^sha256-[0-9a-f]{64}$/;

/** A directory's entries, sorted; none when it does not exist. */
export function namesIn(dir: string): string[] {
  try {
    return readdirSync(dir).sort();
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return [];
    throw error;
  }
}

function isRealDirectory(path: string): boolean {
  return lstatSync(path).isDirectory();
}

/** True only when `path` is a real directory (absent or anything else: false). */
function existsAsDirectory(path: string): boolean {
  try {
    return lstatSync(path).isDirectory();
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return false;
    throw error;
  }
}

/** What a store walk meets beside revisions. */
export type StoreLeftovers = Omit<StoreListing, "revisions">;

function* scanRevisions(
  parent: string,
  kind: ArtifactKind,
  key: string,
  format: Integrity["format"],
  out: StoreLeftovers,
  allowExecDir: boolean,
): Generator<RetainedEntry> {
  for (const name of namesIn(parent)) {
    const path = join(parent, name);
    if (name.startsWith(STAGING_PREFIX)) {
      if (!name.endsWith(".lock")) out.staging.push(path);
    } else if (isManifestName(name)) {
      const revision = /^\.manifest-(sha256-[0-9a-f]{64})\.json$/.exec(name)?.[1];
      if (revision === undefined) out.unexpected.push(path);
      else if (!existsAsDirectory(join(parent, revision))) out.orphanManifests.push(path);
    } else if (name.startsWith(".lock-")) {
    } else if (allowExecDir && name === EXEC_REVISIONS_DIR && isRealDirectory(path)) {
      yield* scanRevisions(path, kind, key, TREE_EXEC, out, false);
    } else if (REVISION_NAME.test(name) && isRealDirectory(path)) {
      yield { kind, key, integrity: { format, value: name }, dir: path };
    } else {
      out.unexpected.push(path);
    }
  }
}

/**
 * The retained revisions one at a time, in store order (listStore's), each
 * key's directory listed when the walk reaches it: a reader that needs one
 * revision at a time (gc) holds no list of them. Staging, unexpected
 * entries and orphan manifests of the artifact stores go to `out` as they
 * are met.
 */
export function storeRevisions(
  scope: string,
  out: StoreLeftovers = { staging: [], unexpected: [], orphanManifests: [] },
): Generator<RetainedEntry> {
  return revisionsIn(resolveScope(scope), out);
}

function* revisionsIn(realScope: string, out: StoreLeftovers): Generator<RetainedEntry> {
  for (const kind of ARTIFACT_KINDS) {
    const { root, complete } = inspectStore(realScope, kind);
    if (!complete) continue;
    for (const key of namesIn(root)) {
      const path = join(root, key);
      if (key === ".gitignore") continue;
      if (key.startsWith(STAGING_PREFIX)) {
        out.staging.push(path);
        continue;
      }
      const validKey = kind === "source" ? SOURCE_KEY_PATTERN.test(key) : IDENTIFIER_PATTERN.test(key);
      if (!validKey || !isRealDirectory(path)) {
        out.unexpected.push(path);
        continue;
      }
      // Only capabilities have lock-named (legacy) revisions directly under the key.
      yield* scanRevisions(path, kind, key, kind === "capability" ? TREE_LEGACY : TREE_EXEC, out, true);
    }
  }
}

/**
 * Every retained revision of the scope, by kind, key and integrity, and what else the stores hold: staging
 * leftovers, unexpected entries and orphaned manifests. A listing only: nothing is verified.
 */
export function listStore(scope: string): StoreListing {
  const realScope = resolveScope(scope);
  const out: StoreListing = { revisions: [], staging: [], unexpected: [], orphanManifests: [] };
  for (const entry of revisionsIn(realScope, out)) out.revisions.push(entry);
  // Records, instance refs and blobs are published from staged files beside them.
  for (const components of FILE_STORES) {
    if (!inspectStoreAt(realScope, components).complete) continue;
    const dir = join(realScope, ...components);
    for (const name of namesIn(dir)) if (name.startsWith(STAGING_PREFIX)) out.staging.push(join(dir, name));
  }
  // A held file's replacement (store/shared-layer.ts) is staged beside it in the shared file layer.
  const layer = listHeldFiles(realScope);
  out.staging.push(...layer.staging);
  out.unexpected.push(...layer.unexpected);
  // A leases directory being built (store/lease.ts) is staged directly in `.agents`.
  const agents = join(realScope, AGENTS_DIR);
  if (existsAsDirectory(agents))
    for (const name of namesIn(agents)) if (name.startsWith(STAGING_PREFIX)) out.staging.push(join(agents, name));
  // Tarball extraction staging (acquisition/tarball.ts) and dispatch run copies
  // (captures/run-copy.ts): staging directories and the managed .gitignore, nothing else.
  for (const store of [EXTRACT_STORE, RUN_COPIES_STORE]) {
    if (!inspectStoreAt(realScope, store).complete) continue;
    const dir = join(realScope, ...store);
    for (const name of namesIn(dir)) {
      if (name === ".gitignore") continue;
      (name.startsWith(STAGING_PREFIX) ? out.staging : out.unexpected).push(join(dir, name));
    }
  }
  return out;
}

/** Every retained revision, in store order. */
export function listRetained(scope: string): RetainedEntry[] {
  return listStore(scope).revisions;
}

export interface FsckOutcome extends RetainedEntry {
  readonly ok: boolean;
  /** For a revision that verifies: its oats.tree-exec.v1 digest (measured with its name's format). */
  readonly execIntegrity?: Integrity;
  /** Verified against its anchored manifest (anchored-check.ts), its bytes not read again. */
  readonly anchored?: true;
  readonly error?: { code: string; kind: string; message: string; details: Record<string, unknown> };
}

export interface FsckReport {
  readonly checked: number;
  readonly ok: number;
  readonly damaged: number;
  readonly outcomes: FsckOutcome[];
  readonly staging: string[];
  readonly unexpected: string[];
  readonly orphanManifests: string[];
}

/** Verify every revision; report, never repair. */
export async function fsck(
  scope: string,
  options: { onArtifact?: (done: number, total: number) => void } = {},
): Promise<FsckReport> {
  return fsckListed(scope, listStore(scope), options);
}

/**
 * fsck of the revisions of a listing the caller has just made (the scope's fsck: the store is listed once).
 * `anchored`: revision dirs the caller verified against their anchored manifests (checkSharedLayer), reported ok
 * without a re-hash; every other revision is re-hashed.
 */
export async function fsckListed(
  scope: string,
  listing: StoreListing,
  options: { onArtifact?: (done: number, total: number) => void; anchored?: ReadonlySet<string> } = {},
): Promise<FsckReport> {
  const anchored = options.anchored ?? new Set<string>();
  const rehash = listing.revisions.filter((entry) => !anchored.has(entry.dir));
  const total = listing.revisions.length;
  const skipped = total - rehash.length;
  const onArtifact = options.onArtifact;
  if (onArtifact) for (let done = 1; done <= skipped; done++) onArtifact(done, total);
  // On every core; outcomes in store order, as a one-by-one loop would report them.
  const settled = await verifyTrees(
    scope,
    rehash,
    onArtifact ? { onVerified: (done) => onArtifact(skipped + done, total) } : {},
  );
  const outcomes: FsckOutcome[] = [];
  let next = 0;
  for (const entry of listing.revisions) {
    if (anchored.has(entry.dir)) {
      outcomes.push({ ...entry, ok: true, execIntegrity: entry.integrity, anchored: true });
      continue;
    }
    const outcome = settled[next++]!;
    if (outcome.ok) {
      outcomes.push({ ...entry, ok: true, execIntegrity: outcome.value.execIntegrity });
      continue;
    }
    const error = outcome.error;
    if (!(error instanceof OatsError) || error.kind === "internal") throw error;
    outcomes.push({ ...entry, ok: false, error: error.toJSON() });
  }
  const ok = outcomes.filter((outcome) => outcome.ok).length;
  return {
    checked: outcomes.length,
    ok,
    damaged: outcomes.length - ok,
    outcomes,
    staging: listing.staging,
    unexpected: listing.unexpected,
    orphanManifests: listing.orphanManifests,
  };
}

export interface CleanupReport {
  readonly removed: string[];
  /** Staging that belongs to a publisher still running, left alone. */
  readonly active: string[];
}

const FOREIGN_HOST_GRACE_MS = 24 * 60 * 60 * 1000;

function publisherAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return errnoCode(error) === "EPERM";
  }
}

/**
 * Whether the publisher that left a staging entry is gone: one of this host
 * whose process is gone, or one of another host (a shared filesystem) a day
 * old. A name that does not parse as ours is never judged abandoned.
 */
export function stagingAbandoned(path: string): boolean {
  const owner = parseStagingName(path.slice(path.lastIndexOf("/") + 1));
  if (!owner) return false;
  return owner.host === hostTag()
    ? !publisherAlive(owner.pid)
    : Date.now() - statSync(path).mtimeMs > FOREIGN_HOST_GRACE_MS;
}

/**
 * Remove staging left by crashed publishers, and nothing else. A staging
 * entry names its publisher's host and pid: one of this host whose process
 * is gone is removed; one whose process lives is in use and kept; one from
 * another host (a shared filesystem) is removed only when a day old. Names
 * that do not parse as ours are reported by fsck, not removed.
 */
export async function cleanupStaging(scope: string): Promise<CleanupReport> {
  const listing = listStore(scope);
  const removed: string[] = [];
  const active: string[] = [];
  for (const path of listing.staging) {
    if (!parseStagingName(path.slice(path.lastIndexOf("/") + 1))) continue;
    if (!stagingAbandoned(path)) {
      active.push(path);
      continue;
    }
    await removeTree(path);
    removed.push(path);
  }
  return { removed, active };
}
