import {
  closeSync,
  fstatSync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmdirSync,
  unlinkSync,
  constants,
} from "node:fs";
import { join, resolve } from "node:path";
import { OatsError, errnoCode } from "../../core/index.js";
import type { ArtifactKind } from "./ids.js";
import { writeStagedFile } from "./files.js";
import { MANAGED_GITIGNORE, storeComponents } from "./layout.js";

/**
 * The store's directories. Each component must be a real directory, never a
 * symlink or a file, and each store root carries a managed `.gitignore` of
 * exactly "*\n". Inspection is read-only, so a request can be refused before
 * anything is created; `ensure*` creates what is missing, never following a
 * symlink.
 */

type ComponentState = "directory" | "missing";

function componentState(path: string): ComponentState {
  let stats;
  try {
    stats = lstatSync(path);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return "missing";
    throw new OatsError(
      "invalid-artifact-store",
      `cannot inspect store component ${path}: ${errnoCode(error) ?? String(error)}`,
      { path },
    );
  }
  if (stats.isSymbolicLink())
    throw new OatsError("invalid-artifact-store", `store component is a symlink, refusing to follow it: ${path}`, {
      path,
      reason: "symlink",
    });
  if (!stats.isDirectory())
    throw new OatsError("invalid-artifact-store", `store component is not a directory: ${path}`, {
      path,
      reason: "not-a-directory",
    });
  return "directory";
}

/**
 * The scope must exist as a directory; it is resolved once, so a scope reached
 * through a symlink is fine. An absent scope is `artifact-not-found` (the
 * contract's "absent scope, store or revision"), for readers and creators
 * alike: oats never creates the scope, so a retain into a mistyped --scope is
 * refused the same way a verify is. A scope that exists but cannot be used (a
 * file, unreadable) is `invalid-artifact-store`.
 */
export function resolveScope(scope: string): string {
  let resolved: string;
  try {
    resolved = realpathSync(scope);
  } catch (error) {
    const errno = errnoCode(error);
    if (errno === "ENOENT" || errno === "ENOTDIR") {
      throw new OatsError("artifact-not-found", `scope does not exist: ${scope}`, {
        scope,
        errno,
        reason: "scope-missing",
      });
    }
    throw new OatsError("invalid-artifact-store", `cannot resolve scope ${scope}: ${errno ?? String(error)}`, {
      scope,
      errno,
    });
  }
  if (!lstatSync(resolved).isDirectory())
    throw new OatsError("invalid-artifact-store", `scope is not a directory: ${scope}`, {
      scope,
      reason: "scope-not-a-directory",
    });
  return resolved;
}

/**
 * Read through one descriptor: a publication that fails takes back the store
 * root it created, .gitignore first (removeCreatedStore), so a name that was
 * there for lstat can be gone for the read. Missing at the open is
 * "missing", whenever it went.
 */
function checkGitignore(root: string): "ok" | "missing" {
  const path = join(root, ".gitignore");
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const errno = errnoCode(error);
    if (errno === "ENOENT") return "missing";
    if (errno === "ELOOP")
      throw new OatsError("invalid-artifact-store", `managed .gitignore is not a regular file: ${path}`, {
        path,
        reason: "gitignore-not-a-file",
      });
    throw error;
  }
  let bytes: Buffer;
  try {
    if (!fstatSync(fd).isFile())
      throw new OatsError("invalid-artifact-store", `managed .gitignore is not a regular file: ${path}`, {
        path,
        reason: "gitignore-not-a-file",
      });
    bytes = readFileSync(fd);
  } finally {
    closeSync(fd);
  }
  if (bytes.toString("latin1") !== MANAGED_GITIGNORE) {
    throw new OatsError("invalid-artifact-store", `managed .gitignore has other bytes than "*\\n": ${path}`, {
      path,
      reason: "gitignore-bytes",
      actual: bytes.toString("utf8").slice(0, 200),
    });
  }
  return "ok";
}

