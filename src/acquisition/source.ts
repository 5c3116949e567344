import { chmodSync } from "node:fs";
import { OatsError } from "../core/index.js";
import { sourceIdentitySchema } from "../resolution/index.js";
import {
  adoptTree,
  retainTree,
  type RetainOptions,
  pinSourceIdentity,
  sourceIdentityKey,
  inspectStore,
  resolveScope,
} from "../retention/index.js";
import type { ArtifactReceipt } from "../retention/index.js";
import { assertFullCommit, gitRepositoryRoot, listTree, resolveCommit } from "./git.js";
import { writeCommitTree, type ArchiveOptions } from "./git-tree.js";
import { withExtractionDir } from "./staging.js";

/**
 * Retain a source tree (a soul, or any other source) in the source store,
 * keyed by its qualified source identity (`git:<url>#<path>`,
 * `path:<absolute dir>`):
 *
 * - revision `local`: the directory as it is, through retainTree;
 * - revision a full 40-hex commit: `dir` is a local git repository, and what
 *   is retained is the tree of that commit (see git.ts), never the working
 *   tree. It is extracted into `<scope>/.agents/extract/.staging-*` and
 *   retained from there; the extraction is always removed.
 *
 * Every input is validated before anything is touched, and every refusal
 * leaves the store as it was.
 */

export interface SourceRequest {
  /** `git:<url>#<path>` or `path:<absolute dir>`. */
  readonly identity: string;
  /** `local`, or a full 40-hex lowercase commit id. */
  readonly revision: string;
  /** The source directory (`local`) or the git repository (a commit). */
  readonly dir: string;
}

export interface SourceReceipt extends ArtifactReceipt {
  readonly identity: string;
  readonly revision: string;
  /** For a commit: the commit and its root tree id, as git names them. */
  readonly commit?: string;
  readonly tree?: string;
}

export interface RetainSourceOptions extends RetainOptions, ArchiveOptions {}

function checkIdentity(identity: unknown): string {
  const parsed = sourceIdentitySchema.safeParse(identity);
  if (parsed.success) return parsed.data;
  throw new OatsError(
    "invalid-input",
    `invalid source identity ` +
      `${JSON.stringify(typeof identity === "string" ? identity.slice(0, 200) : identity)}: ` +
      `it must be git:<url>#<path> or path:<absolute dir>`,
    {
      identity: typeof identity === "string" ? identity.slice(0, 200) : String(identity),
      reason: "invalid-identity",
    },
  );
}

function checkRevision(revision: string): string {
  return revision === "local" ? revision : assertFullCommit(revision);
}

/**
 * Retain a source tree in the source store under the key of its qualified identity (src/acquisition/source.ts), and pin
 * the identity. Refuses a malformed identity (`invalid-input`, reason `invalid-identity`), a revision that is
 * neither `local` nor a full commit id (`invalid-input`, reason `not-a-full-commit`) and a missing directory
 * (`invalid-input`, reason `source-missing`), before anything is written; then the refusals of retainTree.
 * @returns the receipt, with the identity and revision (and for a commit, the commit and its tree id)
 */
export async function retainSource(
  scope: string,
  request: SourceRequest,
  options: RetainSourceOptions = {},
): Promise<SourceReceipt> {
  const identity = checkIdentity(request.identity);
  const revision = checkRevision(request.revision);
  if (typeof request.dir !== "string" || request.dir === "")
    throw new OatsError("invalid-input", "a source directory is required", { reason: "source-missing" });
  const key = sourceIdentityKey(identity);
  const retainOptions: RetainOptions = {
    ...(options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs }),
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
  };
  const maxDepth = options.maxDepth ?? options.limits?.maxDepth;
  if (maxDepth !== undefined) Object.assign(retainOptions, { maxDepth });
  if (revision === "local") {
    const receipt = await retainTree(scope, { kind: "source", key, source: request.dir }, retainOptions);
    pinSourceIdentity(scope, identity);
    return { ...receipt, identity, revision };
  }

  // Read-only checks of the scope and the source store come before git runs.
  const realScope = resolveScope(scope);
  inspectStore(realScope, "source");
  const repo = await gitRepositoryRoot(request.dir);
  const tree = await resolveCommit(repo, revision);
  const listing = await listTree(repo, tree);
  const receipt = await withExtractionDir(realScope, async (dir) => {
    await writeCommitTree(repo, tree, listing, dir, options.limits ? { limits: options.limits } : {});
    // A commit's root is a directory like any other in it (0755), whether or not anything was written (an empty tree).
    chmodSync(dir, 0o755);
    // The tree was written by us from the object database, each blob checked against its id: adopted (moved, made
    // durable, read back once), not copied again.
    return adoptTree(realScope, { kind: "source", key, source: dir }, retainOptions);
  });
  // The identity's canonical bytes, pinned as the blob its key names: `oats ls` shows the identity, not only its key.
  pinSourceIdentity(realScope, identity);
  return { ...receipt, identity, revision, commit: tree.commit, tree: tree.tree };
}
