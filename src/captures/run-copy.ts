import { chmodSync, lstatSync, mkdirSync, realpathSync } from "node:fs";
import { basename, dirname, isAbsolute, join, resolve } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import {
  FRAMINGS,
  digestListing,
  type TreeDigests,
  walkTree,
  TREE_EXEC,
  TREE_LEGACY,
  integrityText,
  ensureStoreAt,
  inspectStore,
  RUN_COPIES_STORE,
  parseArtifactRef,
  type ArtifactRefInput,
  parseStagingName,
  retainedTreeDir,
  stagingName,
  firstDifference,
  revisionParentSegments,
  StagingWriter,
  removeTree,
  emptyDirectories,
  withoutDirectories,
  linksSettled,
  type ArtifactRef,
} from "../retention/index.js";

/**
 * The private run copy of a dispatch (docs/design/captures.md, "Running only
 * what was verified"). The executable tree is hashed while it is copied, in
 * one read of the retained revision, into a directory only the dispatching
 * account can reach:
 *
 *   <scope>/.agents/run-copies/.staging-<host>-<pid>-<random>/   0700, euid's
 *     tree/                                                      the copy
 *
 * The digest of the bytes read is the digest of the bytes written, so when it
 * equals the approved digest the copy is the approved tree, whatever happens
 * to the store afterwards; the child then runs from the copy. Every ancestor
 * of the run directory, up to `/`, must be a real directory owned by root or
 * by the dispatching account and writable by no one else (a root-owned
 * sticky directory such as /tmp excepted: there only an entry's owner can
 * rename or remove it, and the next component's own check covers that
 * owner). Otherwise another local user could move a directory of the path
 * aside between the check and the exec; the dispatch is refused with
 * `invalid-artifact-store`, reason `run-root-unsafe`.
 *
 * The copy is not fsync'd: it is private and transient, and a crash leaves a
 * staging-named directory that `oats cleanup` removes once its dispatcher is
 * gone. Files and directories in it lose group and other write permission.
 */

export interface RunCopy {
  /** The private run directory (0700, the dispatcher's); removing it removes the copy. */
  readonly dir: string;
  /** The verified copy of the executable tree inside it (real path). */
  readonly root: string;
  /** What the copied bytes hash to, in the format that names the revision. */
  readonly digests: TreeDigests;
}

const OTHERS_WRITE = 0o022;
const STICKY = 0o1000;

function unsafe(path: string, why: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-artifact-store", `the run directory cannot be private: ${path} ${why}`, {
    path,
    reason: "run-root-unsafe",
    ...details,
  });
}

/**
 * Check `path` and every ancestor up to `/`. With `allowMissing`, components
 * that do not exist yet (at the bottom of the path) are skipped, so a scope
 * can be refused before anything is created in it.
 */
export function checkRunRootAncestors(path: string, options: { allowMissing?: boolean } = {}): void {
  const euid = process.geteuid?.() ?? -1;
  let current = path;
  for (;;) {
    let stats;
    try {
      stats = lstatSync(current);
    } catch (error) {
      if (!(options.allowMissing && errnoCode(error) === "ENOENT"))
        throw unsafe(current, `cannot be inspected (${errnoCode(error) ?? String(error)})`);
      stats = null;
    }
    if (stats !== null) {
      if (!stats.isDirectory()) throw unsafe(current, stats.isSymbolicLink() ? "is a symlink" : "is not a directory");
      const mode = stats.mode & 0o7777;
      const details = { uid: stats.uid, mode: mode.toString(8), euid };
      if (stats.uid !== 0 && stats.uid !== euid)
        throw unsafe(current, `is owned by uid ${stats.uid}, neither root nor this account (uid ${euid})`, details);
      if ((mode & OTHERS_WRITE) !== 0 && !(stats.uid === 0 && (mode & STICKY) !== 0)) {
        throw unsafe(current, `is writable by group or others (mode ${mode.toString(8)})`, details);
      }
    }
    if (current === "/") return;
    current = dirname(current);
  }
}

/** Create the private run directory: exclusive, 0700, this account's. */
function createRunDirectory(realScope: string): string {
  const area = join(realScope, ...RUN_COPIES_STORE);
  checkRunRootAncestors(area, { allowMissing: true });
  ensureStoreAt(realScope, RUN_COPIES_STORE);
  checkRunRootAncestors(area);
  const dir = join(area, stagingName());
  mkdirSync(dir, { mode: 0o700 });
  chmodSync(dir, 0o700);
  return dir;
}

