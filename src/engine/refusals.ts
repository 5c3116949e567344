import { OatsError, errnoCode } from "../core/index.js";

/**
 * The refusals of a read or a walk that met a tree other than the one it
 * listed, or could not read it: `invalid-artifact` with
 * `reason: changed-while-reading` (or `path-too-long`, `unreadable`), and
 * `internal-error` for a failure nobody can act on from the tree.
 */

/** A file that was not the same after its read as before it (`what`: inode, size, mtime, ctime, short read, ...). */
export function changed(path: string, what: string): OatsError {
  return new OatsError("invalid-artifact", `file changed while it was read (${what}): ${path}`, {
    path,
    reason: "changed-while-reading",
    changed: what,
  });
}

export function changedOrUnreadable(error: unknown, path: string): OatsError {
  const code = errnoCode(error);
  if (code === "ENOENT" || code === "ENOTDIR" || code === "ELOOP" || code === "EINVAL") {
    return new OatsError(
      "invalid-artifact",
      `tree changed while it was read: ${path}`,
      { path, reason: "changed-while-reading", errno: code },
      { cause: error },
    );
  }
  if (code === "ENAMETOOLONG") {
    return new OatsError(
      "invalid-artifact",
      `path too long to open: ${path.length <= 256 ? path : `${path.slice(0, 256)}...`}`,
      { path: path.slice(0, 256), reason: "path-too-long", errno: code },
      { cause: error },
    );
  }
  if (code === "EACCES" || code === "EPERM") {
    return new OatsError(
      "invalid-artifact",
      `cannot read ${path}: permission denied`,
      { path, reason: "unreadable", errno: code },
      { cause: error },
    );
  }
  return new OatsError(
    "internal-error",
    `reading ${path} failed: ${error instanceof Error ? error.message : String(error)}`,
    { step: "read", path, errno: code },
    { cause: error },
  );
}
