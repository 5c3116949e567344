import { settleInLanes, type Settled } from "./parallel/pool.js";
import type { ArtifactReceipt } from "./receipt.js";
import type { ArtifactRefInput } from "./store/layout.js";
import { verifyTreeWith, type VerifyOptions } from "./verify.js";

/**
 * Verifying several retained trees on every core (parallel/pool.ts): each
 * is verified exactly as verifyTree verifies it (the same refusals, every
 * byte read and hashed), the walks and hashes spread over the calling
 * thread and worker threads. Outcomes are in the order of `refs`.
 */

/** Every ref verified, failures included, in the order given; `onVerified` counts them as they finish. */
export function verifyTrees(
  scope: string,
  refs: readonly ArtifactRefInput[],
  options: VerifyOptions & { onVerified?: (done: number, total: number) => void; callerBusy?: boolean } = {},
): Promise<Settled<ArtifactReceipt>[]> {
  const { onVerified, callerBusy, ...verify } = options;
  return settleInLanes(
    refs,
    (ref, measure) =>
      verifyTreeWith(
        scope,
        ref,
        measure ? { ...(verify.maxDepth === undefined ? {} : { maxDepth: verify.maxDepth }) } : verify,
        measure,
      ),
    { ...(onVerified ? { onSettled: onVerified } : {}), ...(callerBusy ? { callerBusy } : {}) },
  );
}

/**
 * Verify every ref, or refuse with the refusal a sequential loop would have
 * met first: the earliest failure in the order given.
 */
export async function verifyAllTrees(
  scope: string,
  refs: readonly ArtifactRefInput[],
  options: VerifyOptions = {},
): Promise<ArtifactReceipt[]> {
  const outcomes = await verifyTrees(scope, refs, options);
  return outcomes.map((outcome) => {
    if (!outcome.ok) throw outcome.error;
    return outcome.value;
  });
}
