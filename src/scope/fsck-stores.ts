import { readdirSync } from "node:fs";
import { join } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import { listJobs, QUEUE_DIR } from "../captures/index.js";
import {
  referencedArtifacts,
  resolveEntrypoint,
  INSTANCE_REFS_DIR,
  RESOLUTIONS_DIR,
  readInstanceRef,
  recordReader,
  resolutionPath,
} from "../resolution/index.js";
import type { ResolutionRecord } from "../resolution/index.js";
import {
  IDENTIFIER_PATTERN,
  BLOBS_DIR,
  readBlob,
  inspectStoreAt,
  STAGING_PREFIX,
  TREE_EXEC,
} from "../retention/index.js";
import { findingOf, guarded, notice, type Finding } from "./findings.js";

/**
 * The single-file stores of a scope, checked the way their readers check
 * them, plus every reference between them: records name artifacts and blobs,
 * instance refs and queued jobs name records. Staging files in these stores
 * are reported by the retention listing; here only names that no writer of
 * oats produces are reported as unknown.
 */

const DIGEST_NAME = /^sha256-[0-9a-f]{64}$/;
const UNKNOWN = "not written by oats; left alone";

/** `kind\0key\0format\0value`: how a revision is looked up by reference. */
export function revisionKey(ref: { kind: string; key: string; integrity: { format: string; value: string } }): string {
  return `${ref.kind}\0${ref.key}\0${ref.integrity.format}\0${ref.integrity.value}`;
}

/** Names in a store root, or none when the store (or any component) is absent; a symlinked component throws. */
export function storeNames(scope: string, components: readonly string[]): { dir: string; names: string[] } {
  const dir = join(scope, ...components);
  if (!inspectStoreAt(scope, components).complete) return { dir, names: [] };
  try {
    return { dir, names: readdirSync(dir).sort() };
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return { dir, names: [] };
    throw error;
  }
}

/** Managed entries every file store may hold: its .gitignore and staging (reported elsewhere). */
function managed(name: string): boolean {
  return name === ".gitignore" || name.startsWith(STAGING_PREFIX);
}

export interface BlobsChecked {
  readonly checked: number;
  /** Digests of every blob present (damaged or not): references to them are not dangling. */
  readonly present: Set<string>;
}

export function checkBlobs(scope: string, findings: Finding[]): BlobsChecked {
  const present = new Set<string>();
  let checked = 0;
  guarded(findings, "blobs", BLOBS_DIR.join("/"), () => {
    const { dir, names } = storeNames(scope, BLOBS_DIR);
    for (const name of names) {
      if (managed(name)) continue;
      if (!DIGEST_NAME.test(name)) {
        findings.push(notice("unknown", join(dir, name), UNKNOWN));
        continue;
      }
      present.add(name);
      checked += 1;
      guarded(findings, "blobs", name, () => readBlob(scope, name));
    }
  });
  return { checked, present };
}

/**
 * What the checks after a record's own need of it: its kind and subject (instance refs and jobs must name a record of
 * theirs) and the legacy-named copies it names (fsck-modes.ts). Not the record: a scope's records are not held whole.
 */
export interface RecordSummary {
  readonly kind: ResolutionRecord["kind"];
  readonly subject: ResolutionRecord["subject"];
  /** Each artifact named by its exec digest beside a legacy-named copy: its key and both digests. */
  readonly legacy: readonly { key: string; legacy: string; exec: string }[];
}

/** Every record present, with its summary when it reads cleanly, null when it is damaged. */
export type RecordsPresent = ReadonlyMap<string, RecordSummary | null>;

export function summaryOf(record: ResolutionRecord): RecordSummary {
  const legacy: { key: string; legacy: string; exec: string }[] = [];
  for (const entry of Object.values(record.artifacts)) {
    if (!entry.legacyIntegrity || entry.artifact.integrity.format !== TREE_EXEC) continue;
    legacy.push({ key: entry.artifact.key, legacy: entry.legacyIntegrity.value, exec: entry.artifact.integrity.value });
  }
  return { kind: record.kind, subject: record.subject, legacy };
}

export interface RecordsChecked {
  readonly checked: number;
  readonly present: RecordsPresent;
}

/** Each record as its reader checks it (digest, canonical bytes, schema), then every reference it makes. */
export async function checkRecords(
  scope: string,
  revisions: ReadonlySet<string>,
  blobs: ReadonlySet<string>,
  findings: Finding[],
  pause: () => Promise<void> = async () => {},
): Promise<RecordsChecked> {
  const present = new Map<string, RecordSummary | null>();
  const ids: string[] = [];
  /** Entry points (revision and path) already resolved cleanly. */
  const resolved = new Set<string>();
  guarded(findings, "records", RESOLUTIONS_DIR.join("/"), () => {
    const { dir, names } = storeNames(scope, RESOLUTIONS_DIR);
    for (const name of names) {
      if (managed(name)) continue;
      const id = name.endsWith(".json") ? name.slice(0, -".json".length) : "";
      if (DIGEST_NAME.test(id)) ids.push(id);
      else findings.push(notice("unknown", join(dir, name), UNKNOWN));
    }
  });
  // The store is inspected once for the scan, not once per record (a symlinked store refused above).
  const read = ids.length === 0 ? null : recordReader(scope);
  for (const [index, id] of ids.entries()) {
    if (index % 16 === 15) await pause();
    const record = guarded(findings, "records", id, () => read!(id).record);
    present.set(id, record === null ? null : summaryOf(record));
    if (record !== null) await checkReferences(scope, id, record, revisions, blobs, resolved, findings);
  }
  return { checked: ids.length, present };
}

