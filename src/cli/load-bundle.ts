import {
  closeSync,
  constants as fsConstants,
  fstatSync,
  fsyncSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  renameSync,
  type Stats,
  unlinkSync,
  writeSync,
} from "node:fs";
import { createRequire } from "node:module";
import { dirname, isAbsolute, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Script, constants } from "node:vm";

/**
 * Runs a CLI bundle (dist/cli/bundle/oats.cjs, or a hot command's own,
 * made by scripts/bundle-cli.mjs) with a V8 code cache of it.
 *
 * Why a script and a cache: compiling the bundle's JavaScript was the largest
 * part of what `oats verify` spent before its own work, and Node 20 has no
 * compile cache for modules (module.enableCompileCache is Node 22). A
 * vm.Script takes `cachedData`; V8 checks it against its own version, its
 * flags and the source's length, and a cache it rejects or a missing one
 * costs only the compile it would have saved.
 *
 * A cache is what one V8 made of one bundle on one machine, so the package
 * ships none: the first run that finds none (or one V8 rejects) writes the
 * cache of what it compiled, after its command is done (saveCodeCache), and
 * later runs read it. A cache holds the functions the runs that wrote it
 * compiled, so the whole program's cache also grows: a command that is not
 * yet among those its cache names (CACHE_MAGIC's line) writes it again, with
 * what it took from the cache and what it compiled itself, once. It is
 * written to a new file that is synced and renamed into place, so a reader
 * sees a whole cache or none. Where
 * (codeCacheLocations): the package's own dist/code-cache/<node>/ when the
 * running user may write there, else the user's cache directory,
 * $XDG_CACHE_HOME (or ~/.cache)/oats-retention/<version>/<node>/, so a
 * read-only install still gets one. <node> is Node's version, platform,
 * architecture and, when there are any, a hash of the options node was
 * started with (V8 rejects a cache made under other flags), and the file is
 * named by the bundle and a digest of its text the build stamps into it
 * (V8 would take a cache of another text of the same length). A cache is
 * read only from a file that the running user or root owns and no one else
 * may write, in a directory the same holds for when it is written, and
 * nothing about it is trusted beyond what V8 checks. None of this prints
 * anything; every failure only costs the compile.
 */

/** Where a bundle's cache is read and written, in the order they are read. */
export interface CodeCacheLocation {
  readonly kind: "user" | "package";
  readonly dir: string;
}

export interface CodeCacheUse {
  /** `accepted`: V8 took it; `rejected`: V8 did not, or it is not a cache file (it is written again); `missing`: none
   * yet (written after the run); `off`: not looked for (loadBundle's `cache: false`, or a bundle without the build's
   * stamp). */
  readonly state: "accepted" | "rejected" | "missing" | "off";
  /** The file read, when one was. */
  readonly file?: string;
  /** The commands whose runs made it (commandNamed's names; "" for none: help, a usage error). */
  readonly commands?: readonly string[];
}

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
  /** The bundle it ran: of every command, or of `command` alone. */
  readonly file: string;
  readonly command?: FastCommand;
  readonly codeCache: CodeCacheUse;
  /** Where saveCodeCache writes, first choice first (none for a bundle without the build's stamp). */
  readonly writeTo: readonly { readonly kind: CodeCacheLocation["kind"]; readonly file: string }[];
  /** The command a command line names (main.ts's commandNamed), in the bundle of every command only. */
  readonly commandNamed?: (argv: readonly string[]) => string | null;
}

/**
 * The line the build writes right after BUNDLE_HEAD: the package version and
 * the first 16 hex digits of the SHA-256 of the bundle's text, which name its
 * code cache.
 */
export const STAMP_PREFIX = "//oats-bundle ";
const STAMP = /^\/\/oats-bundle ([0-9A-Za-z.+-]{1,64}) ([0-9a-f]{16})\n/;

/** The version and digest the build stamped into a bundle's text, if it did. */
export function bundleStamp(source: string): { version: string; digest: string } | undefined {
  const match = STAMP.exec(source.slice(BUNDLE_HEAD.length, BUNDLE_HEAD.length + 100));
  return match ? { version: match[1]!, digest: match[2]! } : undefined;
}

/** 32-bit FNV-1a, in hex: enough to keep apart the caches of different node options (V8 checks them itself). */
function fnv1a(text: string): string {
  let hash = 0x811c9dc5;
  for (let index = 0; index < text.length; index++) {
    hash ^= text.charCodeAt(index);
    hash = Math.imul(hash, 0x01000193);
  }
  return (hash >>> 0).toString(16).padStart(8, "0");
}

