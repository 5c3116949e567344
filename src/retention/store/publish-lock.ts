import fs from "node:fs";
import { properLockfile } from "./lockfile.js";

/** node:fs with the lock directory made 0700 whatever the umask. */
const lockFs = {
  ...fs,
  mkdir: (path: string, callback: (error: NodeJS.ErrnoException | null) => void) =>
    fs.mkdir(path, { mode: 0o700 }, callback),
};
import { join } from "node:path";
import { OatsError, asStepError, errnoCode } from "../../core/index.js";
import { LOCK_PREFIX } from "./layout.js";

/**
 * Cross-process locks, through proper-lockfile. It keeps a held lock fresh
 * and treats one abandoned by a killed process as stale after STALE_MS, so a
 * crash never wedges a store. A bounded wait ends in `busy`; any other
 * failure to take or keep the lock becomes the caller's own refusal.
 */

const STALE_MS = 10_000;
export const DEFAULT_LOCK_WAIT_MS = 15_000;

export interface FileLockOptions {
  /** The path the lock is about (it need not exist). */
  readonly target: string;
  /** The lock directory proper-lockfile creates. */
  readonly lockfilePath: string;
  readonly waitMs: number;
  /** First retry delay; retries back off from it by `factor` up to `maxTimeout`. */
  readonly minTimeout: number;
  readonly maxTimeout: number;
  readonly factor: number;
  /** What a failure to take or keep the lock (other than a wait that ran out) becomes. */
  readonly failure: (error: unknown) => OatsError;
}

/**
 * Run `body` holding the lock. `stillHeld()` throws the caller's failure if
 * the lock was compromised meanwhile (its refresh failed or it was taken over).
 */
export async function withFileLock<T>(
  options: FileLockOptions,
  body: (stillHeld: () => void) => T | Promise<T>,
): Promise<T> {
  let compromised: Error | null = null;
  let release: () => Promise<void>;
  // Every retry waits at least minTimeout, so waitMs / minTimeout retries
  // always outlast waitMs and maxRetryTime is what ends the wait.
  const retries = Math.max(1, Math.ceil(options.waitMs / options.minTimeout));
  const common = {
    // proper-lockfile makes its lock directory with mkdir's default 0777, which a umask of 000 leaves other-writable.
    fs: lockFs,
    realpath: false,
    lockfilePath: options.lockfilePath,
    stale: STALE_MS,
    onCompromised: (error: Error) => {
      compromised = error;
    },
  };
  try {
    // One attempt first: proper-lockfile retries every error, so a permanent
    // one (EROFS, EACCES, ENOTDIR) would otherwise be retried for the whole
    // wait. Only a lock held by someone else is worth waiting for.
    try {
      release = await properLockfile().lock(options.target, { ...common, retries: 0 });
    } catch (error) {
      if (errnoCode(error) !== "ELOCKED") throw error;
      release = await properLockfile().lock(options.target, {
        ...common,
        retries: {
          retries,
          factor: options.factor,
          minTimeout: options.minTimeout,
          maxTimeout: options.maxTimeout,
          maxRetryTime: options.waitMs,
          randomize: true,
        },
      });
    }
  } catch (error) {
    if (errnoCode(error) === "ELOCKED") {
      throw new OatsError(
        "busy",
        `another process holds the lock on ${options.target}; gave up after ${options.waitMs} ms`,
        {
          lock: options.lockfilePath,
          waitedMs: options.waitMs,
        },
      );
    }
    throw options.failure(error);
  }
  try {
    return await body(() => {
      if (compromised) throw options.failure(compromised);
    });
  } finally {
    await release().catch(() => undefined);
  }
}

/** The lock on one revision name, held only around the final check-and-rename. */
export function withRevisionLock<T>(
  parent: string,
  revisionName: string,
  waitMs: number,
  body: () => Promise<T>,
): Promise<T> {
  const lockfilePath = join(parent, `${LOCK_PREFIX}${revisionName}`);
  return withFileLock(
    {
      target: join(parent, revisionName),
      lockfilePath,
      waitMs,
      minTimeout: 20,
      maxTimeout: 250,
      factor: 1.5,
      failure: (error) => asStepError("lock", error, { lock: lockfilePath }),
    },
    async (stillHeld) => {
      const result = await body();
      stillHeld();
      return result;
    },
  );
}
