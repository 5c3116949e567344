// @ts-check
/**
 * The Node module-resolution guard of a dispatched run (docs/design/captures.md,
 * "Running only what was verified"). Dispatch preloads it into a Node entry
 * point with `--import <this file's URL>?root=<run copy>` (and, through
 * NODE_OPTIONS, into any Node the entry starts), so that module resolution
 * cannot reach code outside the verified run copy:
 *
 * - CommonJS: Module._resolveFilename is wrapped; a resolved file whose real
 *   path lies outside the run copy is refused (builtins pass).
 * - ESM: a resolve hook, registered with module.register(), refuses a
 *   `file:` URL whose real path lies outside the run copy (`node:`, `data:`
 *   pass).
 *
 * A refusal is an Error with code ERR_OATS_RUN_GUARD; uncaught, the child
 * exits non-zero. This is a guard against loading unverified code by module
 * resolution (a planted `<scope>/node_modules/x`), not a sandbox for the
 * verified code itself: that code was approved, and could undo the guard.
 *
 * Plain JavaScript with no dependencies: it runs in the child, before any
 * code of the tree, from the installed package (never from the run copy).
 */
import { realpathSync } from "node:fs";
import Module, { isBuiltin, register } from "node:module";
import { fileURLToPath } from "node:url";

const here = new URL(import.meta.url);
const root = here.searchParams.get("root");
if (!root?.startsWith("/")) throw new Error(`oats run guard: no run root in ${here.href}`);
const rootPrefix = root.endsWith("/") ? root : `${root}/`;
/** This file: imported twice when both argv and NODE_OPTIONS name it, the second time after the hook is in place. */
const self = real(fileURLToPath(here));

/** @param {string} path */
function inside(path) {
  return path === root || path.startsWith(rootPrefix);
}

/** The real path; a path that cannot be resolved is judged as spelled. @param {string} path */
function real(path) {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/** @param {string} request @param {string} resolved */
function refusal(request, resolved) {
  const error = new Error(
    `oats run guard: ${JSON.stringify(request)} resolves outside the verified run copy ${root}: ${resolved}`,
  );
  Object.assign(error, { code: "ERR_OATS_RUN_GUARD", request, resolved, root });
  return error;
}

/**
 * ESM resolve hook (runs in the loader's hooks thread).
 * @param {string} specifier
 * @param {unknown} context
 * @param {(specifier: string, context: unknown) => Promise<{ url: string }>} nextResolve
 */
export async function resolve(specifier, context, nextResolve) {
  const result = await nextResolve(specifier, context);
  if (result.url.startsWith("file:")) {
    const path = real(fileURLToPath(result.url));
    if (!inside(path) && path !== self) throw refusal(specifier, path);
  }
  return result;
}

// In the hooks thread this module only provides `resolve`; everything below
// installs the guard in the thread that runs the entry point.
if (!here.searchParams.has("hooks")) {
  /** @type {any} */
  const cjs = Module;
  const original = cjs._resolveFilename;
  cjs._resolveFilename = function guardedResolveFilename(
    /** @type {string} */ request,
    /** @type {unknown[]} */ ...rest
  ) {
    const resolved = original.call(this, request, ...rest);
    if (typeof resolved !== "string" || isBuiltin(resolved)) return resolved;
    const path = real(resolved);
    if (!inside(path)) throw refusal(request, path);
    return resolved;
  };
  // HOME/.node_modules, NODE_PATH and the prefix's lib/node: never inside the copy.
  if (Array.isArray(cjs.globalPaths))
    cjs.globalPaths.splice(0, cjs.globalPaths.length, ...cjs.globalPaths.filter(inside));
  const hooks = new URL(here.href);
  hooks.searchParams.set("hooks", "1");
  register(hooks.href);
}
