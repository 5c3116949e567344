import { lstatSync } from "node:fs";
import { join } from "node:path";
import { OatsError, bytesDigest, canonicalJsonBytes } from "../core/index.js";
import { pinnedBlobs } from "../acquisition/index.js";
import { compositionOf, listJobs } from "../captures/index.js";
import { referencedArtifacts, INSTANCE_REFS_DIR, instanceRefReader, recordReader } from "../resolution/index.js";
import type { ResolutionRecord } from "../resolution/index.js";
import {
  TREE_LEGACY,
  inspectStoreAt,
  readRegularFile,
  AGENTS_DIR,
  retainedTreeDir,
  type ArtifactRef,
  namesIn,
} from "../retention/index.js";
import { listPins } from "./pins.js";
import { checkRunDir, listHandles, readControl, readRecord, strayNames } from "../evidence/index.js";

/**
 * gc's roots and what they reach (docs/design/lifecycle.md). Pure reading:
 * nothing here writes. A root that cannot be read (a damaged instance ref,
 * job, pin or root record) refuses the whole collection with its own error:
 * gc cannot know what it was meant to keep, so it deletes nothing.
 */

export const RUNS_DIR: readonly string[] = [AGENTS_DIR, "runs"];
const MAX_RUN_FILE_BYTES = 16 << 20;

export interface RootSet {
  /**
   * Root record ids, each with why it is a root: `instance:<name>`, `job:<id>`, `pin`, `run:<handle>` (the
   * resolution a run names), `run-file:<path>` (an id found in anything else in the runs store).
   */
  readonly records: Map<string, string[]>;
  readonly artifacts: ArtifactRef[];
  readonly counts: { instances: number; jobs: number; pins: number; runs: number };
  /** Roots that name a record the scope does not hold (already broken; nothing to keep). */
  readonly missing: { root: string; id: string }[];
}

export interface Reachable {
  /** Revision directories (absolute) that a root reaches. */
  readonly revisions: Set<string>;
  readonly records: Set<string>;
  readonly blobs: Set<string>;
  /** Pairs of legacy- and exec-named directories of one capability tree, as records name them. */
  readonly copies: Map<string, string>;
}

function addRoot(roots: RootSet, id: string, why: string): void {
  const list = roots.records.get(id);
  if (list) list.push(why);
  else roots.records.set(id, [why]);
}

/**
 * Run evidence (`.agents/runs/`): every run keeps the resolution it ran,
 * read from its sealed record (record.json, checked: canonical, schema) or,
 * for a run still open, from its control file. A run whose files cannot be
 * read refuses the collection; a run whose resolution is gone is a missing
 * root, as fsck reports it. Anything else in the runs store is not a run
 * but is kept safe all the same: every record id written anywhere in it keeps
 * that record (reading too much is safe; reading too little would not be).
 */
function runRoots(realScope: string, roots: RootSet): number {
  if (!inspectStoreAt(realScope, RUNS_DIR).complete) return 0;
  let runs = 0;
  for (const handle of listHandles(realScope)) {
    const dir = join(realScope, ...RUNS_DIR, handle);
    checkRunDir(dir);
    const sealed = readRecord(dir);
    addRoot(roots, sealed === null ? readControl(dir).base.resolution : sealed.record.resolution, `run:${handle}`);
    runs += 1;
  }
  const walk = (dir: string): void => {
    for (const name of namesIn(dir)) {
      const path = join(dir, name);
      const stats = lstatSync(path);
      if (stats.isDirectory()) walk(path);
      else if (stats.isFile()) {
        const text = readRegularFile(path, {
          limit: MAX_RUN_FILE_BYTES,
          refuse: (failure) =>
            new OatsError(
              "invalid-artifact-store",
              `run evidence ${path} cannot be read (${failure}); gc cannot tell which records it needs`,
              { path, reason: failure },
            ),
        }).toString("latin1");
        for (const match of text.matchAll(/sha256-[0-9a-f]{64}/g))
          addRoot(roots, match[0], `run-file:${path.slice(realScope.length + 1)}`);
      }
    }
  };
  for (const name of strayNames(realScope)) {
    const path = join(realScope, ...RUNS_DIR, name);
    if (lstatSync(path).isDirectory()) walk(path);
  }
  return runs;
}

