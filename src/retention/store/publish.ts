import { lstatSync } from "node:fs";
import { lstat, mkdir, rename } from "node:fs/promises";
import { join } from "node:path";
import { OatsError, asStepError, errnoCode } from "../../core/index.js";
import {
  FRAMINGS,
  digestListing,
  type DigestOptions,
  type ProgressListener,
  type TreeDigests,
} from "../digest/tree.js";
import { noteRemoved, throwIfAborted, type ProgressPhase } from "../digest/progress.js";
import { walkTree, type TreeListing, type WalkOptions } from "../digest/walk.js";
import type { ArtifactKind } from "./ids.js";
import { TREE_EXEC, TREE_LEGACY, type TreeFormat } from "../digest/integrity.js";
import { ensureStore, fsyncDirectory, removeCreatedStore } from "./components.js";
import { faultPoint } from "./faults.js";
import { treeDifferences, writeManifest } from "./manifest.js";
import { anchorManifest } from "./manifest-anchor.js";
import { ManifestRecorder } from "./manifest-encoding.js";
import { adoptedAsVerified, type AdoptVerified } from "./adopted-read.js";
import {
  emptyDirectories,
  leftOut,
  removeEmptyDirectories,
  withoutDirectories,
  type LeftOut,
} from "./empty-directories.js";
import { EXEC_REVISIONS_DIR, assertContained, stagingName, storeRoot } from "./layout.js";
import { maskAdoptedModes } from "./modes.js";
import type { EarlyCheck } from "./kept-early.js";
import { kept, keptIfPresent, keptIfUnchanged } from "./kept.js";
import type { Measure } from "../parallel/pool.js";
import { withRevisionLock } from "./publish-lock.js";
import { StagingWriter, makeDurable, perFileDurability, removeTree } from "./staging-writer.js";
import { newTakeBack, shareAndSeal, takeBackShared, type FilesOutcome } from "./shared-layer.js";
import { SharingWriter } from "./sharing-writer.js";
import { stagedByStructure } from "./staged-check.js";

/**
 * Stage, verify, rename (contract section 5). The tree is copied into a
 * dot-prefixed staging directory beside its destination while it is hashed;
 * the digest is compared with what was expected; the staged copy is checked
 * (provenance), made durable, read back and verified again (files linked
 * from held files hashed in this publication by structure: staged-check.ts);
 * only then is it renamed into place, under a lock, and the parent fsync'd. A destination
 * that already exists is verified and reused, never replaced or repaired.
 * Any failure removes the staging directory; a crash leaves only staging,
 * which no reader selects.
 */

export interface PublishPlan {
  readonly scope: string;
  readonly kind: ArtifactKind;
  readonly key: string;
  readonly listing: TreeListing;
  /** The format whose digest names the revision directory. */
  readonly nameFormat: TreeFormat;
  /** Expected value of nameFormat, when the caller knows it. */
  readonly expected?: string;
  /** All formats to measure (nameFormat first). */
  readonly formats: readonly TreeFormat[];
  /**
   * Digests in other formats the tree must also have, checked on the staged
   * copy as it was read back (and on a revision reported kept): a repair of
   * a legacy-named capability binds its exec bits, which the legacy name
   * does not cover, so a source that changes them after it was checked is
   * `source-differs`.
   */
  readonly expectedAlso?: Partial<Record<TreeFormat, string>>;
  /** Checks on the staged copy before it becomes durable (provenance). */
  readonly checkStaged?: (stagedDir: string) => void;
  /** Checks on an existing revision before it is reported kept. */
  readonly checkExisting?: (dir: string) => void;
  readonly lockWaitMs: number;
  readonly onProgress?: ProgressListener;
  /**
   * Checked before each file is read and before the rename: an abort throws
   * the interruption error, and the staging is removed as on any failure
   * (the error's details.removed names it). After the rename the
   * publication is done and is not undone.
   */
  readonly signal?: AbortSignal;
  /** The deepest path a walked tree may have; DEFAULT_MAX_DEPTH otherwise. */
  readonly maxDepth?: number;
  /**
   * The stored revision's verification, started before the source was
   * walked (kept-early.ts); used when it is the revision this plan meets,
   * and released once the kept path is decided either way.
   */
  readonly early?: EarlyCheck | null;
  /**
   * publishAdopted only: what the caller's own read of `listing` measured
   * (see AdoptVerified); the staged tree is then not read back.
   */
  readonly verified?: AdoptVerified;
}

