import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { Script, constants } from "node:vm";

/**
 * Runs a CLI bundle (dist/cli/bundle/oats.cjs, or a hot command's own,
 * made by scripts/bundle-cli.mjs) with the V8 code cache made when it was built.
 *
 * Why a script and a cache: compiling the bundle's JavaScript was the largest
 * part of what `oats verify` spent before its own work, and Node 20 has no
 * compile cache for modules (module.enableCompileCache is Node 22). A
 * vm.Script takes `cachedData`; V8 checks it against the source, its own
 * version and its flags, and a cache it rejects (another Node, other flags)
 * or a missing one costs only the compile it would have saved. The cache
 * ships with the code it belongs to and is never written at run time.
 */

/**
 * The CommonJS wrapper, written around the bundle by the build
 * (scripts/bundle-cli.mjs) and not added here: concatenated at run time,
 * the wrapper and the 850 KB of source made a string V8 flattened into a
 * fresh copy before it could look up the code cache, some 200 page faults
 * on every start (docs/design/performance.md, "The CLI's start: bundles and code caches").
 */
export const BUNDLE_HEAD = "(function (exports, require, module, __filename, __dirname) {";
export const BUNDLE_TAIL = "\n})";

/**
 * Commands with a bundle of their own (src/cli/main-<command>.ts: the
 * program with that command alone), each with the code cache made by
 * running it. What a scheduler runs most starts without compiling,
 * deserializing or running the top level of the other forty commands and
 * their schemas: the verify bundle is about a third of the whole one, and a
 * verify of a one-file tree started 20 ms sooner (docs/design/performance.md,
 * "The CLI's start: bundles and code caches").
 */
export const FAST_COMMANDS = ["digest", "verify"] as const;
export type FastCommand = (typeof FAST_COMMANDS)[number];

/** The bundle of every command (no argument), or of `command` alone. */
export function bundleUrl(command?: FastCommand): URL {
  return new URL(`./bundle/oats${command === undefined ? "" : `-${command}`}.cjs`, import.meta.url);
}

/** The code cache made for that bundle, by running it. */
export function codeCacheUrl(command?: FastCommand): URL {
  return new URL(`${bundleUrl(command).href}.cache`);
}

/** Help lists the program's commands, which a command's own bundle does not hold: `-h`, `--help`, or `-h` among short
 * flags. */
const asksForHelp = (arg: string): boolean => arg === "--help" || /^-[^-]*h/.test(arg);

/**
 * The command `argv` will run, when it has a bundle of its own and that
 * bundle answers it exactly as the whole program would: the first word
 * that is neither an option nor --scope's value names it, and nothing asks
 * for help (the one output that lists the other commands). Anything else,
 * and any doubt, takes the whole program; an `oats verify` it takes is only
 * slower to start.
 */
export function fastCommandOf(argv: readonly string[]): FastCommand | undefined {
  let named: FastCommand | undefined;
  for (let index = 0; index < argv.length; index++) {
    const arg = argv[index]!;
    if (arg === "--") break;
    if (asksForHelp(arg)) return undefined;
    if (arg === "--scope") index += 1;
    else if (!arg.startsWith("-") && named === undefined) {
      if (!(FAST_COMMANDS as readonly string[]).includes(arg)) return undefined;
      named = arg as FastCommand;
    }
  }
  return named;
}

export interface LoadedBundle {
  readonly main: typeof import("./main.js").main;
  readonly script: Script;
  /** The bundle it ran. */
  readonly file: string;
}

/** The file's bytes, or undefined when there is no such file. */
function readIfPresent(url: URL): Buffer | undefined {
  try {
    return readFileSync(url);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw error;
  }
}

/**
 * Compile and run the bundle of `command` (fastCommandOf), or of every
 * command when there is none or its file is missing (a build from before
 * the command had one), with the code cache made for it; `cache: false`
 * compiles without one (the build, making them).
 */
export function loadBundle(options: { cache?: boolean; command?: FastCommand | undefined } = {}): LoadedBundle {
  const own = options.command === undefined ? undefined : readIfPresent(bundleUrl(options.command));
  const command = own === undefined ? undefined : options.command;
  const file = fileURLToPath(bundleUrl(command));
  // The build emits ASCII only (scripts/bundle-cli.mjs): latin1 is the same text, without a UTF-8 decode.
  const source = (own ?? readFileSync(file)).toString("latin1");
  const cachedData = options.cache === false ? undefined : readIfPresent(codeCacheUrl(command));
  if (!source.startsWith(BUNDLE_HEAD) || !source.endsWith(BUNDLE_TAIL))
    throw new Error(`${file} is not wrapped as the build wraps it; run npm run build`);
  const script = new Script(source, {
    filename: file,
    ...(cachedData ? { cachedData } : {}),
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const module = { exports: {} as { main?: LoadedBundle["main"] } };
  (script.runInThisContext() as (...args: unknown[]) => void)(
    module.exports,
    createRequire(file),
    module,
    file,
    dirname(file),
  );
  if (typeof module.exports.main !== "function") throw new Error(`${file} does not export main`);
  return { main: module.exports.main, script, file };
}
