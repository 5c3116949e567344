import lockfile from "proper-lockfile";
import { join } from "node:path";
import { OatsError, asStepError, errnoCode } from "../../errors.js";
import { LOCK_PREFIX } from "./layout.js";

/**
 * A cross-process lock on one revision name, held only around the final
 * check-and-rename. proper-lockfile keeps it fresh while held and treats a
 * lock abandoned by a killed process as stale after STALE_MS, so a crash
 * never wedges the store. A bounded wait ends in `busy`.
 */

const STALE_MS = 10_000;
export const DEFAULT_LOCK_WAIT_MS = 15_000;

export async function withRevisionLock<T>(parent: string, revisionName: string, waitMs: number, body: () => Promise<T>): Promise<T> {
  const lockfilePath = join(parent, `${LOCK_PREFIX}${revisionName}`);
  let compromised: Error | null = null;
  let release: () => Promise<void>;
  // Exponential backoff from 20 ms capped at 250 ms. Every retry waits at least
  // minTimeout (20 ms), so waitMs / 20 retries always outlast waitMs and
  // maxRetryTime is what ends the wait.
  const retries = Math.max(1, Math.ceil(waitMs / 20));
  try {
    release = await lockfile.lock(join(parent, revisionName), {
      realpath: false,
      lockfilePath,
      stale: STALE_MS,
      retries: { retries, factor: 1.5, minTimeout: 20, maxTimeout: 250, maxRetryTime: waitMs },
      onCompromised: (error) => {
        compromised = error;
      },
    });
  } catch (error) {
    if (errnoCode(error) === "ELOCKED") {
      throw new OatsError("busy", `another process holds the publication lock for ${join(parent, revisionName)}; gave up after ${waitMs} ms`, { lock: lockfilePath, waitedMs: waitMs });
    }
    throw asStepError("lock", error, { lock: lockfilePath });
  }
  try {
    const result = await body();
    if (compromised) throw asStepError("lock", compromised, { lock: lockfilePath });
    return result;
  } finally {
    await release().catch(() => undefined);
  }
}
