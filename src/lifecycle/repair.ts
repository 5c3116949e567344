import { lstatSync, readSync, closeSync, readdirSync } from "node:fs";
import { chmod, lstat, rename } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { OatsError, asStepError, errnoCode } from "../core/index.js";
import { parseExportRef, extractTar, withExtractionDir } from "../acquisition/index.js";
import { audited, audit } from "../ledger/index.js";
import {
  HeldFile,
  digestTree,
  digestTreeWithRows,
  openNamedPath,
  TREE_EXEC,
  TREE_LEGACY,
  integrityText,
  capabilityRows,
  readLockFile,
  parseLock,
  type OatsLock,
  type OatsLockInput,
  checkProvenance,
  expectedProvenance,
  retainCapabilityArtifact,
  retainTree,
  ensureStoreAt,
  fsyncDirectory,
  resolveScope,
  AGENTS_DIR,
  assertContained,
  retainedTreeDir,
  type ArtifactRef,
  withPublishLease,
  DEFAULT_LOCK_WAIT_MS,
  withRevisionLock,
  verifyTree,
} from "../retention/index.js";
import type { ArtifactReceipt, ManifestRow, TreeDigests } from "../retention/index.js";
import { checkReplacementModes, modeEvidence, type ModeEvidence } from "./repair-modes.js";

/**
 * repair: replace a damaged revision with bytes that verify against the
 * revision's own digest (docs/design/lifecycle.md). The order:
 *
 * 1. validate: the reference, the `--from` source and (for a legacy-named
 *    capability) the lock whose row names this very revision;
 * 2. under a publish lease, the revision must exist and fail verification
 *    (an intact one is refused, `not-damaged`: there is nothing to repair);
 * 3. the replacement (a directory, or the tree extracted from a package
 *    tarball or a bundle into staging) must hash to the revision's digest,
 *    and a legacy-named capability's provenance must match its lock rows
 *    and its exec bits everything the store knows of them (repair-modes.ts);
 *    otherwise a refusal and the store is as it was;
 * 4. only then is the damaged tree renamed, under the revision lock, into
 *    `.agents/quarantine/<UTC time>-<kind>-<key>-<hex12>-<random>/`, never
 *    deleted, and the replacement published through the normal path
 *    (staged, verified, renamed into place; a legacy one must also have the
 *    exec digest checked in step 3). If that fails the damaged tree is moved
 *    back; 5. audited.
 *
 * A `--from` file (tarball or bundle) is opened once, never through a
 * symlink and never blocking on a FIFO (openNamedPath), its type checked on
 * the descriptor, and both the sniff of its first bytes and the extraction
 * read through that descriptor: whoever owns the directory it sits in can
 * swap the name, but not what repair already holds.
 */

export const QUARANTINE_DIR: readonly string[] = [AGENTS_DIR, "quarantine"];

export interface RepairOptions {
  /** A directory, an npm-style package tarball (gzip) or an oats bundle (tar). */
  readonly from: string;
  /** For a legacy-named capability: the oats lock (a path or a parsed lock) whose row names the revision. */
  readonly lock?: string | OatsLockInput;
  readonly lockWaitMs?: number;
}

export interface RepairResult {
  readonly ref: string;
  readonly kind: string;
  readonly key: string;
  readonly integrity: { format: string; value: string };
  readonly dir: string;
  readonly quarantine: string;
  readonly from: { path: string; type: "directory" | "tarball" | "bundle" };
  readonly damage: { code: string; message: string };
  readonly status: "repaired";
  readonly audit: { seq: number; hash: string };
}

type SourceType = RepairResult["from"]["type"];

/** The `--from` source as opened once: a directory (walked by the digest, opened inside its parent), or a file held
 * open. */
interface Source {
  readonly type: SourceType;
  /** The open file (tarball or bundle); null for a directory. */
  readonly file: HeldFile | null;
}

