import { createReadStream, lstatSync, openSync, readSync, closeSync, readdirSync } from "node:fs";
import { rename } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import { OatsError, asStepError, errnoCode } from "../core/index.js";
import { parseExportRef, extractTar, withExtractionDir } from "../acquisition/index.js";
import { audited, audit } from "../ledger/index.js";
import {
  digestTree,
  type TREE_EXEC,
  TREE_LEGACY,
  integrityText,
  capabilityRows,
  readLockFile,
  parseLock,
  type OatsLock,
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
  removeTree,
  writeManifest,
  removeCreatedStore,
} from "../retention/index.js";
import { otherExecBit, recordedExecBits } from "./repair-modes.js";
import type { ArtifactReceipt } from "../retention/index.js";

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
 *    and a legacy-named capability's provenance must match its lock rows;
 *    otherwise a refusal and the store is as it was;
 * 4. only then is the damaged tree renamed, under the revision lock, into
 *    `.agents/quarantine/<UTC time>-<kind>-<key>-<hex12>-<random>/`, never
 *    deleted, and the replacement published through the normal path
 *    (staged, verified, renamed into place). If that fails the damaged tree
 *    is moved back; 5. audited.
 */

export const QUARANTINE_DIR: readonly string[] = [AGENTS_DIR, "quarantine"];

export interface RepairOptions {
  /** A directory, an npm-style package tarball (gzip) or an oats bundle (tar). */
  readonly from: string;
  /** For a legacy-named capability: the oats lock (a path or a parsed lock) whose row names the revision. */
  readonly lock?: unknown;
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

function sourceType(from: string): SourceType {
  let stats;
  try {
    stats = lstatSync(from);
  } catch (error) {
    throw new OatsError("invalid-input", `repair source ${from} cannot be read: ${errnoCode(error) ?? String(error)}`, {
      from,
      errno: errnoCode(error),
    });
  }
  if (stats.isDirectory()) return "directory";
  if (!stats.isFile())
    throw new OatsError("invalid-input", `repair source ${from} is neither a directory nor a regular file`, { from });
  const magic = Buffer.alloc(2);
  const fd = openSync(from, "r");
  try {
    readSync(fd, magic, 0, 2, 0);
  } finally {
    closeSync(fd);
  }
  return magic[0] === 0x1f && magic[1] === 0x8b ? "tarball" : "bundle";
}

/** Whether the tree at `dir` hashes to the revision's digest. */
async function matches(dir: string, ref: ArtifactRef): Promise<string | null> {
  try {
    const actual = (await digestTree(dir, [ref.integrity.format as typeof TREE_EXEC]))[
      ref.integrity.format as typeof TREE_EXEC
    ]!;
    return actual;
  } catch (error) {
    if (error instanceof OatsError && error.kind !== "internal") return null;
    throw error;
  }
}

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

function otherModes(ref: ArtifactRef, from: string, other: { path: string; recorded: boolean; found: boolean }) {
  const bit = (exec: boolean) => (exec ? "executable" : "not executable");
  return new OatsError(
    "integrity-mismatch",
    `repair source ${from} verifies for ${ref.kind} ${ref.key} ${integrityText(ref.integrity)}, a name that does ` +
      `not cover modes, but is another tree: ${other.path} is ${bit(other.found)}, and the revision had it ` +
      `${bit(other.recorded)}; nothing was changed`,
    { kind: ref.kind, key: ref.key, from, path: other.path, reason: "repair-source-other-tree" },
  );
}

/** Run `body` on a directory holding the replacement tree (extracted into staging for archives). */
async function withSourceTree<T>(
  realScope: string,
  ref: ArtifactRef,
  from: string,
  type: SourceType,
  body: (dir: string) => Promise<T>,
): Promise<T> {
  if (type === "directory") {
    const actual = await matches(from, ref);
    if (actual !== ref.integrity.value) throw sourceDiffers(ref, from, actual);
    return body(from);
  }
  return withExtractionDir(realScope, async (staging) => {
    await extractTar(createReadStream(from), staging, { origin: from, prefix: type === "tarball" ? "package" : null });
    if (type === "tarball") {
      const actual = await matches(staging, ref);
      if (actual !== ref.integrity.value) throw sourceDiffers(ref, from, actual);
      return body(staging);
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
      if ((await matches(candidate, ref)) === ref.integrity.value) return body(candidate);
    }
    throw sourceDiffers(ref, from, null);
  });
}

function quarantineName(ref: ArtifactRef): string {
  const stamp = new Date()
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
  return `${stamp}-${ref.kind}-${ref.key}-${ref.integrity.value.slice(7, 19)}-${randomBytes(4).toString("hex")}`;
}

function legacyLock(ref: ArtifactRef, lockInput: unknown): OatsLock {
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

export async function repair(scope: string, refInput: unknown, options: RepairOptions): Promise<RepairResult> {
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
  const type = sourceType(from);
  const realScope = resolveScope(scope);
  const dir = retainedTreeDir(realScope, ref);
  const waitMs = options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS;

  return withPublishLease(realScope, () =>
    audited(realScope, "repair", { ref: text }, async () => {
      const damage = await damageOf(realScope, ref, dir, text);
      return withSourceTree(realScope, ref, from, type, async (sourceDir) => {
        if (lock) checkProvenance(sourceDir, expectedProvenance(ref.key, capabilityRows(lock, ref.key)));
        const root = join(realScope, ...QUARANTINE_DIR);
        const createdQuarantine = ensureStoreAt(realScope, QUARANTINE_DIR);
        const quarantine = assertContained(root, join(root, quarantineName(ref)), `quarantine of ${text}`);
        const recorded = legacy ? recordedExecBits(dir) : null;
        await withRevisionLock(dirname(dir), basename(dir), waitMs, async () => {
          try {
            await rename(dir, quarantine);
          } catch (error) {
            throw asStepError("quarantine", error, { dir, quarantine });
          }
          fsyncDirectory(dirname(dir));
          fsyncDirectory(root);
        });
        let receipt: ArtifactReceipt;
        try {
          receipt = legacy
            ? await retainCapabilityArtifact(realScope, sourceDir, ref.key, lock!, { lockWaitMs: waitMs })
            : await retainTree(
                realScope,
                { kind: ref.kind, key: ref.key, source: sourceDir, expect: ref.integrity },
                { lockWaitMs: waitMs },
              );
        } catch (error) {
          // Put the damaged tree back where it was, so a failed repair changes nothing.
          await rename(quarantine, dir).catch(() => undefined);
          removeCreatedStore(createdQuarantine, root);
          throw error;
        }
        const other = recorded ? otherExecBit(receipt.dir, recorded) : null;
        if (other) {
          await removeTree(receipt.dir);
          await rename(quarantine, dir).catch(() => undefined);
          writeManifest(dir, { bytes: () => recorded!.bytes });
          removeCreatedStore(createdQuarantine, root);
          throw otherModes(ref, from, other);
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