/**
 * Copy the retained tree `ref` names into a new run directory while hashing
 * it; refuse (and remove the copy) unless it hashes to `ref.integrity`.
 */
export async function copyVerifiedTree(realScope: string, input: ArtifactRefInput): Promise<RunCopy> {
  const ref = parseArtifactRef(input);
  const format = ref.integrity.format === TREE_LEGACY ? TREE_LEGACY : TREE_EXEC;
  const source = retainedTreeDir(realScope, ref);
  if (!inspectStore(realScope, ref.kind, revisionParentSegments(ref.key, format)).complete) {
    throw new OatsError(
      "artifact-not-found",
      `${ref.kind} ${ref.key} has no retained revision ${integrityText(ref.integrity)}`,
      { kind: ref.kind, key: ref.key, expected: ref.integrity.value, dir: source },
    );
  }
  let stats;
  try {
    stats = lstatSync(source);
  } catch (error) {
    throw new OatsError(
      "artifact-not-found",
      `${ref.kind} ${ref.key} has no retained revision ${integrityText(ref.integrity)}`,
      { kind: ref.kind, key: ref.key, expected: ref.integrity.value, dir: source, errno: errnoCode(error) },
    );
  }
  if (!stats.isDirectory()) {
    throw new OatsError(
      "invalid-artifact",
      `retained revision is not a real directory (${stats.isSymbolicLink() ? "a symlink" : "a file"}): ${source}`,
      { kind: ref.kind, key: ref.key, dir: source },
    );
  }

  // Another publisher linking a file this revision shares changes its ctime, not its bytes: copy again.
  return linksSettled(() => copyOnce(realScope, ref, format, source));
}

async function copyOnce(
  realScope: string,
  ref: ArtifactRef,
  format: typeof TREE_LEGACY | typeof TREE_EXEC,
  source: string,
): Promise<RunCopy> {
  const dir = createRunDirectory(realScope);
  let writer: StagingWriter | null = null;
  try {
    const tree = join(dir, "tree");
    mkdirSync(tree, { mode: 0o700 });
    const listing = await walkTree(source);
    // The copy holds what the digest covers and nothing else, even from a revision stored with empty directories.
    writer = new StagingWriter(tree, withoutDirectories(listing, emptyDirectories(listing)), {
      durability: "none",
      clearModeBits: OTHERS_WRITE,
      // The store's files and directories are read-only (the shared file layer); the run copy stays a private,
      // writable copy as before: owner write back, group and other never.
      addModeBits: 0o200,
      concurrentSmallFiles: true,
    });
    writer.prepareDirectories();
    let digests: TreeDigests;
    try {
      digests = await digestListing(listing, [format], { sink: writer, sinkOrder: FRAMINGS[format].order });
    } finally {
      writer.abort();
    }
    const actual = digests[format]!;
    if (actual !== ref.integrity.value) {
      const difference = await firstDifference(source).catch(() => null);
      throw new OatsError(
        "integrity-mismatch",
        `${ref.kind} ${ref.key}: expected ${format}:${ref.integrity.value}, ` +
          `found ` +
          `${format}:${actual}${difference ? ` (first difference: ${difference.path}, ${difference.change})` : ""}`,
        {
          kind: ref.kind,
          key: ref.key,
          format,
          expected: ref.integrity.value,
          actual,
          dir: source,
          reason: "damaged-revision",
          ...(difference ? { firstDifference: difference } : {}),
        },
      );
    }
    await writer.flush();
    return { dir, root: realpathSync(tree), digests };
  } catch (error) {
    await writer?.settle();
    await removeTree(dir);
    throw error;
  }
}

/**
 * Remove a run copy (and its run directory). Only a directory that has the
 * shape of one is removed (`<...>/.agents/run-copies/.staging-<host>-<pid>-<random>`):
 * a plan is a plain object, and a forged or corrupted one must not turn this
 * into a recursive delete of anything else.
 */
export async function removeRunCopy(copy: Pick<RunCopy, "dir">): Promise<void> {
  const dir: unknown = copy.dir;
  if (
    typeof dir !== "string" ||
    !isAbsolute(dir) ||
    resolve(dir) !== dir ||
    parseStagingName(basename(dir)) === null ||
    !dirname(dir).endsWith(`/${RUN_COPIES_STORE.join("/")}`)
  ) {
    throw new OatsError("invalid-input", `not a run copy directory, refusing to remove it: ${String(dir)}`, {
      dir: String(dir),
      reason: "not-a-run-copy",
    });
  }
  await removeTree(dir);
}
