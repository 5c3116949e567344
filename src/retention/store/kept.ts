import { utimes } from "node:fs/promises";
import { dirname } from "node:path";
import { OatsError } from "../../core/index.js";
import { listingShape } from "../digest/listing-shape.js";
import { digestListing, type TreeDigests } from "../digest/tree.js";
import { acquireWorker, parallelism, releaseWorker } from "../parallel/pool.js";
import { mayMatch, newestRevision } from "./kept-candidate.js";
import type { EarlyCheck } from "./kept-early.js";
import {
  checkExpectedAlso,
  digestOptions,
  exists,
  mismatch,
  verifyRevision,
  type PublishPlan,
  type PublishResult,
} from "./publish.js";

/**
 * The kept path of a publication (publish.ts): the revision a retain would
 * publish is already in the store. It is reported kept only after the
 * source has been read in full and hashes to it, and the stored revision
 * has been read in full and verifies; neither read is skipped.
 */

/**
 * The revision is already here, but the request was to retain *this*
 * source: a source that drifted from what it claims is still refused, so
 * "kept" never vouches for a tree that was not read. Null when the expected
 * revision is not there.
 *
 * Both reads are made in full, and at once when there is a second core: the
 * stored revision is walked and hashed in a worker thread (started before
 * the source's walk when the retain could: plan.early) while this thread
 * hashes the source. The verdicts and their precedence are those of doing
 * one after the other: a source that differs is refused first, whatever the
 * stored copy holds; then a damaged stored revision is refused. Nothing is
 * touched (provenance check, mtime) before both verdicts are in.
 */
export async function keptIfPresent(
  plan: PublishPlan,
  destination: (value: string) => string,
): Promise<PublishResult | null> {
  const early = plan.expected && plan.early?.dir === destination(plan.expected) ? plan.early : null;
  try {
    if (!plan.expected) return null;
    const dir = destination(plan.expected);
    if (!early && !(await exists(dir))) return null;
    return await keptAfterSource(plan, dir, plan.expected, early, (measured) => {
      throw mismatch(plan, plan.expected!, measured, { source: plan.listing.root.absolute, reason: "source-differs" });
    });
  } finally {
    await plan.early?.release();
  }
}

/**
 * Hash the source while `dir` is verified (by `early`, or a worker started
 * here when there is a second core, or after the source on this thread),
 * and keep `dir` if the source hashes to `value` and the revision is
 * intact. A source that hashes to something else goes to `otherwise` (a
 * refusal, or another revision), with the stored read stopped first.
 */
async function keptAfterSource(
  plan: PublishPlan,
  dir: string,
  value: string,
  early: EarlyCheck | null,
  otherwise: (measured: string) => Promise<PublishResult | null>,
): Promise<PublishResult | null> {
  const worker = !early && parallelism() > 1 ? acquireWorker() : null;
  try {
    // Started first, awaited second; settled so that a refusal waits for the source's verdict.
    const stored = early ? early.outcome : worker ? settle(verifyRevision(plan, dir, value, worker.measure)) : null;
    const measured = (await digestListing(plan.listing, [plan.nameFormat], digestOptions(plan, "read")))[
      plan.nameFormat
    ]!;
    if (measured !== value) {
      await early?.release();
      return await otherwise(measured);
    }
    if (!stored) return await kept(plan, dir, measured);
    const outcome = await stored;
    if (!outcome.ok) {
      // Taken away since it was found (not by gc: the lease keeps it away): retained as if it never was.
      if (outcome.error instanceof OatsError && outcome.error.code === "artifact-not-found" && !(await exists(dir)))
        return null;
      throw outcome.error;
    }
    return await keptVerified(plan, dir, outcome.digests);
  } finally {
    if (worker) await releaseWorker(worker);
  }
}

async function settle(
  promise: Promise<TreeDigests>,
): Promise<{ ok: true; digests: TreeDigests } | { ok: false; error: unknown }> {
  try {
    return { ok: true, digests: await promise };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * Without an expected digest, a source that hashes to the key's newest
 * revision (kept-candidate.ts) is kept without a copy: the source is hashed
 * (no staging is written) while a worker verifies that revision, and the
 * two are compared as keptIfPresent compares them. A source that hashes to
 * another present revision is kept after verifying that one. Null
 * otherwise: the source is then copied as for a first retain (and read
 * again; what that read measures is what is retained, as before).
 */
export async function keptIfUnchanged(
  plan: PublishPlan,
  parent: string,
  destination: (value: string) => string,
): Promise<PublishResult | null> {
  // The early check took the newest revision when the retain started; one of another parent is not this plan's.
  const early = plan.early && dirname(plan.early.dir) === parent ? plan.early : null;
  try {
    const candidate = early ? { dir: early.dir, value: early.value } : newestRevision(parent);
    if (!candidate || !(await sameShape(early, candidate.dir, plan))) return null;
    return await keptAfterSource(plan, candidate.dir, candidate.value, early, (measured) =>
      kept(plan, destination(measured), measured),
    );
  } finally {
    await plan.early?.release();
  }
}

/**
 * Whether the source may hash to the candidate revision: false when its
 * leaves differ (then reading it without a copy would be wasted, as it
 * must be read again to be copied). The early check's worker tells the
 * shape of the revision it walked; comparing that with the source's costs
 * two short hashes where reading the revision's manifest (mayMatch) parsed
 * a document of some 150 bytes a file on this thread (about 15 ms for
 * 20,000 files). The manifest when there is no early check, or its walk
 * told nothing.
 */
async function sameShape(early: EarlyCheck | null, dir: string, plan: PublishPlan): Promise<boolean> {
  const stored = early ? await early.shape : null;
  return stored === null ? mayMatch(dir, plan.listing) : stored === listingShape(plan.listing);
}

export async function kept(plan: PublishPlan, dir: string, expected: string): Promise<PublishResult | null> {
  if (!(await exists(dir))) return null;
  return keptVerified(plan, dir, await verifyRevision(plan, dir, expected));
}

/** A revision verified intact, and the source's verdict in: check it (provenance) and report it kept. */
async function keptVerified(plan: PublishPlan, dir: string, digests: TreeDigests): Promise<PublishResult> {
  checkExpectedAlso(plan, digests);
  plan.checkExisting?.(dir);
  // Retaining again restarts gc's grace period (the revision's mtime), best effort: a read-only store keeps its time.
  await utimes(dir, new Date(), new Date()).catch(() => undefined);
  return { dir, digests, status: "kept" };
}