function openSource(from: string): Source {
  let opened;
  try {
    opened = openNamedPath(from);
  } catch (error) {
    const errno = errnoCode(error);
    throw new OatsError(
      "invalid-input",
      errno === "ELOOP"
        ? `repair source ${from} is a symlink; repair never follows a symlink at the name it is given`
        : errno === "ENXIO"
          ? `repair source ${from} is neither a directory nor a regular file`
          : `repair source ${from} cannot be read: ${errno ?? String(error)}`,
      {
        from,
        errno,
        ...(errno === "ELOOP" ? { reason: "symlink" } : errno === "ENXIO" ? { reason: "not-a-file" } : {}),
      },
    );
  }
  const { fd, stats } = opened;
  if (stats.isDirectory()) {
    closeSync(fd);
    return { type: "directory", file: null };
  }
  try {
    if (!stats.isFile())
      throw new OatsError("invalid-input", `repair source ${from} is neither a directory nor a regular file`, {
        from,
        reason: "not-a-file",
      });
    const magic = Buffer.alloc(2);
    readSync(fd, magic, 0, 2, 0);
    return { type: magic[0] === 0x1f && magic[1] === 0x8b ? "tarball" : "bundle", file: new HeldFile(fd, from) };
  } catch (error) {
    closeSync(fd);
    throw error;
  }
}

interface Measured {
  readonly digests: TreeDigests;
  /** Manifest rows of the tree, measured in the same read (legacy revisions only; empty otherwise). */
  readonly rows: readonly ManifestRow[];
}

/** The tree at `dir` in the revision's format (a legacy one also in tree-exec, with its rows); null if it cannot be
 * read as a tree. */
async function measure(dir: string, ref: ArtifactRef): Promise<Measured | null> {
  try {
    if (ref.integrity.format === TREE_LEGACY) return await digestTreeWithRows(dir, [TREE_LEGACY, TREE_EXEC]);
    return { digests: await digestTree(dir, [ref.integrity.format as typeof TREE_EXEC]), rows: [] };
  } catch (error) {
    if (error instanceof OatsError && error.kind !== "internal") return null;
    throw error;
  }
}

const nameDigest = (measured: Measured | null, ref: ArtifactRef): string | null =>
  measured?.digests[ref.integrity.format as typeof TREE_EXEC] ?? null;

function sourceDiffers(ref: ArtifactRef, from: string, actual: string | null): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `repair source ${from} does not verify against ${ref.kind} ${ref.key} ` +
      `${integrityText(ref.integrity)}${actual ? `: it hashes to ${actual}` : ""}; ` +
      `nothing was changed`,
    {
      kind: ref.kind,
      key: ref.key,
      expected: ref.integrity.value,
      actual,
      from,
      reason: "repair-source-differs",
    },
  );
}

/**
 * Run `body` on a directory holding the replacement tree (extracted into
 * staging for archives) that hashes to the revision's digest, with what it
 * measured.
 */
async function withSourceTree<T>(
  realScope: string,
  ref: ArtifactRef,
  from: string,
  source: Source,
  body: (dir: string, measured: Measured) => Promise<T>,
): Promise<T> {
  if (source.type === "directory") {
    const measured = await measure(from, ref);
    const actual = nameDigest(measured, ref);
    if (actual !== ref.integrity.value) throw sourceDiffers(ref, from, actual);
    return body(from, measured!);
  }
  return withExtractionDir(realScope, async (staging) => {
    await extractTar(source.file!.stream(), staging, {
      origin: from,
      prefix: source.type === "tarball" ? "package" : null,
    });
    if (source.type === "tarball") {
      const measured = await measure(staging, ref);
      const actual = nameDigest(measured, ref);
      if (actual !== ref.integrity.value) throw sourceDiffers(ref, from, actual);
      return body(staging, measured!);
    }
    // A bundle holds trees under their exec digest (a legacy revision is exported translated): try each tree of
    // this key.
    const keyDir = join(staging, "artifacts", ref.kind, ref.key);
    let names: string[] = [];
    try {
      names = readdirSync(keyDir).sort();
    } catch {
      names = [];
    }
    for (const name of names) {
      const candidate = join(keyDir, name);
      if (!lstatSync(candidate).isDirectory()) continue;
      const measured = await measure(candidate, ref);
      if (nameDigest(measured, ref) === ref.integrity.value) return body(candidate, measured!);
    }
    throw sourceDiffers(ref, from, null);
  });
}