/** This process's part of a cache's path: Node's version, platform, architecture and options. */
export function nodeKey(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions = process.env.NODE_OPTIONS,
): string {
  const flags = execArgv.length === 0 && !nodeOptions ? "" : `-${fnv1a([...execArgv, nodeOptions ?? ""].join("\0"))}`;
  return `node-${process.version}-${process.platform}-${process.arch}${flags}`;
}

/** The user's cache directory: $XDG_CACHE_HOME when absolute (the XDG rule), else ~/.cache; none without a home. */
function userCacheHome(env: NodeJS.ProcessEnv): string | undefined {
  const xdg = env["XDG_CACHE_HOME"];
  if (xdg && isAbsolute(xdg)) return xdg;
  if (process.platform === "win32" && env["LOCALAPPDATA"]) return env["LOCALAPPDATA"];
  return env["HOME"] ? join(env["HOME"], ".cache") : undefined;
}

/** Where the caches of a bundle of `version` are read, in this order: the user's, then the package's. */
export function codeCacheLocations(version: string, env: NodeJS.ProcessEnv = process.env): CodeCacheLocation[] {
  const key = nodeKey();
  const home = userCacheHome(env);
  return [
    ...(home === undefined ? [] : [{ kind: "user" as const, dir: join(home, "oats-retention", version, key) }]),
    { kind: "package", dir: fileURLToPath(new URL(`../code-cache/${key}`, import.meta.url)) },
  ];
}

/** The cache's file name: the bundle's name and the digest of its text. */
export function codeCacheName(command: FastCommand | undefined, digest: string): string {
  return `oats${command === undefined ? "" : `-${command}`}-${digest}.cache`;
}

const uid = process.getuid?.();

/** Owned by this user or root, and writable by no one else (always, where there are no owners: Windows). */
function trusted(stat: Stats): boolean {
  return uid === undefined || ((stat.uid === uid || stat.uid === 0) && (stat.mode & 0o022) === 0);
}

/** Larger than any cache of these bundles: a file past it is not one. */
const MAX_CACHE_BYTES = 64 << 20;

/**
 * A cache file is this, the names of the commands whose runs made it as a
 * JSON array and a newline, then what V8's createCachedData gave.
 */
export const CACHE_MAGIC = "oats-code-cache 1 ";
/** Past this many names a cache no longer grows: a long list is typing errors, not commands. */
const MAX_CACHED_COMMANDS = 64;

/** A cache file's parts: the commands that made it and V8's data; undefined for a file that is not one. */
export function parseCache(file: Buffer): { commands: string[]; data: Buffer } | undefined {
  const end = file.indexOf(0x0a);
  if (end === -1 || end > 8192 || file.toString("latin1", 0, CACHE_MAGIC.length) !== CACHE_MAGIC) return undefined;
  try {
    const commands: unknown = JSON.parse(file.toString("latin1", CACHE_MAGIC.length, end));
    if (!Array.isArray(commands) || !commands.every((name) => typeof name === "string")) return undefined;
    return { commands, data: file.subarray(end + 1) };
  } catch {
    return undefined;
  }
}

/** The file at `file` when it is a regular file that can be trusted (trusted), else undefined; never throws. */
export function readCache(file: string): Buffer | undefined {
  let fd: number;
  try {
    fd = openSync(file, fsConstants.O_RDONLY | (fsConstants.O_NOFOLLOW ?? 0));
  } catch {
    return undefined;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile() || !trusted(stat) || stat.size === 0 || stat.size > MAX_CACHE_BYTES) return undefined;
    const data = Buffer.allocUnsafe(stat.size);
    let read = 0;
    while (read < data.length) {
      const got = readSync(fd, data, read, data.length - read, read);
      if (got === 0) return undefined;
      read += got;
    }
    return data;
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}

/** The file's bytes, or undefined when there is no such file. */
export function readIfPresent(url: URL): Buffer | undefined {
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
 * the command had one), with the code cache of it when there is one;
 * `cache: false` compiles without one.
 */