/**
 * gc's roots: the records named by instance references, queued jobs, pins and runs, and the pinned revisions.
 * A root that cannot be read refuses the whole collection with its own error, so gc deletes nothing.
 * @param realScope the scope, already resolved
 */
export function collectRoots(realScope: string): RootSet {
  const roots: RootSet = {
    records: new Map(),
    artifacts: [],
    counts: { instances: 0, jobs: 0, pins: 0, runs: 0 },
    missing: [],
  };
  if (inspectStoreAt(realScope, INSTANCE_REFS_DIR).complete) {
    const readInstanceRef = instanceRefReader(realScope);
    for (const name of namesIn(join(realScope, ...INSTANCE_REFS_DIR))) {
      if (name.startsWith(".") || !name.endsWith(".json")) continue;
      const instance = name.slice(0, -".json".length);
      addRoot(roots, readInstanceRef(instance).resolution, `instance:${instance}`);
      roots.counts.instances += 1;
    }
  }
  for (const { job, queued, error } of listJobs(realScope)) {
    if (error) throw error;
    // A prepare-on-tick job re-prepares from the spec its record pinned: that record is the one it was prepared from,
    // and stays.
    addRoot(roots, queued!.resolution, `job:${job}`);
    roots.counts.jobs += 1;
  }
  for (const pin of listPins(realScope)) {
    if (pin.ref.type === "resolution") addRoot(roots, pin.ref.id, "pin");
    else roots.artifacts.push({ kind: pin.ref.kind, key: pin.ref.key, integrity: pin.ref.integrity });
    roots.counts.pins += 1;
  }
  roots.counts.runs = runRoots(realScope, roots);
  return roots;
}

/** The blob a capture record's composition was pinned as (prepare-capture.ts). */
export function compositionBlob(record: ResolutionRecord): string | null {
  if (record.kind !== "capture") return null;
  return bytesDigest(canonicalJsonBytes(compositionOf(record)));
}

/** Everything a record needs: its artifacts (legacy-named copies too), its pinned blobs and its composition. */
export function recordClosure(realScope: string, record: ResolutionRecord, into: Reachable): void {
  for (const ref of referencedArtifacts(record)) into.revisions.add(retainedTreeDir(realScope, ref));
  for (const entry of Object.values(record.artifacts)) {
    if (!entry.legacyIntegrity) continue;
    const legacy = retainedTreeDir(realScope, {
      kind: "capability",
      key: entry.artifact.key,
      integrity: { format: TREE_LEGACY, value: entry.legacyIntegrity.value },
    });
    const exec = retainedTreeDir(realScope, entry.artifact);
    into.revisions.add(legacy);
    into.copies.set(legacy, exec);
  }
  for (const digest of pinnedBlobs(record)) into.blobs.add(digest);
  const composition = compositionBlob(record);
  if (composition) into.blobs.add(composition);
}

/**
 * Everything the roots reach: their records, the revisions and blobs those records name, and the pinned
 * revisions. A root naming a record the scope lacks is added to `roots.missing`; any other unreadable record
 * refuses with its own error.
 */
export function reachableFrom(realScope: string, roots: RootSet): Reachable {
  const reachable: Reachable = { revisions: new Set(), records: new Set(), blobs: new Set(), copies: new Map() };
  for (const ref of roots.artifacts) reachable.revisions.add(retainedTreeDir(realScope, ref));
  const readRecord = recordReader(realScope);
  for (const [id, why] of roots.records) {
    let record: ResolutionRecord;
    try {
      record = readRecord(id).record;
    } catch (error) {
      // Stray run evidence may name ids that are not records (a blob digest, say): only a record it names is a root.
      if (error instanceof OatsError && error.code === "resolution-not-found") {
        if (why.every((each) => each.startsWith("run-file:"))) reachable.blobs.add(id);
        else roots.missing.push({ root: why.join(","), id });
        continue;
      }
      throw error;
    }
    reachable.records.add(id);
    recordClosure(realScope, record, reachable);
  }
  return reachable;
}
