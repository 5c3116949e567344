import { lstat, realpath } from "node:fs/promises";
import { join } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import type { ProgressListener } from "./digest/tree.js";
import { throwIfAborted } from "./digest/progress.js";
import { walkTree } from "./digest/walk.js";
import { assertArtifactKey, assertArtifactKind, assertIdentifier, type ArtifactKind } from "./store/ids.js";
import { type IntegrityInput, TREE_EXEC, TREE_LEGACY, parseTreeIntegrity } from "./digest/integrity.js";
import { capabilityRows, type OatsLockInput, parseLock } from "./oats-lock.js";
import { checkProvenance, expectedProvenance } from "./provenance.js";
import { publishedReceipt, type ArtifactReceipt } from "./receipt.js";
import { checkSourceOutsideStore, checkSymlinks } from "./source-check.js";
import { inspectStore, resolveScope } from "./store/components.js";
import { startEarlyCheck, type EarlyCheck } from "./store/kept-early.js";
import { storeRoot } from "./store/layout.js";
import { DEFAULT_LOCK_WAIT_MS } from "./store/publish-lock.js";
import { withPublishLease } from "./store/lease.js";
import { publishAdopted, publishTree, revisionParentSegments, type PublishPlan } from "./store/publish.js";

export interface RetainOptions {
  /** How long to wait for another publisher's lock before refusing with `busy`. */
  readonly lockWaitMs?: number;
  readonly onProgress?: ProgressListener;
  /** Abort to stop: an interruption error (isInterrupted), with the staging removed (PublishPlan.signal). */
  readonly signal?: AbortSignal;
  /** The deepest path the source may have (segments); DEFAULT_MAX_DEPTH otherwise. */
  readonly maxDepth?: number;
  /**
   * A capability retained under its lock's legacy name only: the
   * oats.tree-exec.v1 digest the tree must also have, checked on the staged
   * copy (`source-differs` otherwise). The legacy name does not cover exec
   * bits; repair binds them with it.
   */
  readonly expectExec?: string;
}

async function sourceRoot(dir: string): Promise<string> {
  let resolved: string;
  try {
    resolved = await realpath(dir);
  } catch (error) {
    throw new OatsError("invalid-input", `source does not exist: ${dir}`, {
      source: dir,
      errno: errnoCode(error),
      reason: "source-missing",
    });
  }
  if (!(await lstat(resolved)).isDirectory())
    throw new OatsError("invalid-input", `source is not a directory: ${dir}`, {
      source: dir,
      reason: "source-not-a-directory",
    });
  return resolved;
}

/**
 * The store as it must be before a tree is published into it (store/components.ts), and the tree at `root` neither
 * in it nor above the revisions' parent `segments`.
 */
export async function checkOutsideStore(
  scope: string,
  kind: ArtifactKind,
  segments: readonly string[],
  root: string,
): Promise<void> {
  inspectStore(scope, kind, [...segments]);
  await checkSourceOutsideStore(root, [storeRoot(scope, kind), join(storeRoot(scope, kind), ...segments)]);
}

/** The part of a publish plan that the caller's options give. */
export function planOptions(
  options: RetainOptions,
): Pick<PublishPlan, "lockWaitMs" | "onProgress" | "signal" | "maxDepth"> {
  return {
    lockWaitMs: options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS,
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
    ...depth(options),
  };
}

/** Everything a source must pass before the store is touched. */
async function checkedSource(
  scope: string,
  kind: ArtifactKind,
  _key: string,
  source: string,
  segments: string[],
  maxDepth: number | undefined,
) {
  const root = await sourceRoot(source);
  await checkOutsideStore(scope, kind, segments, root);
  const listing = await walkTree(root, maxDepth === undefined ? {} : { maxDepth });
  await checkSymlinks(root, listing);
  return listing;
}

/**
 * How the checked source reaches the store: copied while hashed (the source
 * is the caller's and stays as it was), or adopted (a tree the caller wrote
 * for this publication, e.g. an extracted tarball, renamed into staging
 * instead of copied; see publishAdopted).
 */
type Transfer = "copy" | "adopt";

const publishers = { copy: publishTree, adopt: publishAdopted } as const;

const depth = (options: RetainOptions): { maxDepth?: number } =>
  options.maxDepth === undefined ? {} : { maxDepth: options.maxDepth };

/**
 * Retain a materialized capability under the revision its lock row names
 * (`<id>/sha256-<hex>/`, oats.tree-legacy.v0), after checking the tree
 * against that integrity and its `.oats-installation.json` against the
 * lock's package and capability rows.
 */
export function retainCapabilityArtifact(
  scope: string,
  sourceDir: string,
  capabilityId: string,
  lock: OatsLockInput,
  options: RetainOptions = {},
): Promise<ArtifactReceipt> {
  return withPublishLease(scope, () => capabilityArtifact("copy", scope, sourceDir, capabilityId, lock, options));
}

/**
 * retainCapabilityArtifact of a tree the caller wrote for it on the store's
 * filesystem (an extraction directory under the scope): the tree is moved
 * into the store rather than copied, with the same checks (integrity from
 * the lock, provenance, durability, a verify pass of the staged tree). On
 * success the directory is gone; otherwise whatever is left is the caller's
 * to remove.
 */
