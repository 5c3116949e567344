import { join } from "node:path";
import type { TreeDigests } from "../digest/tree.js";
import type { ArtifactKind } from "./ids.js";
import type { TreeFormat } from "../digest/integrity.js";
import { acquireWorker, parallelism, releaseWorker } from "../parallel/pool.js";
import { inspectStore } from "./components.js";
import { newestRevision } from "./kept-candidate.js";
import { assertContained, storeRoot } from "./layout.js";
import { revisionParentSegments, verifyRevision } from "./publish.js";
import { entryPresent } from "./files.js";

/**
 * The stored half of a kept retain, started before the source is walked.
 *
 * A retain of a tree that is already retained reads two trees in full: the
 * source (its verdict: does it hash to the revision?) and the stored
 * revision (is it intact?). They are independent, so the stored one is
 * verified in a worker thread while this thread checks, walks and hashes
 * the source; started here, before the source's walk, the worker's read
 * overlaps everything this thread does, not only the source's hash.
 *
 * Only the read starts early. Nothing is decided or written here: the
 * outcome (verifyRevision's, with its refusals) is held until publish.ts (keptIfPresent, keptIfUnchanged) has the
 * source's verdict, which takes precedence as in a sequential read; the
 * provenance check and the mtime touch of a kept revision come after both.
 * The store is inspected first (inspectStore: no component of the store's
 * path is a symlink), exactly as the retain would before anything else, so
 * the worker never reads through a redirected store. A check that is not
 * used (the source hashed to another revision, a refusal) is released: the
 * worker is stopped if it is still reading.
 */

export interface EarlyCheck {
  /** The revision directory being verified, and the digest its name claims. */
  readonly dir: string;
  readonly value: string;
  /** verifyRevision of `dir` against `value`, its walk and hash in the worker; settled (a refusal is held, not
   * thrown). */
  readonly outcome: Promise<{ ok: true; digests: TreeDigests } | { ok: false; error: unknown }>;
  /**
   * The revision's listing shape (listing-shape.ts), told by the worker once
   * its walk is done, before its reads; null when the check ended without
   * one (its walk refused), and at once (null) when the check has an
   * expected digest: only a kept retain without one compares it with the
   * source's, in place of reading the manifest, and the worker's lane is the
   * longer of a kept retain's two (the listing's hash cost it about 1.3 ms
   * of 20,000 files).
   */
  readonly shape: Promise<string | null>;
  /** Stop the worker (if it is still reading) and hand it back; idempotent. */
  release(): Promise<void>;
}

export interface EarlyRequest {
  readonly scope: string;
  readonly kind: ArtifactKind;
  readonly key: string;
  /** The format whose digest names the revision, and all the formats its verification measures (PublishPlan). */
  readonly nameFormat: TreeFormat;
  readonly formats: readonly TreeFormat[];
  /** The expected value of the name format; without it, the key's newest revision is the candidate. */
  readonly expected?: string;
  readonly maxDepth?: number;
}

/**
 * Start verifying the revision a kept retain would meet, in a worker; null
 * when there is no second core, or no such revision. Throws what
 * inspectStore throws (the retain's first refusal, unchanged).
 */
export function startEarlyCheck(request: EarlyRequest): EarlyCheck | null {
  const segments = revisionParentSegments(request.key, request.nameFormat);
  const { complete } = inspectStore(request.scope, request.kind, segments);
  if (!complete || parallelism() < 2) return null;
  const root = storeRoot(request.scope, request.kind);
  const parent = assertContained(root, join(root, ...segments), `artifact ${request.key}`);
  let dir: string;
  let value: string;
  if (request.expected !== undefined) {
    value = request.expected;
    dir = assertContained(root, join(parent, `sha256-${value.slice("sha256-".length)}`), `artifact ${request.key}`);
    // Absent (or not listable): the retain's own path meets it, in its own order.
    if (!entryPresent(dir)) return null;
  } else {
    const candidate = newestRevision(parent);
    if (!candidate) return null;
    ({ dir, value } = candidate);
  }
  const worker = acquireWorker();
  const plan = {
    kind: request.kind,
    key: request.key,
    nameFormat: request.nameFormat,
    formats: request.formats,
    ...(request.maxDepth === undefined ? {} : { maxDepth: request.maxDepth }),
  };
  let toldShape: (shape: string | null) => void = () => undefined;
  const shape = new Promise<string | null>((resolve) => (toldShape = resolve));
  if (request.expected !== undefined) toldShape(null);
  const outcome = verifyRevision(
    plan,
    dir,
    value,
    worker.measure,
    request.expected === undefined ? toldShape : undefined,
  ).then(
    (digests) => ({ ok: true as const, digests }),
    (error: unknown) => ({ ok: false as const, error }),
  );
  // A promise settles once: a shape told before the outcome stands.
  void outcome.then(() => toldShape(null));
  let released: Promise<void> | null = null;
  return { dir, value, outcome, shape, release: () => (released ??= releaseWorker(worker)) };
}