/**
 * Rename a revision directory to another parent. A published revision is
 * read-only (0555), and moving a directory to another parent rewrites its
 * `..` entry, which takes write permission on it: it is given owner write
 * for the move, and its own mode back after.
 */
async function moveDirectory(from: string, to: string): Promise<void> {
  const mode = (await lstat(from)).mode & 0o7777;
  if ((mode & 0o200) === 0) await chmod(from, mode | 0o200);
  try {
    await rename(from, to);
  } catch (error) {
    await chmod(from, mode).catch(() => undefined);
    throw error;
  }
  await chmod(to, mode);
}

function quarantineName(ref: ArtifactRef): string {
  const stamp = new Date()
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
  return `${stamp}-${ref.kind}-${ref.key}-${ref.integrity.value.slice(7, 19)}-${randomBytes(4).toString("hex")}`;
}

function legacyLock(ref: ArtifactRef, lockInput: string | OatsLockInput | undefined): OatsLock {
  if (lockInput === undefined) {
    throw new OatsError(
      "usage",
      `${ref.kind} ${ref.key} ${integrityText(ref.integrity)} is named by a ` +
        `lock row: give the lock (--lock FILE) so its provenance is checked too`,
      { reason: "lock-required" },
    );
  }
  const lock = typeof lockInput === "string" ? readLockFile(lockInput) : parseLock(lockInput);
  const rows = capabilityRows(lock, ref.key);
  if (rows.capability.integrity !== ref.integrity.value) {
    throw new OatsError(
      "invalid-lock",
      `the lock names ${ref.key} at ${rows.capability.integrity}, not ${ref.integrity.value}`,
      { capability: ref.key, lock: rows.capability.integrity, requested: ref.integrity.value },
    );
  }
  return lock;
}

/**
 * Replace a damaged revision with bytes from `options.from` that hash to its own digest, in the order
 * src/lifecycle/repair.ts gives: the damaged tree is quarantined, never deleted, and the repair audited. Refuses a
 * malformed reference (`invalid-artifact-reference`), a revision not retained (`artifact-not-found`), an intact one
 * (`invalid-input`, reason `not-damaged`), a replacement with other content (`integrity-mismatch`) and, for a
 * legacy-named capability, a missing or mismatched lock (`usage`, `invalid-input`).
 * @param refInput the revision, `<kind>:<key>@<integrity>`
 */
export async function repair(scope: string, refInput: string, options: RepairOptions): Promise<RepairResult> {
  if (typeof refInput !== "string")
    throw new OatsError("invalid-artifact-reference", "repair names <kind>:<key>@<integrity>", { ref: refInput });
  const parsed = parseExportRef(refInput);
  if (parsed.type !== "artifact")
    throw new OatsError(
      "invalid-artifact-reference",
      "repair names a retained revision <kind>:<key>@<integrity>, not a resolution",
      { ref: refInput },
    );
  const ref = parsed.ref;
  const text = `${ref.kind}:${ref.key}@${integrityText(ref.integrity)}`;
  const legacy = ref.integrity.format === TREE_LEGACY;
  const lock = legacy ? legacyLock(ref, options.lock) : null;
  if (typeof options.from !== "string" || options.from === "")
    throw new OatsError("usage", "repair needs --from <dir|tarball|bundle>", {});
  const from = resolve(options.from);
  const realScope = resolveScope(scope);
  const dir = retainedTreeDir(realScope, ref);
  const waitMs = options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS;
  const source = openSource(from);
  try {
    return await repairFrom(realScope, ref, text, dir, from, source, lock, waitMs);
  } finally {
    await source.file?.close();
  }
}

