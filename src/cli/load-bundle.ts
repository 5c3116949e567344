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

/**
 * The CommonJS wrapper, written around the bundle by the build
 * (scripts/bundle-cli.mjs) and not added here: concatenated at run time,
 * the wrapper and the 850 KB of source made a string V8 flattened into a
 * fresh copy before it could look up the code cache, some 200 page faults
 * on every start (docs/design/performance.md, "Issue 13: the twentieth session").
 */
export const BUNDLE_HEAD = "(function (exports, require, module, __filename, __dirname) {";
export const BUNDLE_TAIL = "\n})";

/**
 * Commands with a code cache of their own, made by running only them: what
 * a scheduler runs most starts with a cache that holds little else (the
 * digest's is about half the size of the cache made by every command), which
 * is less to read and deserialize on every start.
 */
export const COMMAND_CACHES = ["digest", "verify"] as const;
export type CachedCommand = (typeof COMMAND_CACHES)[number];

/** The cache made by every command (no argument), or by `command` alone. */
export function codeCacheUrl(command?: CachedCommand): URL {
  return new URL(`./bundle/oats.cjs${command === undefined ? "" : `.${command}`}.cache`, import.meta.url);
}

/**
 * The command `argv` will run, guessed before the parser is loaded, when it
 * has a cache of its own: the first word that is neither an option nor
 * --scope's value. A wrong guess costs only time: any cache fits the
 * bundle, and V8 compiles what a cache lacks.
 */
export function cachedCommandOf(argv: readonly string[]): CachedCommand | undefined {
  for (let index = 0; index < argv.length; index++) {
    const arg = argv[index]!;
    if (arg === "--") return undefined;
    if (arg === "--scope") index += 1;
    else if (!arg.startsWith("-")) return (COMMAND_CACHES as readonly string[]).includes(arg) ? (arg as CachedCommand) : undefined;
  }
  return undefined;
}

export interface LoadedBundle {
  readonly main: typeof import("./main.js").main;
  readonly script: Script;
}

function readCache(url: URL): Buffer | undefined {
  try {
    return readFileSync(url);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/**
 * Compile and run the bundle, with the cache of `command` (cachedCommandOf)
 * or else the one made by every command; `cache: false` compiles without a
 * cache (the build, making them).
 */
export function loadBundle(options: { cache?: boolean; command?: CachedCommand | undefined } = {}): LoadedBundle {
  const file = fileURLToPath(BUNDLE_URL);
  // The build emits ASCII only (scripts/bundle-cli.mjs): latin1 is the same text, without a UTF-8 decode.
  const source = readFileSync(file, "latin1");
  const cachedData = options.cache === false ? undefined : ((options.command && readCache(codeCacheUrl(options.command))) ?? readCache(codeCacheUrl()));
  if (!source.startsWith(BUNDLE_HEAD) || !source.endsWith(BUNDLE_TAIL)) throw new Error(`${file} is not wrapped as the build wraps it; run npm run build`);
  const script = new Script(source, {
    filename: file,
    ...(cachedData ? { cachedData } : {}),
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const module = { exports: {} as { main?: LoadedBundle["main"] } };
  (script.runInThisContext() as (...args: unknown[]) => void)(module.exports, createRequire(file), module, file, dirname(file));
  if (typeof module.exports.main !== "function") throw new Error(`${file} does not export main`);
  return { main: module.exports.main, script };
}