/**
 * Read-only check of the path from the scope to `<store>/<extra...>`. Returns
 * whether everything exists. Refuses a symlinked or non-directory component
 * and a foreign `.gitignore` wherever they are met.
 */
export function inspectStore(
  scope: string,
  kind: ArtifactKind,
  extra: readonly string[] = [],
): { root: string; complete: boolean } {
  return inspectStoreAt(scope, storeComponents(kind), extra);
}

/** inspectStore for any store root below the scope (`.agents/resolutions`, say). */
export function inspectStoreAt(
  scope: string,
  rootComponents: readonly string[],
  extra: readonly string[] = [],
): { root: string; complete: boolean } {
  const root = resolve(scope, ...rootComponents);
  let path = scope;
  for (const [index, component] of [...rootComponents, ...extra].entries()) {
    path = join(path, component);
    if (componentState(path) === "missing") return { root, complete: false };
    // A root without its .gitignore is completed by ensureStore; one with other bytes is refused here.
    if (index === rootComponents.length - 1) checkGitignore(path);
  }
  return { root, complete: true };
}

/**
 * Create a directory unless it exists; true when this call created it. The
 * mode is explicit, 0755: never group- or other-writable, whatever the umask
 * (a umask only takes bits away).
 */
export function ensureDirectory(path: string): boolean {
  if (componentState(path) === "directory") return false;
  let created = true;
  try {
    mkdirSync(path, { mode: 0o755 });
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") throw error;
    created = false;
  }
  // A concurrent creator may have won, or swapped in something else: look again.
  componentState(path);
  return created;
}

/**
 * Atomically create the managed .gitignore: write a staged file, fsync it,
 * then link() it into place, which never replaces. Readers therefore see no
 * file or the whole file, never a half-written one, and no lock is needed.
 */
export function ensureGitignore(root: string): void {
  if (checkGitignore(root) === "ok") return;
  const staged = writeStagedFile(root, ".gitignore", MANAGED_GITIGNORE);
  try {
    linkSync(staged, join(root, ".gitignore"));
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") throw error;
  } finally {
    unlinkSync(staged);
  }
  checkGitignore(root);
  fsyncDirectory(root);
}

export function fsyncDirectory(path: string): void {
  const fd = openSync(path, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Create the store down to `<store>/<extra...>`; the .gitignore comes before
 * any payload directory. Returns the directories this call created, parents
 * first, so a publication that fails can take back exactly what it added.
 */
export function ensureStore(scope: string, kind: ArtifactKind, extra: readonly string[] = []): string[] {
  return ensureStoreAt(scope, storeComponents(kind), extra);
}

/** ensureStore for any store root below the scope. */
export function ensureStoreAt(
  scope: string,
  rootComponents: readonly string[],
  extra: readonly string[] = [],
): string[] {
  const created: string[] = [];
  let path = scope;
  for (const component of rootComponents) {
    path = join(path, component);
    if (ensureDirectory(path)) created.push(path);
  }
  ensureGitignore(path);
  for (const component of extra) {
    path = join(path, component);
    if (ensureDirectory(path)) created.push(path);
  }
  return created;
}

/**
 * Take back the directories a failed publication created, deepest first,
 * stopping at the first that is no longer empty (another publisher is using
 * it). A store root goes only when its managed .gitignore is all it holds; if
 * a concurrent publisher slips a key in after the .gitignore was removed, the
 * .gitignore is put back before we stop.
 */
export function removeCreatedStore(created: readonly string[], storeRootPath: string): void {
  for (const dir of [...created].reverse()) {
    try {
      if (dir === storeRootPath) {
        const names = readdirSync(dir);
        if (names.length !== 1 || names[0] !== ".gitignore") return;
        unlinkSync(join(dir, ".gitignore"));
        try {
          rmdirSync(dir);
        } catch (error) {
          ensureGitignore(dir);
          throw error;
        }
      } else {
        rmdirSync(dir);
      }
    } catch {
      return;
    }
  }
}
