import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { errnoCode } from "../core/index.js";
import {
  isInterrupted,
  noteRemoved,
  ensureStoreAt,
  inspectStoreAt,
  removeCreatedStore,
  resolveScope,
  EXTRACT_STORE,
  stagingName,
  removeTree,
  entryPresent,
} from "../retention/index.js";

/**
 * Where acquisition extracts archives (a package tarball, the tree of a git
 * commit) before the normal retention path copies the tree into its store:
 * `<scope>/.agents/extract/.staging-<host>-<pid>-<random>/`. The root is a
 * store root like the others (a real directory, the managed `.gitignore`);
 * each extraction gets its own staging-named directory, so `oats cleanup`
 * can tell a crashed extractor's leftovers from a live one's work.
 */
export const EXTRACT_ROOT: readonly string[] = EXTRACT_STORE;

/** How often to retry when a concurrent extractor removed the root between our ensure and our mkdir. */
const CREATE_ATTEMPTS = 3;

/**
 * Run `fn` with a fresh, empty extraction directory inside the scope. The
 * path to the root is inspected first (a symlinked or foreign component is
 * `invalid-artifact-store` before anything is written). The directory is
 * always removed afterwards, and so is every store directory this call
 * created, unless another extractor is using it: on success and on refusal
 * alike the scope keeps no trace of the extraction.
 */
export async function withExtractionDir<T>(scope: string, fn: (dir: string) => Promise<T>): Promise<T> {
  let failure: unknown = null;
  const realScope = resolveScope(scope);
  const { root } = inspectStoreAt(realScope, EXTRACT_ROOT);
  const created: string[] = [];
  let dir: string | null = null;
  try {
    for (let attempt = 1; dir === null; attempt += 1) {
      for (const path of ensureStoreAt(realScope, EXTRACT_ROOT)) if (!created.includes(path)) created.push(path);
      const candidate = join(root, stagingName());
      try {
        mkdirSync(candidate, { mode: 0o700 });
        dir = candidate;
      } catch (error) {
        // A concurrent extractor that created the root may remove it once its own work is done.
        if (errnoCode(error) !== "ENOENT" || attempt >= CREATE_ATTEMPTS) throw error;
      }
    }
    return await fn(dir);
  } catch (error) {
    failure = error;
    throw error;
  } finally {
    // An adopted tree was renamed away: only a directory still here is reported removed.
    if (dir !== null && failure !== null && isInterrupted(failure) && entryPresent(dir)) {
      await removeTree(dir);
      noteRemoved(failure, "extraction", dir);
    } else if (dir !== null) await removeTree(dir);
    removeCreatedStore(created, root);
  }
}