export function loadBundle(options: { cache?: boolean; command?: FastCommand | undefined } = {}): LoadedBundle {
  const own = options.command === undefined ? undefined : readIfPresent(bundleUrl(options.command));
  const command = own === undefined ? undefined : options.command;
  const file = fileURLToPath(bundleUrl(command));
  // The build emits ASCII only (scripts/bundle-cli.mjs): latin1 is the same text, without a UTF-8 decode.
  const source = (own ?? readFileSync(file)).toString("latin1");
  if (!source.startsWith(BUNDLE_HEAD) || !source.endsWith(BUNDLE_TAIL))
    throw new Error(`${file} is not wrapped as the build wraps it; run npm run build`);
  const stamp = options.cache === false ? undefined : bundleStamp(source);
  let cached: { commands: string[]; data: Buffer } | undefined;
  let cacheFile: string | undefined;
  let writeTo: LoadedBundle["writeTo"] = [];
  if (stamp !== undefined) {
    const name = codeCacheName(command, stamp.digest);
    const locations = codeCacheLocations(stamp.version);
    for (const { dir } of locations) {
      const found = readCache(join(dir, name));
      if (found !== undefined) {
        cacheFile = join(dir, name);
        cached = parseCache(found);
        break;
      }
    }
    // The package's directory first; where the cache read lies, that place first, so that the next run reads what
    // this one writes rather than the cache it replaces.
    writeTo = locations.map(({ kind, dir }) => ({ kind, file: join(dir, name) }));
    writeTo = [
      ...writeTo.filter(({ file }) => file === cacheFile),
      ...writeTo.filter(({ kind, file }) => kind === "package" && file !== cacheFile),
      ...writeTo.filter(({ kind, file }) => kind === "user" && file !== cacheFile),
    ];
  }
  const script = new Script(source, {
    filename: file,
    ...(cached ? { cachedData: cached.data } : {}),
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
  });
  const codeCache: CodeCacheUse =
    stamp === undefined
      ? { state: "off" }
      : cacheFile === undefined
        ? { state: "missing" }
        : cached === undefined || script.cachedDataRejected === true
          ? { state: "rejected", file: cacheFile }
          : { state: "accepted", file: cacheFile, commands: cached.commands };
  const module = { exports: {} as { main?: LoadedBundle["main"]; commandNamed?: LoadedBundle["commandNamed"] } };
  (script.runInThisContext() as (...args: unknown[]) => void)(
    module.exports,
    createRequire(file),
    module,
    file,
    dirname(file),
  );
  if (typeof module.exports.main !== "function") throw new Error(`${file} does not export main`);
  const { commandNamed } = module.exports;
  return {
    main: module.exports.main,
    script,
    file,
    codeCache,
    writeTo,
    ...(command === undefined ? {} : { command }),
    ...(typeof commandNamed === "function" ? { commandNamed } : {}),
  };
}

/** Writes `data` to `file` through a new file in its directory, synced and renamed into place, then removes the
 * caches of other texts of the same bundle there; false when the directory cannot be trusted. Throws on failure. */
function writeCache(file: string, data: Buffer[], shared: boolean): boolean {
  const dir = dirname(file);
  mkdirSync(dir, { recursive: true, mode: shared ? 0o755 : 0o700 });
  const stat = lstatSync(dir);
  if (!stat.isDirectory() || !trusted(stat)) return false;
  const name = file.slice(dir.length + 1);
  const partial = join(dir, `.${name}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`);
  const fd = openSync(partial, "wx", shared ? 0o644 : 0o600);
  try {
    try {
      let position = 0;
      for (const part of data)
        for (let written = 0; written < part.length; ) {
          const wrote = writeSync(fd, part, written, part.length - written, position);
          written += wrote;
          position += wrote;
        }
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(partial, file);
  } catch (error) {
    try {
      unlinkSync(partial);
    } catch {}
    throw error;
  }
  const others = new RegExp(`^${name.slice(0, -".cache".length - 17)}-[0-9a-f]{16}\\.cache$`);
  for (const entry of readdirSync(dir))
    if (entry !== name && others.test(entry))
      try {
        unlinkSync(join(dir, entry));
      } catch {}
  return true;
}

/**
 * After the command `argv` ran: when the run found no cache, or V8 rejected
 * the one it found, or (the bundle of every command) this command is not
 * among those the cache names, write the cache of what this run compiled
 * and took from the cache, to the first place of loaded.writeTo that takes
 * it (the package's directory is shared by whoever runs it: readable by
 * all; the user's is the user's alone). Never throws, never prints: a cache
 * not written costs a later run its compile.
 */
export function saveCodeCache(loaded: LoadedBundle, argv: readonly string[] = []): void {
  const { state, commands = [] } = loaded.codeCache;
  if (state === "off") return;
  let named: string = loaded.command ?? "";
  try {
    named = loaded.commandNamed?.(argv) ?? named;
  } catch {}
  const grows =
    state === "accepted" &&
    loaded.commandNamed !== undefined &&
    !commands.includes(named) &&
    commands.length < MAX_CACHED_COMMANDS;
  if (state === "accepted" && !grows) return;
  let data: Buffer;
  try {
    data = loaded.script.createCachedData();
  } catch {
    return;
  }
  const header = Buffer.from(`${CACHE_MAGIC}${JSON.stringify([...(grows ? commands : []), named])}\n`, "latin1");
  for (const { kind, file } of loaded.writeTo) {
    try {
      if (writeCache(file, [header, data], kind === "package")) return;
    } catch {}
  }
}