/** The digest options of one phase of a plan. */
export function digestOptions(
  plan: Pick<PublishPlan, "onProgress" | "signal">,
  phase: ProgressPhase,
  totalBytes?: number,
): DigestOptions {
  return {
    phase,
    ...(plan.onProgress ? { onProgress: plan.onProgress } : {}),
    ...(plan.signal ? { signal: plan.signal } : {}),
    ...(totalBytes === undefined ? {} : { totalBytes }),
  };
}

/** A phase that is one step (sync, publish): one event naming it, with the files it covers. */
function announce(plan: Pick<PublishPlan, "onProgress" | "signal" | "listing">, phase: ProgressPhase): void {
  throwIfAborted(plan.signal);
  if (!plan.onProgress) return;
  let totalFiles = 0;
  for (const leaf of plan.listing.leaves) if (leaf.type === "file") totalFiles += 1;
  plan.onProgress({ phase, files: 0, bytes: 0, totalFiles });
}

export interface PublishResult {
  readonly dir: string;
  readonly digests: TreeDigests;
  readonly status: "retained" | "kept";
  /** The source's empty directories, which the stored tree does not hold (empty-directories.ts). */
  readonly leftOut?: LeftOut;
  /** A retained (not kept) revision: how its files reached the shared file layer (shared-layer.ts). */
  readonly files?: FilesOutcome;
}

/** A result with what its source's listing left out, when it left anything out. */
function withLeftOut(result: PublishResult, empty: Parameters<typeof leftOut>[0]): PublishResult {
  const dropped = leftOut(empty);
  return dropped ? { ...result, leftOut: dropped } : result;
}

export function revisionParentSegments(key: string, format: TreeFormat): string[] {
  return format === TREE_LEGACY ? [key] : [key, EXEC_REVISIONS_DIR];
}

export function mismatch(
  plan: Pick<PublishPlan, "kind" | "key" | "nameFormat">,
  expected: string,
  actual: string,
  details: Record<string, unknown>,
  note = "",
): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `${plan.kind} ${plan.key}: expected ${plan.nameFormat}:${expected}, found ${plan.nameFormat}:${actual}${note}`,
    {
      kind: plan.kind,
      key: plan.key,
      format: plan.nameFormat,
      expected,
      actual,
      ...details,
    },
  );
}