async function checkReferences(
  scope: string,
  id: string,
  record: ResolutionRecord,
  revisions: ReadonlySet<string>,
  blobs: ReadonlySet<string>,
  resolved: Set<string>,
  findings: Finding[],
): Promise<void> {
  const path = resolutionPath(scope, id);
  const missingArtifacts = new Set<string>();
  for (const ref of referencedArtifacts(record)) {
    if (revisions.has(revisionKey(ref))) continue;
    missingArtifacts.add(revisionKey(ref));
    const error = new OatsError(
      "artifact-not-found",
      `resolution ${id} references ${ref.kind} ${ref.key} ` +
        `${ref.integrity.format}:${ref.integrity.value}, which is not retained ` +
        `in this scope`,
      { id, artifact: ref },
    );
    findings.push(findingOf(error, "records", id, path));
  }
  if (record.capture) {
    const pinned: Array<[string, string | null]> = [
      ["classification config", record.capture.classification.config],
      ["profile", record.capture.profile],
      ["spec", record.capture.spec.blob],
    ];
    for (const [what, digest] of pinned) {
      if (digest === null || blobs.has(digest)) continue;
      const error = new OatsError(
        "blob-not-found",
        `resolution ${id} pins its ${what} as blob ${digest}, which this scope does not hold`,
        { id, digest, pinned: what },
      );
      findings.push(findingOf(error, "records", id, path));
    }
  }
  // Entry points must resolve inside their artifact; one whose artifact is missing was reported above.
  // Revisions are immutable: a path that resolved once in a revision resolves for every record naming it.
  for (const [name, entrypoint] of Object.entries(record.entrypoints)) {
    const key = `${revisionKey(entrypoint.artifact)}\0${entrypoint.path}`;
    if (missingArtifacts.has(revisionKey(entrypoint.artifact)) || resolved.has(key)) continue;
    try {
      await resolveEntrypoint(scope, name, entrypoint);
      resolved.add(key);
    } catch (error) {
      if (!(error instanceof OatsError) || error.kind === "internal") throw error;
      findings.push(findingOf(error, "records", id, path));
    }
  }
}

/** Every instance ref reads, and names a record of that instance that the scope holds. */
export function checkInstances(scope: string, records: RecordsPresent, findings: Finding[]): number {
  let checked = 0;
  guarded(findings, "instances", INSTANCE_REFS_DIR.join("/"), () => {
    const { dir, names } = storeNames(scope, INSTANCE_REFS_DIR);
    for (const name of names) {
      if (managed(name)) continue;
      const instance = name.endsWith(".json") ? name.slice(0, -".json".length) : "";
      if (!IDENTIFIER_PATTERN.test(instance)) {
        findings.push(notice("unknown", join(dir, name), UNKNOWN));
        continue;
      }
      checked += 1;
      const path = join(dir, name);
      guarded(findings, "instances", instance, () => {
        const ref = readInstanceRef(scope, instance);
        if (!records.has(ref.resolution)) {
          throw new OatsError(
            "resolution-not-found",
            `instance ${instance} names resolution ${ref.resolution}, which this scope does not hold`,
            { instance, resolution: ref.resolution, path },
          );
        }
        const record = records.get(ref.resolution);
        // A damaged record is reported under records; a readable one must be this instance's.
        if (
          record &&
          (record.kind !== "instance" || !("instance" in record.subject) || record.subject.instance !== instance)
        ) {
          throw new OatsError(
            "invalid-resolution",
            `instance ${instance} names resolution ${ref.resolution}, which is a ` +
              `record of ${JSON.stringify(record.subject)}`,
            { instance, resolution: ref.resolution, subject: record.subject, path },
          );
        }
      });
    }
  });
  return checked;
}

/** Every queued job reads, and names a capture record the scope holds. */
export function checkJobs(scope: string, records: RecordsPresent, findings: Finding[]): number {
  let checked = 0;
  guarded(findings, "jobs", QUEUE_DIR.join("/"), () => {
    const { dir, names } = storeNames(scope, QUEUE_DIR);
    for (const name of names) {
      // listJobs reads every `*.json`; anything else but managed entries is foreign.
      if (!managed(name) && !name.endsWith(".json")) findings.push(notice("unknown", join(dir, name), UNKNOWN));
    }
    for (const { job, queued, error } of listJobs(scope)) {
      checked += 1;
      if (error) {
        findings.push(findingOf(error, "jobs", job, null));
        continue;
      }
      if (!queued) continue;
      const path = join(dir, `${job}.json`);
      if (!records.has(queued.resolution)) {
        const missing = new OatsError(
          "resolution-not-found",
          `job ${job} names resolution ${queued.resolution}, which this scope does not hold`,
          { job, resolution: queued.resolution, path },
        );
        findings.push(findingOf(missing, "jobs", job, path));
        continue;
      }
      const record = records.get(queued.resolution);
      if (record && record.kind !== "capture") {
        const wrong = new OatsError(
          "invalid-artifact-store",
          `job ${job} names resolution ${queued.resolution}, an ${record.kind} record; only a capture can be queued`,
          { job, resolution: queued.resolution, kind: record.kind, path },
        );
        findings.push(findingOf(wrong, "jobs", job, path));
      }
    }
  });
  return checked;
}
