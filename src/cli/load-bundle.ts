import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Script, constants } from "node:vm";

/**
 * Runs the CLI bundle (dist/cli/bundle/oats.cjs, made by
 * scripts/bundle-cli.mjs) with the V8 code cache made when it was built.
 *
 * Why a script and a cache: compiling the bundle's JavaScript was the largest
 * part of what `oats verify` spent before its own work, and Node 20 has no
 * compile cache for modules (module.enableCompileCache is Node 22). A
 * vm.Script takes `cachedData`; V8 checks it against the source, its own
 * version and its flags, and a cache it rejects (another Node, other flags)
 * or a missing one costs only the compile it would have saved. The cache
 * ships with the code it belongs to and is never written at run time.
 */

export const BUNDLE_URL = new URL("./bundle/oats.cjs", import.meta.url);
export const CODE_CACHE_URL = new URL("./bundle/oats.cjs.cache", import.meta.url);

export interface LoadedBundle {
  readonly main: typeof import("./main.js").main;
  readonly script: Script;
}

function readCache(): Buffer | undefined {
  try {
    return readFileSync(CODE_CACHE_URL);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/** Compile and run the bundle; `cache: false` compiles without the cache (the build, making it). */
export function loadBundle(options: { cache?: boolean } = {}): LoadedBundle {
  const file = fileURLToPath(BUNDLE_URL);
  const source = readFileSync(file, "utf8");
  const cachedData = options.cache === false ? undefined : readCache();
  // The CommonJS wrapper, spelled the same by the build and every run: V8 keys the cache on this exact text.
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, {
    filename: file,
    ...(cachedData ? { cachedData } : {}),
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const module = { exports: {} as { main?: LoadedBundle["main"] } };
  (script.runInThisContext() as (...args: unknown[]) => void)(module.exports, createRequire(file), module, file, dirname(file));
  if (typeof module.exports.main !== "function") throw new Error(`${file} does not export main`);
  return { main: module.exports.main, script };
}