/** Verify a revision directory that already exists; refuse, never repair, a damaged one. */
export async function verifyRevision(
  plan: Pick<PublishPlan, "kind" | "key" | "nameFormat" | "formats" | "onProgress" | "signal" | "maxDepth">,
  dir: string,
  expected: string,
  /** Where the walk and hash run (a worker lane); on this thread, with progress, otherwise. */
  measure?: Measure,
  /** Told the revision's listing shape when its walk is done (a worker lane's only: kept-early.ts). */
  onShape?: (shape: string) => void,
): Promise<TreeDigests> {
  let stats;
  try {
    // Synchronous: with a worker lane's tree (measure), an async lstat's answer waits for this
    // thread, hashing a tree of its own, to yield, and the worker idled 10-20 ms per tree in fsck.
    stats = lstatSync(dir);
  } catch (error) {
    if (errnoCode(error) === "ENOENT")
      throw new OatsError(
        "artifact-not-found",
        `${plan.kind} ${plan.key} has no retained revision ${plan.nameFormat}:${expected}`,
        { kind: plan.kind, key: plan.key, format: plan.nameFormat, expected, dir },
      );
    throw asStepError("verify", error, { dir });
  }
  if (!stats.isDirectory()) {
    throw new OatsError(
      "invalid-artifact",
      `retained revision is not a real directory (${stats.isSymbolicLink() ? "a symlink" : "a file"}): ${dir}`,
      { kind: plan.kind, key: plan.key, dir },
    );
  }
  const digests = await linksSettled(() =>
    measure
      ? measure({ dir, formats: plan.formats, ...walkOptions(plan), ...(onShape ? { onShape } : {}) })
      : walkTree(dir, walkOptions(plan)).then((listing) =>
          digestListing(listing, plan.formats, digestOptions(plan, "verify")),
        ),
  );
  const actual = digests[plan.nameFormat]!;
  if (actual !== expected) {
    const found = await treeDifferences(dir);
    const difference = found?.listed[0];
    if (!found || !difference) throw mismatch(plan, expected, actual, { dir, reason: "damaged-revision" });
    const more = found.total - 1;
    throw mismatch(
      plan,
      expected,
      actual,
      {
        dir,
        reason: "damaged-revision",
        firstDifference: difference,
        differences: found.listed,
        differenceCount: found.total,
      },
      ` (first difference: ${difference.path}, ${difference.change}` +
        `${more > 0 ? `; and ${more} more path${more === 1 ? "" : "s"}` : ""})`,
    );
  }
  return digests;
}

/** Reads of a stored tree tried again when another publisher's link changed a shared file's ctime under them. */
const LINK_RETRIES = 8;

/**
 * A read of a stored tree, tried again while it is refused only because a
 * file's ctime changed as it was read. A store file is a hard link to a
 * held file that other revisions share (shared-layer.ts), and a publisher
 * that links it, or a gc that unlinks a revision's name for it, changes its
 * ctime and link count, not its bytes; the read's verdict is the hash of
 * what it read, so another attempt is sound. Anything else, and a ctime
 * that keeps changing, is refused as before.
 */
export async function linksSettled<T>(read: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await read();
    } catch (error) {
      const details = error instanceof OatsError ? (error.details as Record<string, unknown>) : null;
      if (attempt >= LINK_RETRIES || details?.["reason"] !== "changed-while-reading" || details["changed"] !== "ctime")
        throw error;
    }
  }
}

const walkOptions = (plan: Pick<PublishPlan, "maxDepth">): WalkOptions =>
  plan.maxDepth === undefined ? {} : { maxDepth: plan.maxDepth };

/** Where a plan's revisions live, and the destination a digest names. */
function place(plan: PublishPlan) {
  const segments = revisionParentSegments(plan.key, plan.nameFormat);
  const root = storeRoot(plan.scope, plan.kind);
  const parent = assertContained(root, join(root, ...segments), `artifact ${plan.key}`);
  const destination = (value: string) =>
    assertContained(root, join(parent, `sha256-${value.slice("sha256-".length)}`), `artifact ${plan.key}`);
  return { segments, root, parent, destination };
}

/** The tree's digests in `plan.expectedAlso`'s formats are the ones expected; `source-differs` otherwise. */
export function checkExpectedAlso(
  plan: Pick<PublishPlan, "kind" | "key" | "expectedAlso" | "listing">,
  digests: TreeDigests,
): void {
  for (const [format, value] of Object.entries(plan.expectedAlso ?? {}) as [TreeFormat, string][]) {
    if (digests[format] === value) continue;
    throw new OatsError(
      "integrity-mismatch",
      `${plan.kind} ${plan.key}: expected ${format}:${value}, found ${format}:${digests[format] ?? "(not measured)"}`,
      {
        kind: plan.kind,
        key: plan.key,
        format,
        expected: value,
        actual: digests[format] ?? null,
        source: plan.listing.root.absolute,
        reason: "source-differs",
      },
    );
  }
}