export function adoptCapabilityArtifact(
  scope: string,
  extractedDir: string,
  capabilityId: string,
  lock: OatsLockInput,
  options: RetainOptions = {},
): Promise<ArtifactReceipt> {
  return withPublishLease(scope, () => capabilityArtifact("adopt", scope, extractedDir, capabilityId, lock, options));
}

async function capabilityArtifact(
  transfer: Transfer,
  scope: string,
  sourceDir: string,
  capabilityId: string,
  lock: OatsLockInput,
  options: RetainOptions,
): Promise<ArtifactReceipt> {
  const id = assertIdentifier(capabilityId, "capability id");
  const parsedLock = parseLock(lock);
  const rows = capabilityRows(parsedLock, id);
  const expected = parseTreeIntegrity(rows.capability.integrity, [TREE_LEGACY]);
  const provenance = expectedProvenance(id, rows);
  const realScope = resolveScope(scope);
  const formats = [TREE_LEGACY, TREE_EXEC] as const;
  // The stored revision's read starts before the source's walk (store/kept-early.ts).
  const early = startEarlyCheck({
    scope: realScope,
    kind: "capability",
    key: id,
    nameFormat: TREE_LEGACY,
    formats,
    expected: expected.value,
    ...depth(options),
  });
  try {
    return await capabilityPublished(
      transfer,
      realScope,
      sourceDir,
      id,
      expected.value,
      provenance,
      formats,
      early,
      options,
    );
  } finally {
    await early?.release();
  }
}

async function capabilityPublished(
  transfer: Transfer,
  realScope: string,
  sourceDir: string,
  id: string,
  expected: string,
  provenance: ReturnType<typeof expectedProvenance>,
  formats: readonly [typeof TREE_LEGACY, typeof TREE_EXEC],
  early: EarlyCheck | null,
  options: RetainOptions,
): Promise<ArtifactReceipt> {
  const listing = await checkedSource(
    realScope,
    "capability",
    id,
    sourceDir,
    revisionParentSegments(id, TREE_LEGACY),
    options.maxDepth,
  );
  throwIfAborted(options.signal);
  const checkStaged = (dir: string) => checkProvenance(dir, provenance);
  const published = await publishers[transfer]({
    scope: realScope,
    kind: "capability",
    key: id,
    listing,
    nameFormat: TREE_LEGACY,
    expected,
    formats,
    checkStaged,
    checkExisting: checkStaged,
    ...(options.expectExec === undefined ? {} : { expectedAlso: { [TREE_EXEC]: options.expectExec } }),
    early,
    ...planOptions(options),
  });
  return publishedReceipt("capability", id, TREE_LEGACY, published);
}

export interface RetainTreeRequest {
  readonly kind: ArtifactKind;
  /** A capability id or capture name, or for a source the 64-hex identity key. */
  readonly key: string;
  readonly source: string;
  /** The oats.tree-exec.v1 integrity the tree must have; without it, what is measured is the identity. */
  readonly expect?: IntegrityInput;
}

/** Retain any tree under `<key>/tree-exec-v1/sha256-<hex>/`. */
export function retainTree(
  scope: string,
  request: RetainTreeRequest,
  options: RetainOptions = {},
): Promise<ArtifactReceipt> {
  return withPublishLease(scope, () => tree("copy", scope, request, options));
}

/** retainTree of a tree the caller wrote for it, moved rather than copied (as adoptCapabilityArtifact). */
export function adoptTree(
  scope: string,
  request: RetainTreeRequest,
  options: RetainOptions = {},
): Promise<ArtifactReceipt> {
  return withPublishLease(scope, () => tree("adopt", scope, request, options));
}

async function tree(
  transfer: Transfer,
  scope: string,
  request: RetainTreeRequest,
  options: RetainOptions,
): Promise<ArtifactReceipt> {
  const kind = assertArtifactKind(request.kind);
  const key = assertArtifactKey(kind, request.key);
  const expected = request.expect === undefined ? undefined : parseTreeIntegrity(request.expect, [TREE_EXEC]);
  const realScope = resolveScope(scope);
  // An adoption without an expected digest is never kept without its copy (publishAdopted): nothing to start early.
  const early =
    transfer === "copy" || expected
      ? startEarlyCheck({
          scope: realScope,
          kind,
          key,
          nameFormat: TREE_EXEC,
          formats: [TREE_EXEC],
          ...(expected ? { expected: expected.value } : {}),
          ...depth(options),
        })
      : null;
  try {
    return await treePublished(transfer, realScope, kind, key, request.source, expected?.value, early, options);
  } finally {
    await early?.release();
  }
}

async function treePublished(
  transfer: Transfer,
  realScope: string,
  kind: ArtifactKind,
  key: string,
  source: string,
  expected: string | undefined,
  early: EarlyCheck | null,
  options: RetainOptions,
): Promise<ArtifactReceipt> {
  const listing = await checkedSource(
    realScope,
    kind,
    key,
    source,
    revisionParentSegments(key, TREE_EXEC),
    options.maxDepth,
  );
  throwIfAborted(options.signal);
  const published = await publishers[transfer]({
    scope: realScope,
    kind,
    key,
    listing,
    nameFormat: TREE_EXEC,
    ...(expected ? { expected } : {}),
    formats: [TREE_EXEC],
    early,
    ...planOptions(options),
  });
  return publishedReceipt(kind, key, TREE_EXEC, published);
}
