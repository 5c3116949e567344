import { closeSync, constants, existsSync, fstatSync, openSync, readlinkSync } from "node:fs";
import { OatsError } from "../core/index.js";
import { openChildNatively, type OpenedDirectory } from "./native-directories.js";
import { changedOrUnreadable } from "./refusals.js";

/**
 * Directories opened so that no swap can redirect them. O_NOFOLLOW guards
 * only the last component of a path, so a directory inside the tree swapped
 * for a symlink between the listing and a read would take a path-based walk
 * outside the tree (to anything the retaining user can read). On Linux every
 * directory is therefore opened relative to its already-open parent, through
 * /proc/self/fd/<parent>/<name> with O_DIRECTORY|O_NOFOLLOW (or a real
 * openat from the addon: native-directories.ts): that is openat()
 * semantics, so each directory reached is really the child of the one above
 * it, back to the root. The walk (src/retention/digest/walk.ts) lists
 * directories and reads symlinks through such descriptors; the reads open
 * the directories again the same way (directory-cursor.ts) and each file
 * inside its directory's descriptor. Elsewhere both fall back to paths.
 */

/** Whether /proc/self/fd gives openat() semantics here; without it the walk uses paths. */
export const DIRECTORY_FDS = process.platform === "linux" && existsSync("/proc/self/fd");
const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

/**
 * /proc/<pid>/fd rather than /proc/self/fd: the kernel then need not resolve
 * the `self` link on every open, which measurably costs over twenty
 * thousand files. The descriptor table is the process's, shared by its
 * threads, so the pid is right for any of them.
 */
const FD_DIR = `/proc/${process.pid}/fd`;

/** The path of `name` inside the open directory `fd` (or under `absolute` without /proc). */
export function inDirectory(fd: number, absolute: string, name: string): string {
  return DIRECTORY_FDS ? `${FD_DIR}/${fd}/${name}` : `${absolute}/${name}`;
}

/** A directory's own path for listing it: its descriptor, never the path it was found by. */
export function listingPath(fd: number, absolute: string): string {
  return DIRECTORY_FDS ? `${FD_DIR}/${fd}` : absolute;
}

/**
 * The root is opened by its path, which the caller resolved (realpath) or
 * built from resolved parts. O_NOFOLLOW guards its last component only: a
 * directory above it swapped for a symlink in the meantime would open
 * something elsewhere. The kernel's name for what was opened must therefore
 * be the path asked for.
 */
export function openRoot(absolute: string): { fd: number; dev: number; ino: number; mode: number } {
  const opened = openDirectory(absolute, "");
  if (!DIRECTORY_FDS) return opened;
  let actual: string;
  try {
    actual = readlinkSync(`${FD_DIR}/${opened.fd}`);
  } catch (error) {
    closeSync(opened.fd);
    throw changedOrUnreadable(error, ".");
  }
  if (actual !== absolute) {
    closeSync(opened.fd);
    throw new OatsError("invalid-artifact", `tree root changed while it was read: ${absolute} opened as ${actual}`, {
      path: ".",
      root: absolute,
      opened: actual,
      reason: "changed-while-reading",
      changed: "root",
    });
  }
  return opened;
}

/**
 * Open a directory without following a symlink at its own name: the root by
 * its path (see openRoot), every other one inside its parent's descriptor.
 * Returns the descriptor and what fstat says of it.
 */
function openDirectory(at: string, path: string): { fd: number; dev: number; ino: number; mode: number } {
  let fd: number;
  try {
    fd = openSync(at, DIRECTORY_FLAGS);
  } catch (error) {
    throw changedOrUnreadable(error, path || ".");
  }
  try {
    const stats = fstatSync(fd);
    return { fd, dev: stats.dev, ino: stats.ino, mode: stats.mode };
  } catch (error) {
    closeSync(fd);
    throw changedOrUnreadable(error, path || ".");
  }
}

/**
 * A child directory opened inside its parent's descriptor without following
 * a symlink at its name, and its fstat: natively where the addon loaded
 * (native-directories.ts), else through the /proc path.
 */
export function openChildDirectory(
  parentFd: number,
  parentAbsolute: string,
  name: string,
  path: string,
): OpenedDirectory {
  let opened;
  try {
    opened = openChildNatively(parentFd, name);
  } catch (error) {
    throw changedOrUnreadable(error, path);
  }
  return opened ?? openDirectory(inDirectory(parentFd, parentAbsolute, name), path);
}
