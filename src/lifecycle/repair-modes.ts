import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { OatsError } from "../core/index.js";
import { listResolutionIds, recordReader } from "../resolution/index.js";
import {
  DEFAULT_MAX_DEPTH,
  TREE_EXEC,
  hashFilesInLanes,
  readManifestRows,
  rowsDifference,
  type ArtifactRef,
  type ManifestRow,
  type TreeDigests,
} from "../retention/index.js";

/**
 * The exec bits of a legacy-named capability (docs/design/lifecycle.md,
 * "Repair"). Its name, an oats.tree-legacy.v0 digest, covers paths, bytes and
 * link targets but not exec bits, so a replacement that hashes to the name
 * may still flip them (the entry to 644, `package.json` to 755). Repair then
 * holds the replacement to everything the store knows about the revision:
 *
 * - the exec digest (oats.tree-exec.v1) of every record that names this
 *   legacy revision beside its exec-named copy (`legacyIntegrity`);
 * - the revision's manifest, measured from its staged copy when it was
 *   retained: every path, type, size, SHA-256, exec bit and link target;
 * - the damaged tree itself (quarantined by the repair): each of its files
 *   whose bytes are still the replacement's was not damaged, so its exec bit
 *   is the one the replacement must have (a damaged file's mode may be part
 *   of the damage, and says nothing).
 *
 * Each must agree (`integrity-mismatch`, reason `repair-modes-differ`). When
 * there is no recorded exec digest and no manifest, every file's exec bit
 * must be attested by an undamaged file of the damaged tree; a file it does
 * not attest leaves the legacy format undecided, and repair refuses
 * (`invalid-input`, reason `repair-modes-undecided`) rather than guess.
 */

export interface ModeEvidence {
  /** Records naming the revision, with the exec digest each gives its exec-named copy. */
  readonly records: readonly { readonly id: string; readonly exec: string }[];
  /** The revision's manifest rows, or null when it has none that reads. */
  readonly manifest: readonly ManifestRow[] | null;
  /** The damaged tree's regular files: exec bit and SHA-256 of the bytes (null when they cannot be read). */
  readonly damaged: ReadonlyMap<string, { readonly exec: boolean; readonly sha256: string | null }>;
}

/** What the store knows about the exec bits of the legacy revision `ref` at `dir` (read before it is moved). */
export async function modeEvidence(realScope: string, ref: ArtifactRef, dir: string): Promise<ModeEvidence> {
  const records: { id: string; exec: string }[] = [];
  const read = recordReader(realScope);
  for (const id of listResolutionIds(realScope)) {
    let record;
    try {
      record = read(id).record;
    } catch {
      continue; // a damaged record is fsck's to report; it vouches for nothing here
    }
    for (const entry of Object.values(record.artifacts)) {
      if (
        entry.artifact.kind === ref.kind &&
        entry.artifact.key === ref.key &&
        entry.artifact.integrity.format === TREE_EXEC &&
        entry.legacyIntegrity?.value === ref.integrity.value
      )
        records.push({ id, exec: entry.artifact.integrity.value });
    }
  }
  return { records, manifest: readManifestRows(dir), damaged: await damagedLeaves(dir) };
}

/**
 * The regular files of the damaged tree (the store's own, written by oats), as far as they can be listed, each
 * hashed as the shared file layer hashes its held files (hashFilesInLanes: through one descriptor, never a symlink,
 * never blocking on a FIFO; null when it cannot be read).
 */
async function damagedLeaves(dir: string): Promise<Map<string, { exec: boolean; sha256: string | null }>> {
  const leaves: { path: string; absolute: string; exec: boolean }[] = [];
  const walk = (absolute: string, path: string, depth: number): void => {
    if (depth > DEFAULT_MAX_DEPTH) return;
    let names: string[];
    try {
      names = readdirSync(absolute);
    } catch {
      return;
    }
    for (const name of names) {
      const childPath = path ? `${path}/${name}` : name;
      let stats;
      try {
        stats = lstatSync(join(absolute, name));
      } catch {
        continue;
      }
      if (stats.isDirectory()) walk(join(absolute, name), childPath, depth + 1);
      else if (stats.isFile())
        leaves.push({ path: childPath, absolute: join(absolute, name), exec: (stats.mode & 0o100) !== 0 });
    }
  };
  walk(dir, "", 1);
  const hashes = await hashFilesInLanes(leaves.map((leaf) => leaf.absolute));
  return new Map(leaves.map((leaf, i) => [leaf.path, { exec: leaf.exec, sha256: hashes[i]?.sha256 ?? null }]));
}

function differ(
  ref: ArtifactRef,
  text: string,
  from: string,
  evidence: string,
  detail: string,
  details: Record<string, unknown>,
): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `repair source ${from} hashes to ${text} but differs from what the store knows of it: ${detail} ` +
      `(${evidence}); the legacy digest does not cover exec bits, so nothing was changed`,
    { kind: ref.kind, key: ref.key, from, evidence, ...details, reason: "repair-modes-differ" },
  );
}

/**
 * Refuse a replacement (its digests and rows, measured in one read) that
 * disagrees with anything in `evidence`, or whose exec bits nothing decides.
 * Returns the exec digest the published copy must have.
 */
export function checkReplacementModes(
  ref: ArtifactRef,
  text: string,
  from: string,
  measured: { readonly digests: TreeDigests; readonly rows: readonly ManifestRow[] },
  evidence: ModeEvidence,
): string {
  const exec = measured.digests[TREE_EXEC]!;
  for (const record of evidence.records) {
    if (record.exec !== exec)
      throw differ(
        ref,
        text,
        from,
        `record ${record.id}`,
        `its exec digest is ${exec}, the record names ${record.exec}`,
        {
          expected: record.exec,
          actual: exec,
          resolution: record.id,
        },
      );
  }
  if (evidence.manifest !== null) {
    const difference = rowsDifference(evidence.manifest, measured.rows);
    if (difference !== null)
      throw differ(ref, text, from, "the revision's manifest", `${difference.path}: ${difference.change}`, {
        path: difference.path,
        firstDifference: difference,
      });
  }
  const undecided: string[] = [];
  for (const row of measured.rows) {
    if (row.type !== "file") continue;
    const stored = evidence.damaged.get(row.path);
    // Only an undamaged file's mode is evidence: a damaged one may have been chmod'ed with its bytes.
    if (stored !== undefined && stored.sha256 === row.sha256) {
      if (stored.exec !== row.exec)
        throw differ(
          ref,
          text,
          from,
          "the damaged tree",
          `${row.path} is ${row.exec ? "" : "not "}owner-executable in the source ` +
            `and ${stored.exec ? "is" : "is not"} in the undamaged stored copy`,
          { path: row.path, firstDifference: { path: row.path, change: "exec-bit" } },
        );
    } else undecided.push(row.path);
  }
  if (evidence.records.length === 0 && evidence.manifest === null && undecided.length > 0)
    throw new OatsError(
      "invalid-input",
      `repair source ${from} hashes to ${text}, but the store has no exec digest, no manifest and no undamaged ` +
        `file for ${undecided[0]}${undecided.length > 1 ? ` and ${undecided.length - 1} more` : ""}: ` +
        "the legacy digest does not cover exec bits, so nothing can tell whether they are right; nothing was changed",
      { kind: ref.kind, key: ref.key, from, undecided: undecided.slice(0, 20), reason: "repair-modes-undecided" },
    );
  return exec;
}