export async function publishTree(plan: PublishPlan): Promise<PublishResult> {
  const empty = emptyDirectories(plan.listing);
  return withLeftOut(await publishCopy(plan, withoutDirectories(plan.listing, empty)), empty);
}

/** publishTree, writing the directories of `stored` (the listing without its empty directories). */
async function publishCopy(plan: PublishPlan, stored: TreeListing): Promise<PublishResult> {
  const { segments, root, parent, destination } = place(plan);
  const present = plan.expected
    ? await keptIfPresent(plan, destination)
    : await keptIfUnchanged(plan, parent, destination);
  if (present) return present;

  const { created, staging } = await createStaging(plan, parent, segments);
  const writer = new StagingWriter(staging, stored, { shared: true });
  // The pass measures the manifest itself when the staged tree may be checked by structure (staged-check.ts).
  const recorded = byStructure(plan) ? new ManifestRecorder() : null;
  const sharing = new SharingWriter(plan.scope, staging, writer, recorded);
  const taken = newTakeBack(plan.scope);
  try {
    writer.prepareDirectories();
    let copied: TreeDigests;
    let copiedBytes: number | undefined;
    const onProgress = plan.onProgress;
    try {
      copied = await digestListing(plan.listing, [plan.nameFormat], {
        ...digestOptions(plan, "read-copy"),
        // The bytes copied are the total the read-back will read.
        ...(onProgress
          ? {
              onProgress: (event) => {
                copiedBytes = event.bytes;
                onProgress(event);
              },
            }
          : {}),
        sink: sharing,
        sinkOrder: FRAMINGS[plan.nameFormat].order,
      });
      await sharing.finish();
    } finally {
      writer.abort();
    }
    const measured = copied[plan.nameFormat]!;
    if (plan.expected && measured !== plan.expected)
      throw mismatch(plan, plan.expected, measured, { source: plan.listing.root.absolute, reason: "source-differs" });
    plan.checkStaged?.(staging);
    announce(plan, "sync");
    await writer.flush();

    const { staged, manifest } =
      recorded && (await checkedByStructure(plan, staging, stored, sharing))
        ? { staged: copied, manifest: recorded }
        : await verifyStaged(plan, staging, copiedBytes === undefined ? undefined : copiedBytes * plan.formats.length);
    if (staged[plan.nameFormat] !== measured) {
      throw mismatch(plan, measured, staged[plan.nameFormat]!, {
        step: "verify-staged",
        reason: "staged-copy-differs",
      });
    }
    checkExpectedAlso(plan, staged);
    const files = await shareAndSeal(staging, stored, manifest, taken, sharing);
    return await commit(plan, parent, destination(measured), staging, staged, manifest, files);
  } catch (error) {
    await discardStaging(staging, error);
    takeBackShared(taken);
    removeCreatedStore(created, root);
    throw error;
  } finally {
    await sharing.close();
  }
}

/**
 * Whether a copy's read-back may check linked files by structure: the pass
 * measures everything the read-back would (one format, the name's, whose
 * order is the manifest's), and nothing else is expected of the tree.
 */
function byStructure(plan: PublishPlan): boolean {
  return (
    plan.formats.length === 1 &&
    plan.formats[0] === plan.nameFormat &&
    FRAMINGS[plan.nameFormat].order === "bytes" &&
    plan.expectedAlso === undefined
  );
}

/**
 * The read-back of a staged tree the pass linked files into, by structure
 * (staged-check.ts); false when it does not hold (or nothing was linked),
 * and the tree is then read back in full (verifyStaged).
 */
async function checkedByStructure(
  plan: PublishPlan,
  staging: string,
  stored: TreeListing,
  sharing: SharingWriter,
): Promise<boolean> {
  if (sharing.linked.size === 0) return false;
  announce(plan, "verify");
  try {
    faultPoint("verify-staged", staging);
    return await stagedByStructure(staging, stored, sharing.linked, sharing.written, walkOptions(plan));
  } catch (error) {
    throw asStepError("verify-staged", error, { staging });
  }
}

