import { DEFAULT_LOCK_WAIT_MS } from "./publish-lock.js";
import { withPublishLease } from "./lease.js";

/**
 * A publish lease (lease.ts) held past the call that took it, for work whose
 * end is in another layer's hands: a dispatch takes one before it reads its
 * job and hands it on with the plan, and the run releases it once its
 * control file names the resolution (docs/design/lifecycle.md, "What a
 * dispatch holds"). It is the same lease as withPublishLease's (one file a
 * process, counted), so every publisher the holder calls meanwhile passes at
 * once, and a deleting gc waits for it like for any publisher.
 */
export interface LeaseHold {
  /** Let the lease go (idempotent); resolves once this hold no longer counts. */
  release(): Promise<void>;
}

/** Pass the lease protocol (waiting for a deleting gc, `busy` after `waitMs`) and hold the lease until released. */
export async function holdPublishLease(scope: string, waitMs = DEFAULT_LOCK_WAIT_MS): Promise<LeaseHold> {
  let letGo!: () => void;
  const released = new Promise<void>((resolve) => {
    letGo = resolve;
  });
  let ended!: Promise<void>;
  await new Promise<void>((passed, refused) => {
    ended = withPublishLease(
      scope,
      async () => {
        passed();
        await released;
      },
      waitMs,
    ).catch(refused);
  });
  return {
    release: () => {
      letGo();
      return ended;
    },
  };
}