async function repairFrom(
  realScope: string,
  ref: ArtifactRef,
  text: string,
  dir: string,
  from: string,
  source: Source,
  lock: OatsLock | null,
  waitMs: number,
): Promise<RepairResult> {
  const legacy = lock !== null;
  const type = source.type;
  return withPublishLease(realScope, () =>
    audited(realScope, "repair", { ref: text }, async () => {
      const damage = await damageOf(realScope, ref, dir, text);
      // What the store knows of a legacy revision's exec bits, read while the damaged tree is still in place.
      const evidence: ModeEvidence | null = legacy ? await modeEvidence(realScope, ref, dir) : null;
      return withSourceTree(realScope, ref, from, source, async (sourceDir, measured) => {
        if (lock) checkProvenance(sourceDir, expectedProvenance(ref.key, capabilityRows(lock, ref.key)));
        const expectExec = evidence === null ? null : checkReplacementModes(ref, text, from, measured, evidence);
        const root = join(realScope, ...QUARANTINE_DIR);
        ensureStoreAt(realScope, QUARANTINE_DIR);
        const quarantine = assertContained(root, join(root, quarantineName(ref)), `quarantine of ${text}`);
        await withRevisionLock(dirname(dir), basename(dir), waitMs, async () => {
          try {
            await moveDirectory(dir, quarantine);
          } catch (error) {
            throw asStepError("quarantine", error, { dir, quarantine });
          }
          fsyncDirectory(dirname(dir));
          fsyncDirectory(root);
        });
        let receipt: ArtifactReceipt;
        try {
          receipt = legacy
            ? await retainCapabilityArtifact(realScope, sourceDir, ref.key, lock!, {
                lockWaitMs: waitMs,
                expectExec: expectExec!,
              })
            : await retainTree(
                realScope,
                { kind: ref.kind, key: ref.key, source: sourceDir, expect: ref.integrity },
                { lockWaitMs: waitMs },
              );
        } catch (error) {
          // Put the damaged tree back where it was, so a failed repair changes nothing.
          await moveDirectory(quarantine, dir).catch(() => undefined);
          throw error;
        }
        const entry = await audit(realScope, {
          action: "repair",
          subject: { ref: text },
          outcome: "ok",
          details: { from, type, quarantine, damage: damage.code },
        });
        return {
          ref: text,
          kind: ref.kind,
          key: ref.key,
          integrity: { ...ref.integrity },
          dir: receipt.dir,
          quarantine,
          from: { path: from, type },
          damage,
          status: "repaired" as const,
          audit: { seq: entry.seq, hash: entry.hash },
        };
      });
    }),
  );
}

/** The revision's damage; `artifact-not-found` when it is not there, `not-damaged` when it verifies. */
async function damageOf(
  realScope: string,
  ref: ArtifactRef,
  dir: string,
  text: string,
): Promise<{ code: string; message: string }> {
  try {
    lstatSync(dir);
  } catch (error) {
    if (errnoCode(error) === "ENOENT")
      throw new OatsError(
        "artifact-not-found",
        `${text} is not retained in this scope; repair replaces a damaged revision, use retain for a missing one`,
        { dir },
      );
    throw asStepError("repair", error, { dir });
  }
  try {
    await verifyTree(realScope, ref);
  } catch (error) {
    // Damage is what verification finds in the tree itself; a damaged store path is fsck's to report, not something
    // to move.
    if (error instanceof OatsError && (error.code === "integrity-mismatch" || error.code === "invalid-artifact"))
      return { code: error.code, message: error.message };
    throw error;
  }
  throw new OatsError("invalid-input", `${text} verifies; there is nothing to repair`, { dir, reason: "not-damaged" });
}
