import { OatsError } from "../core/index.js";
import { TREE_LEGACY, integrityText, modeDifference, type FsckOutcome } from "../retention/index.js";
import { findingOf, type Finding } from "./findings.js";
import type { RecordsPresent } from "./fsck-stores.js";

/**
 * The exec bits of legacy-named revisions (oats.tree-legacy.v0), which their
 * digest does not cover: a revision that verifies is also held to
 *
 * - its manifest, measured when it was retained: a path, type, exec bit or
 *   link target that differs is `integrity-mismatch`, reason
 *   `modes-differ-from-manifest` (contents are the digest's);
 * - every record that names it beside its exec-named copy
 *   (`legacyIntegrity`): its tree-exec digest, measured by the same
 *   verification, must be the one the record names (`integrity-mismatch`,
 *   reason `exec-digest-differs`).
 *
 * Either means the tree's modes are not the ones that were retained, and a
 * `prepare` from the genuine install would be refused against it.
 */
export async function checkLegacyModes(
  outcomes: readonly FsckOutcome[],
  records: RecordsPresent,
  findings: Finding[],
): Promise<void> {
  const legacy = outcomes.filter((outcome) => outcome.ok && outcome.integrity.format === TREE_LEGACY);
  if (legacy.length === 0) return;
  // The exec digests records give each legacy revision, by `<key>\0<legacy value>`.
  const named = new Map<string, { id: string; exec: string }[]>();
  for (const [id, record] of records) {
    if (record === null) continue;
    for (const entry of record.legacy) {
      const at = `${entry.key}\0${entry.legacy}`;
      const list = named.get(at) ?? [];
      list.push({ id, exec: entry.exec });
      named.set(at, list);
    }
  }
  for (const outcome of legacy) {
    const subject = `${outcome.kind} ${outcome.key} ${integrityText(outcome.integrity)}`;
    const difference = await modeDifference(outcome.dir);
    if (difference !== null) {
      const error = new OatsError(
        "integrity-mismatch",
        `${subject} verifies, but ${difference.path} differs from its manifest (${difference.change}): ` +
          "the legacy digest does not cover exec bits",
        { dir: outcome.dir, firstDifference: difference, reason: "modes-differ-from-manifest" },
      );
      findings.push(findingOf(error, "revisions", subject, outcome.dir));
      continue;
    }
    const exec = outcome.execIntegrity?.value;
    for (const record of named.get(`${outcome.key}\0${outcome.integrity.value}`) ?? []) {
      if (exec === undefined || record.exec === exec) continue;
      const error = new OatsError(
        "integrity-mismatch",
        `${subject} verifies, but its exec digest is ${exec} where record ${record.id} names ${record.exec}: ` +
          "its exec bits are not the ones that were retained",
        { dir: outcome.dir, expected: record.exec, actual: exec, resolution: record.id, reason: "exec-digest-differs" },
      );
      findings.push(findingOf(error, "revisions", subject, outcome.dir));
      break;
    }
  }
}
