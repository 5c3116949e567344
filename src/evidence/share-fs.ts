import { closeSync, constants, lstatSync, mkdirSync, openSync } from "node:fs";
import { OatsError, errnoCode } from "../core/index.js";
import { inDirectory } from "../retention/index.js";

/** The file-system steps of the `dir:` transport (transport-dir.ts) that its put and its read-back share. */

export const RUNS_DIR = "runs";
export const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/**
 * O_DIRECTORY|O_NOFOLLOW on a symlink fails with ENOTDIR on Linux (ELOOP
 * elsewhere): look at the name itself to say which it was.
 */
function isSymlinkAt(at: string): boolean {
  try {
    return lstatSync(at).isSymbolicLink();
  } catch {
    return false;
  }
}

export function directoryErrno(error: unknown, at: string): string | undefined {
  const errno = errnoCode(error);
  return errno === "ENOTDIR" && isSymlinkAt(at) ? "ELOOP" : errno;
}

export function shareError(
  share: string,
  what: string,
  error: unknown,
  details: Record<string, unknown> = {},
  at?: string,
): OatsError {
  const errno = at === undefined ? errnoCode(error) : directoryErrno(error, at);
  if (errno === "ELOOP") {
    return new OatsError(
      "invalid-artifact-store",
      `the share's ${what} is a symlink, refusing to follow it: ${share}`,
      { to: `dir:${share}`, component: what, reason: "symlink", ...details },
    );
  }
  if (errno === "ENOTDIR") {
    return new OatsError("invalid-artifact-store", `the share's ${what} is not a directory: ${share}`, {
      to: `dir:${share}`,
      component: what,
      reason: "not-a-directory",
      ...details,
    });
  }
  if (error instanceof OatsError) return error;
  return new OatsError(
    "internal-error",
    `writing to the share ${share} failed at ${what}: ${error instanceof Error ? error.message : String(error)}`,
    { to: `dir:${share}`, component: what, ...(errno ? { errno } : {}), ...details },
    { cause: error },
  );
}

export function closeQuietly(fd: number | null): void {
  if (fd !== null) {
    try {
      closeSync(fd);
    } catch {
      // Already closed or never opened: nothing to release.
    }
  }
}

/** The share root: the operator's path, followed like any path the operator names. */
export function openShareRoot(share: string): number {
  return openSync(share, constants.O_RDONLY | constants.O_DIRECTORY);
}

/** `runs/` inside the open share, created when `create`; null when absent and not created. */
export function openShareRuns(share: string, shareFd: number, create: boolean): number | null {
  const at = inDirectory(shareFd, share, RUNS_DIR);
  if (create) {
    try {
      mkdirSync(at, { mode: 0o755 });
    } catch (error) {
      if (errnoCode(error) !== "EEXIST") throw shareError(share, RUNS_DIR, error);
    }
  }
  try {
    return openSync(at, DIRECTORY_FLAGS);
  } catch (error) {
    if (errnoCode(error) === "ENOENT" && !create) return null;
    throw shareError(share, RUNS_DIR, error, {}, at);
  }
}
