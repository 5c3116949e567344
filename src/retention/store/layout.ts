import { createHash, randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { resolve, sep } from "node:path";
import { OatsError } from "../../core/index.js";
import { assertArtifactKey, assertArtifactKind, type ArtifactKind } from "./ids.js";
import {
  TREE_EXEC,
  TREE_LEGACY,
  digestHex,
  integrityText,
  parseTreeIntegrity,
  type Integrity,
  type IntegrityInput,
} from "../digest/integrity.js";

/**
 * Where things live (contract section 3). Every function here is lexical:
 * computing a path is not verification, and nothing here touches the disk.
 */

export const AGENTS_DIR = ".agents";
export const STAGING_PREFIX = ".staging-";
export const LOCK_PREFIX = ".lock-";
export const EXEC_REVISIONS_DIR = "tree-exec-v1";
export const MANAGED_GITIGNORE = "*\n";

const KIND_DIRS: Record<ArtifactKind, string> = {
  capability: "capabilities",
  source: "sources",
  capture: "captures",
};

/**
 * Stores of single files (resolution records, instance refs, pinned blobs, queued jobs)
 * whose publication stages a file beside its destination; cleanup looks
 * there too.
 */
export const FILE_STORES: readonly (readonly string[])[] = [
  [AGENTS_DIR, "resolutions"],
  [AGENTS_DIR, "refs", "instances"],
  [AGENTS_DIR, "blobs"],
  [AGENTS_DIR, "queue"],
  [AGENTS_DIR, "pins"],
];

/**
 * Where package tarballs are unpacked before retention: only `.staging-*`
 * directories live here, each removed by its extractor when it finishes;
 * cleanup removes a crashed extractor's.
 */
export const EXTRACT_STORE: readonly string[] = [AGENTS_DIR, "extract"];

/**
 * Where dispatch copies an executable tree to run it (src/captures/run-copy.ts):
 * only `.staging-*` directories (0700, the dispatcher's), each removed when
 * its run ends unless kept; cleanup removes those whose dispatcher is gone.
 */
export const RUN_COPIES_STORE: readonly string[] = [AGENTS_DIR, "run-copies"];

/** The store components from the scope down to a kind's store root. */
export function storeComponents(kind: ArtifactKind): string[] {
  return [AGENTS_DIR, KIND_DIRS[kind], "artifacts"];
}

/**
 * The directory that holds every retained revision of one kind in a scope (lexical: nothing is read).
 * @param scope the scope directory
 * @param kind which store: capability, source or capture
 * @returns the absolute path `<scope>/.agents/<kind's store>/artifacts`
 */
export function storeRoot(scope: string, kind: ArtifactKind): string {
  return resolve(scope, ...storeComponents(kind));
}

export interface ArtifactRef {
  readonly kind: ArtifactKind;
  readonly key: string;
  readonly integrity: Integrity;
}

/**
 * A reference to a retained revision as a caller holds one: the kind (a capability when left out), the
 * key, and the integrity in any form {@link IntegrityInput} names.
 */
export interface ArtifactRefInput {
  readonly kind?: ArtifactKind | undefined;
  readonly key: string;
  readonly integrity: IntegrityInput;
}

/**
 * Validate a reference: kind, key grammar, and an integrity that can name a stored revision of that kind.
 * Refuses a bad kind, key or integrity with `invalid-artifact-reference`; every field is checked at run
 * time, whatever its declared type.
 */
export function parseArtifactRef(input: ArtifactRefInput): ArtifactRef {
  const kind = assertArtifactKind(input.kind ?? "capability");
  const key = assertArtifactKey(kind, input.key);
  const integrity = parseTreeIntegrity(input.integrity, kind === "capability" ? [TREE_LEGACY, TREE_EXEC] : [TREE_EXEC]);
  return { kind, key, integrity };
}

/** Check that a computed path stays strictly inside `root`. */
export function assertContained(root: string, path: string, what: string): string {
  const absolute = resolve(path);
  const base = resolve(root);
  if (!absolute.startsWith(base + sep)) {
    throw new OatsError("artifact-not-contained", `${what} resolves outside its store: ${absolute}`, {
      path: absolute,
      store: base,
    });
  }
  return absolute;
}

/** The directory that holds a key's revisions of the given format. */
export function revisionParentDir(scope: string, ref: Pick<ArtifactRef, "kind" | "key" | "integrity">): string {
  const root = storeRoot(scope, ref.kind);
  const parent =
    ref.integrity.format === TREE_LEGACY ? resolve(root, ref.key) : resolve(root, ref.key, EXEC_REVISIONS_DIR);
  return assertContained(root, parent, `artifact ${ref.key}`);
}

/** The revision directory for a reference: `<key>/sha256-<hex>` or `<key>/tree-exec-v1/sha256-<hex>`. */
export function retainedTreeDir(scope: string, input: ArtifactRefInput): string {
  const ref = parseArtifactRef(input);
  const dir = resolve(revisionParentDir(scope, ref), `sha256-${digestHex(ref.integrity)}`);
  return assertContained(storeRoot(scope, ref.kind), dir, `artifact ${ref.key} ${integrityText(ref.integrity)}`);
}

/** The capability revision named by an integrity (bare sha256-<hex> means oats.tree-legacy.v0). */
export function retainedCapabilityDir(scope: string, capabilityId: string, integrity: IntegrityInput): string {
  return retainedTreeDir(scope, { kind: "capability", key: capabilityId, integrity });
}

/**
 * Staging names carry the publisher's host and pid, so cleanup can tell a
 * crashed publisher's leftovers from a live publisher's work in progress:
 * `.staging-<host tag>-<pid>-<random>`.
 */
export function hostTag(): string {
  return createHash("sha256").update(hostname()).digest("hex").slice(0, 8);
}

export function stagingName(): string {
  return `${STAGING_PREFIX}${hostTag()}-${process.pid}-${randomBytes(6).toString("hex")}`;
}

export interface StagingOwner {
  readonly host: string;
  readonly pid: number;
}

/** The owner encoded in a staging name, or null for a name that is not ours. */
export function parseStagingName(name: string): StagingOwner | null {
  const match =
    /^\.staging-([0-9a-f]{8})-([0-9]+)-[0-9a-f]{12}(?:\.gitignore|\.manifest|\.record|\.ref|\.job|\.pin)?$/.exec(name);
  return match ? { host: match[1]!, pid: Number(match[2]) } : null;
}