/**
 * Publish a tree the caller has already written, on the store's filesystem,
 * and no longer needs (an extracted archive): it is taken over instead of
 * copied. `plan.listing` is the walk of that tree (`listing.root.absolute`),
 * already checked like any source (symlinks, special files, names). The
 * guarantees are publishTree's:
 *
 * 1. an expected revision that is already present is reused only after the
 *    tree hashes to it (`source-differs` otherwise), and verified;
 * 2. the tree is renamed into a fresh staging directory beside the
 *    destination (step `adopt`); on another filesystem (EXDEV) it is left
 *    where it is and publishTree copies it instead;
 * 3. its empty directories are removed (outside identity, they are never
 *    stored: empty-directories.ts), its modes are masked as a copy's are
 *    (maskAdoptedModes), and the staged tree is made durable by the same rule as a copy (fsync of
 *    each file and directory up to PER_FILE_FSYNC_LIMIT files, else one
 *    syncfs);
 * 4. the durable staged tree is read back once, in every format and into
 *    the manifest (`verify-staged`), and what it hashes to must be the
 *    expected digest (`source-differs`); with `plan.verified` the caller's
 *    read stands instead, once the moved directory is the one it read
 *    (adopted-read.ts);
 * 5. checkStaged (provenance) runs on the staged tree;
 * 6. it is renamed into place under the revision lock; a concurrent winner
 *    is verified and reported kept.
 *
 * Any failure after the move removes the staging directory and the store
 * directories this call created. Whatever of the tree is left where it was
 * (before the move, or after the fallback) stays the caller's to remove.
 */
export async function publishAdopted(plan: PublishPlan): Promise<PublishResult> {
  const empty = emptyDirectories(plan.listing);
  const { segments, root, parent, destination } = place(plan);
  const present = await keptIfPresent(plan, destination);
  if (present) return withLeftOut(present, empty);

  const moved = await adoptIntoStaging(plan, root, parent, segments);
  if (moved === "cross-device") return publishTree({ ...plan, early: null });
  const { created, staging } = moved;
  const taken = newTakeBack(plan.scope);
  try {
    removeEmptyDirectories(staging, empty);
    const stored = withoutDirectories(plan.listing, empty);
    maskAdoptedModes(staging, stored);
    announce(plan, "sync");
    await makeDurable(staging, stored, { perFile: perFileDurability(stored), filesSynced: false });
    const { staged, manifest } = plan.verified
      ? await adoptedAsVerified(plan, plan.verified, staging)
      : await verifyStaged(plan, staging);
    const measured = staged[plan.nameFormat]!;
    if (plan.expected && measured !== plan.expected)
      throw mismatch(plan, plan.expected, measured, { source: plan.listing.root.absolute, reason: "source-differs" });
    checkExpectedAlso(plan, staged);
    plan.checkStaged?.(staging);
    const files = await shareAndSeal(staging, stored, manifest, taken);
    return withLeftOut(await commit(plan, parent, destination(measured), staging, staged, manifest, files), empty);
  } catch (error) {
    await discardStaging(staging, error);
    takeBackShared(taken);
    removeCreatedStore(created, root);
    throw error;
  }
}

/**
 * Create the store directories and rename the caller's tree to a staging
 * name in them (retrying, like createStaging, when a concurrent failed
 * publication took the parent back in between). "cross-device" when the
 * rename cannot cross filesystems; the directories this call created are
 * then taken back.
 */
async function adoptIntoStaging(
  plan: PublishPlan,
  root: string,
  parent: string,
  segments: string[],
): Promise<{ created: string[]; staging: string } | "cross-device"> {
  const created: string[] = [];
  const from = plan.listing.root.absolute;
  for (let attempt = 1; ; attempt++) {
    const staging = join(parent, stagingName());
    try {
      created.push(...ensureStore(plan.scope, plan.kind, segments));
      faultPoint("adopt", staging);
      await rename(from, staging);
      return { created, staging };
    } catch (error) {
      const code = errnoCode(error);
      if (code === "ENOENT" && attempt < 5 && (await exists(from))) continue;
      removeCreatedStore(created, root);
      if (code === "EXDEV") return "cross-device";
      throw asStepError("adopt", error, { from, staging });
    }
  }
}

/** Read the durable staged tree back in every format, feeding the manifest. */
async function verifyStaged(
  plan: PublishPlan,
  staging: string,
  totalBytes?: number,
): Promise<{ staged: TreeDigests; manifest: ManifestRecorder }> {
  const manifest = new ManifestRecorder();
  try {
    faultPoint("verify-staged", staging);
    let recorder = manifest;
    const staged = await linksSettled(async () => {
      recorder = new ManifestRecorder();
      return digestListing(await walkTree(staging, walkOptions(plan)), plan.formats, {
        ...digestOptions(plan, "verify", totalBytes),
        sink: recorder,
        sinkOrder: "bytes",
      });
    });
    return { staged, manifest: recorder };
  } catch (error) {
    throw asStepError("verify-staged", error, { staging });
  }
}

/** Rename the verified staging into place under the revision lock; a concurrent winner is verified and reported kept.
 * */
async function commit(
  plan: PublishPlan,
  parent: string,
  dir: string,
  staging: string,
  staged: TreeDigests,
  manifest: { bytes(): Buffer },
  files: FilesOutcome,
): Promise<PublishResult> {
  const measured = staged[plan.nameFormat]!;
  const manifestBytes = manifest.bytes();
  announce(plan, "publish");
  const outcome = await withRevisionLock(parent, `sha256-${measured.slice(7)}`, plan.lockWaitMs, async () => {
    if (await exists(dir)) return "lost-race" as const;
    try {
      faultPoint("rename", dir);
      await rename(staging, dir);
      writeManifest(dir, { bytes: () => manifestBytes });
      fsyncDirectory(parent);
    } catch (error) {
      throw asStepError("rename", error, { from: staging, to: dir });
    }
    return "renamed" as const;
  });
  if (outcome === "renamed") {
    // The manifest was measured in the read that verified these bytes (verify-staged, in full or by structure:
    // staged-check.ts, or the caller's read).
    if (plan.nameFormat === TREE_EXEC) anchorManifest(plan.scope, measured, manifestBytes);
    return { dir, digests: staged, status: "retained", files };
  }
  await discardStaging(staging);
  return (await kept(plan, dir, measured))!;
}

/**
 * Create the store directories and a staging directory in them. A concurrent
 * failed publication may take back an empty directory between the two steps
 * (removeCreatedStore); then the parent is simply made again.
 */
async function createStaging(
  plan: PublishPlan,
  parent: string,
  segments: string[],
): Promise<{ created: string[]; staging: string }> {
  const created: string[] = [];
  for (let attempt = 1; ; attempt++) {
    created.push(...ensureStore(plan.scope, plan.kind, segments));
    const staging = join(parent, stagingName());
    try {
      await mkdir(staging, { mode: 0o700 });
      return { created, staging };
    } catch (error) {
      if (errnoCode(error) !== "ENOENT" || attempt >= 5) throw asStepError("copy", error, { staging });
    }
  }
}

export async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return false;
    throw error;
  }
}

/** Remove staging; if that fails too, say so on the error that caused it. */
async function discardStaging(staging: string, cause?: unknown): Promise<void> {
  try {
    faultPoint("cleanup", staging);
    await removeTree(staging);
    noteRemoved(cause, "staging", staging);
  } catch (cleanupError) {
    const failure = asStepError("cleanup", cleanupError, { staging });
    if (cause instanceof OatsError) {
      (cause.details as Record<string, unknown>).cleanup = {
        staging,
        error: failure.message,
        remedy: "run `oats cleanup`",
      };
      return;
    }
    if (cause === undefined) throw failure;
  }
}
