/**
 * The loader table: the environment variables that make a runtime load code
 * or configuration, or change how it does, each classified from that
 * runtime's own documentation (docs/design/captures.md, "Loader variables").
 *
 * Every row names its variable, the runtime that reads it, the document that
 * says so, and the kind of value it holds:
 *
 * - `path`: one file or directory the runtime reads as code or configuration
 *   (OPENSSL_CONF, BASH_ENV, NODE_EXTRA_CA_CERTS);
 * - `paths`: a list of them, with the characters that separate the entries
 *   (LD_PRELOAD, NODE_PATH, PYTHONPATH);
 * - `options`: command-line options, some of which name such files
 *   (NODE_OPTIONS); `syntax` names the grammar oats parses, and options
 *   without one cannot be checked;
 * - `code`: the value is code the runtime evaluates or a command it runs
 *   (PS4, PERL5DB): it can name any file, and oats cannot tell which;
 * - `name`: one file-name component the runtime joins to a directory of its
 *   own (PYTHONPLATLIBDIR);
 * - `switch`: changes how the runtime behaves, and names no file it reads as
 *   code or configuration (LD_BIND_NOW, NODE_TLS_REJECT_UNAUTHORIZED; a file
 *   it only writes, such as LD_DEBUG_OUTPUT, is a switch too);
 * - `inert`: documented by the runtime, but changes nothing it loads or
 *   executes (TZ, NO_COLOR). The only kind that is not a loader variable.
 *
 * A variable of a family (every `LD_*`, `PYTHON*`, `OPENSSL_*`, `DYLD_*`,
 * `GIT_CONFIG_*`) that has no row is `unknown`: a runtime may read it, and
 * oats cannot say what it names.
 *
 * What follows from a row (loader-paths.ts): every kind but `inert` is a
 * loader variable, pinned only when the spec lists it under `loaderEnv`; a
 * path a `path`, `paths` or `options` value names must lie inside the
 * executable tree and is rewritten to the run copy at dispatch; `code`,
 * `unknown` and `options` without a syntax are refused.
 *
 * test/loader-env.test.ts runs `node --help`, `python3 --help-env` and reads
 * ld.so(8) and openssl-env(7) on the machine, and fails when one of them lists
 * a variable this table does not classify.
 */

export const LOADER_VALUE_KINDS = ["path", "paths", "options", "code", "name", "switch", "inert", "unknown"] as const;
export type LoaderValueKind = (typeof LOADER_VALUE_KINDS)[number];

export interface LoaderVariable {
  readonly name: string;
  /** The runtime that reads it. */
  readonly runtime: string;
  /** The document that says what it does. */
  readonly source: string;
  readonly kind: LoaderValueKind;
  /** `paths`: the characters that separate entries; the first joins them again when they are rewritten. */
  readonly separators?: string;
  /** Text the runtime expands inside the value (ld.so's `$ORIGIN`, a shell's `$` and backquote, NLSPATH's `%N`). */
  readonly expands?: readonly string[];
  /** `options`: the grammar oats parses (node-options.ts). */
  readonly syntax?: "node-options";
}

const LD_SO = "ld.so(8), ENVIRONMENT";
const LD_SO_SECURE = "ld.so(8), ENVIRONMENT, Secure-execution mode (the variables glibc strips)";
const NODE_HELP = "node --help, Environment variables";
const NODE_DOC = "Node.js documentation, Command-line API, Environment variables";
const OPENSSL_ENV = "openssl-env(7)";
const BASH = "bash(1), INVOCATION and Shell Variables";
const DASH = "dash(1), ENVIRONMENT; bash(1), Shell Variables (posix mode)";
const PYTHON_HELP = "python3 --help-env";
const PYTHON_MAN = "python3(1), ENVIRONMENT VARIABLES";
const PYTHON_DOC = "Python documentation, Command line and environment, Environment variables";
const PERLRUN = "perlrun(1), ENVIRONMENT";
const RUBY = "ruby(1), ENVIRONMENT";
const JAVA = "java(1), JDK_JAVA_OPTIONS; JVM Tool Interface, JAVA_TOOL_OPTIONS";
const GIT = "git(1), ENVIRONMENT VARIABLES";
const GIT_CONFIG = "git-config(1), ENVIRONMENT";
const DYLD = "dyld(1), ENVIRONMENT";

/** ld.so expands these in LD_PRELOAD, LD_LIBRARY_PATH and LD_AUDIT (ld.so(8), "Dynamic string tokens"). */
const LD_TOKENS = ["$"];
/** bash and dash subject BASH_ENV and ENV to parameter expansion and command substitution. */
const SHELL_TOKENS = ["$", "`"];

type Row = Omit<LoaderVariable, "name" | "runtime" | "source">;
const path: Row = { kind: "path" };
const list = (separators: string, expands?: readonly string[]): Row => ({
  kind: "paths",
  separators,
  ...(expands ? { expands } : {}),
});
const switchRow: Row = { kind: "switch" };
const code: Row = { kind: "code" };
const inert: Row = { kind: "inert" };
const unparsed: Row = { kind: "options" };

function rows(runtime: string, source: string, entries: Record<string, Row>): LoaderVariable[] {
  return Object.entries(entries).map(([name, row]) => ({ name, runtime, source, ...row }));
}

const TABLE: readonly LoaderVariable[] = [
  ...rows("glibc ld.so", LD_SO, {
    LD_ASSUME_KERNEL: switchRow,
    LD_BIND_NOW: switchRow,
    LD_LIBRARY_PATH: list(":;", LD_TOKENS),
    LD_PRELOAD: list(" :", LD_TOKENS),
    LD_TRACE_LOADED_OBJECTS: switchRow,
    LD_AUDIT: list(":", LD_TOKENS),
    LD_BIND_NOT: switchRow,
    LD_DEBUG: switchRow,
    LD_DEBUG_OUTPUT: switchRow,
    LD_DYNAMIC_WEAK: switchRow,
    LD_HWCAP_MASK: switchRow,
    // "Path where the binary is found": where $ORIGIN-relative libraries are loaded from.
    LD_ORIGIN_PATH: path,
    LD_POINTER_GUARD: switchRow,
    // Names an object already loaded, to profile it; the output is written.
    LD_PROFILE: switchRow,
    LD_PROFILE_OUTPUT: switchRow,
    LD_SHOW_AUXV: switchRow,
    LD_TRACE_PRELINKING: switchRow,
    LD_USE_LOAD_BIAS: switchRow,
    LD_VERBOSE: switchRow,
    LD_WARN: switchRow,
    LD_PREFER_MAP_32BIT_EXEC: switchRow,
  }),
  ...rows("glibc", LD_SO_SECURE, {
    // gconv-modules names the shared objects iconv loads.
    GCONV_PATH: list(":"),
    GETCONF_DIR: path,
    HOSTALIASES: path,
    LOCALDOMAIN: switchRow,
    LOCPATH: path,
    MALLOC_TRACE: switchRow,
    NIS_PATH: switchRow,
    // A template: %N, %L and the like are filled in by catopen(3).
    NLSPATH: list(":", ["%"]),
    RESOLV_HOST_CONF: path,
    RES_OPTIONS: switchRow,
    TMPDIR: inert,
    TZDIR: inert,
  }),
  ...rows("glibc", "glibc manual, Tunables", { GLIBC_TUNABLES: switchRow }),
  ...rows("Node.js", NODE_HELP, {
    FORCE_COLOR: inert,
    NO_COLOR: inert,
    NODE_DEBUG: switchRow,
    NODE_DEBUG_NATIVE: switchRow,
    NODE_DISABLE_COLORS: inert,
    NODE_EXTRA_CA_CERTS: path,
    NODE_NO_WARNINGS: switchRow,
    NODE_PATH: list(":"),
    NODE_PENDING_DEPRECATION: switchRow,
    NODE_PENDING_PIPE_INSTANCES: inert,
    NODE_PRESERVE_SYMLINKS: switchRow,
    NODE_REDIRECT_WARNINGS: switchRow,
    NODE_REPL_EXTERNAL_MODULE: path,
    NODE_REPL_HISTORY: switchRow,
    NODE_SKIP_PLATFORM_CHECK: switchRow,
    NODE_TLS_REJECT_UNAUTHORIZED: switchRow,
    NODE_V8_COVERAGE: switchRow,
    TZ: inert,
    UV_THREADPOOL_SIZE: inert,
  }),
  ...rows("Node.js", NODE_DOC, {
    NODE_OPTIONS: { kind: "options", syntax: "node-options" },
    NODE_ICU_DATA: path,
    // The directory of compiled code Node reads back.
    NODE_COMPILE_CACHE: path,
    NODE_DISABLE_COMPILE_CACHE: switchRow,
    NODE_TEST_CONTEXT: switchRow,
    NODE_USE_ENV_PROXY: switchRow,
    NODE_USE_SYSTEM_CA: switchRow,
    NODE_CHANNEL_FD: switchRow,
    NODE_UNIQUE_ID: switchRow,
    UV_USE_IO_URING: switchRow,
  }),
  ...rows("OpenSSL", OPENSSL_ENV, {
    CTLOG_FILE: path,
    // The openssl executable the rehash script and CA.pl run.
    OPENSSL: path,
    OPENSSL_CONF: path,
    OPENSSL_CONF_INCLUDE: path,
    // "A configuration option and filename" for CA.pl's req and ca: options oats does not parse.
    OPENSSL_CONFIG: unparsed,
    OPENSSL_ENGINES: path,
    OPENSSL_MALLOC_FD: switchRow,
    OPENSSL_MALLOC_FAILURES: switchRow,
    OPENSSL_MODULES: path,
    OPENSSL_TRACE: switchRow,
    OPENSSL_WIN32_UTF8: switchRow,
    RANDFILE: path,
    SSL_CERT_DIR: list(":"),
    SSL_CERT_FILE: path,
    // "Additional arguments for the tsget(1) command".
    TSGET: unparsed,
    OPENSSL_ia32cap: switchRow,
    OPENSSL_sparcv9cap: switchRow,
    OPENSSL_ppccap: switchRow,
    OPENSSL_armcap: switchRow,
    OPENSSL_s390xcap: switchRow,
    OPENSSL_riscvcap: switchRow,
    // Where OpenSSL's HTTP client sends requests; nothing is loaded.
    NO_PROXY: inert,
    HTTPS_PROXY: inert,
    HTTP_PROXY: inert,
  }),
  ...rows("bash", BASH, {
    BASH_ENV: { kind: "path", expands: SHELL_TOKENS },
    SHELLOPTS: switchRow,
    BASHOPTS: switchRow,
    // Expanded, command substitution included, before each traced command.
    PS4: code,
    PROMPT_COMMAND: code,
    BASH_LOADABLES_PATH: list(":"),
    BASH_XTRACEFD: switchRow,
    BASH_COMPAT: switchRow,
    INPUTRC: path,
  }),
  ...rows("POSIX sh, dash", DASH, { ENV: { kind: "path", expands: SHELL_TOKENS } }),
  ...rows("Python", PYTHON_HELP, {
    PYTHONSTARTUP: path,
    PYTHONPATH: list(":"),
    // <prefix> or <prefix>:<exec_prefix>
    PYTHONHOME: list(":"),
    PYTHONPLATLIBDIR: { kind: "name" },
    PYTHONCASEOK: switchRow,
    PYTHONUTF8: switchRow,
    PYTHONIOENCODING: switchRow,
    PYTHONFAULTHANDLER: switchRow,
    PYTHONHASHSEED: switchRow,
    PYTHONINTMAXSTRDIGITS: switchRow,
    PYTHONMALLOC: switchRow,
    PYTHONCOERCECLOCALE: switchRow,
    // A callable's dotted name: imported from sys.path, which the other rows keep inside the tree or the install.
    PYTHONBREAKPOINT: switchRow,
    PYTHONDEVMODE: switchRow,
    // Bytecode is read back from there.
    PYTHONPYCACHEPREFIX: path,
    PYTHONWARNDEFAULTENCODING: switchRow,
    PYTHONNODEBUGRANGES: switchRow,
    PYTHONDEBUG: switchRow,
    PYTHONDONTWRITEBYTECODE: switchRow,
    PYTHONINSPECT: switchRow,
    PYTHONNOUSERSITE: switchRow,
    PYTHONOPTIMIZE: switchRow,
    PYTHONSAFEPATH: switchRow,
    PYTHONUNBUFFERED: switchRow,
    PYTHONVERBOSE: switchRow,
    PYTHONWARNINGS: switchRow,
  }),
  ...rows("Python", PYTHON_MAN, {
    PYTHONMALLOCSTATS: switchRow,
    PYTHONASYNCIODEBUG: switchRow,
    PYTHONTRACEMALLOC: switchRow,
    PYTHONEXECUTABLE: switchRow,
    // The user site directory: its site-packages are imported.
    PYTHONUSERBASE: path,
    PYTHONPROFILEIMPORTTIME: switchRow,
    PYTHONTHREADDEBUG: switchRow,
    PYTHONDUMPREFS: switchRow,
  }),
  ...rows("Python", PYTHON_DOC, {
    PYTHONDUMPREFSFILE: switchRow,
    PYTHONLEGACYWINDOWSFSENCODING: switchRow,
    PYTHONLEGACYWINDOWSSTDIO: switchRow,
    PYTHONPERFSUPPORT: switchRow,
    PYTHON_PERF_JIT_SUPPORT: switchRow,
    PYTHON_CPU_COUNT: switchRow,
    PYTHON_FROZEN_MODULES: switchRow,
    PYTHON_COLORS: switchRow,
    PYTHON_BASIC_REPL: switchRow,
    PYTHON_HISTORY: switchRow,
    PYTHON_GIL: switchRow,
    PYTHON_JIT: switchRow,
    // A module name imported before site, from sys.path.
    PYTHON_PRESITE: switchRow,
  }),
  ...rows("Perl", PERLRUN, {
    PERL5LIB: list(":"),
    PERLLIB: list(":"),
    PERL5OPT: unparsed,
    PERL5DB: code,
  }),
  ...rows("Ruby", RUBY, { RUBYLIB: list(":"), RUBYOPT: unparsed }),
  ...rows("Java", JAVA, {
    JAVA_TOOL_OPTIONS: unparsed,
    _JAVA_OPTIONS: unparsed,
    JDK_JAVA_OPTIONS: unparsed,
    // "dir/*" names every jar of dir.
    CLASSPATH: list(":", ["*"]),
  }),
  ...rows("Git", GIT, { GIT_EXEC_PATH: path }),
  ...rows("Git", GIT_CONFIG, {
    GIT_CONFIG: path,
    GIT_CONFIG_GLOBAL: path,
    GIT_CONFIG_SYSTEM: path,
    GIT_CONFIG_NOSYSTEM: switchRow,
    GIT_CONFIG_COUNT: switchRow,
    // Configuration given inline: include.path names a file, core.fsmonitor a command.
    GIT_CONFIG_PARAMETERS: code,
  }),
  ...rows("macOS dyld", DYLD, {
    DYLD_INSERT_LIBRARIES: list(":"),
    DYLD_LIBRARY_PATH: list(":"),
    DYLD_FRAMEWORK_PATH: list(":"),
    DYLD_FALLBACK_LIBRARY_PATH: list(":"),
    DYLD_FALLBACK_FRAMEWORK_PATH: list(":"),
    DYLD_VERSIONED_LIBRARY_PATH: list(":"),
    DYLD_VERSIONED_FRAMEWORK_PATH: list(":"),
    DYLD_ROOT_PATH: list(":"),
    DYLD_IMAGE_SUFFIX: switchRow,
  }),
];

/** Rows that cover a numbered series of names. */
const PATTERNS: readonly { readonly pattern: RegExp; readonly row: LoaderVariable }[] = [
  {
    pattern: /^GIT_CONFIG_(KEY|VALUE)_[0-9]+$/,
    row: { name: "GIT_CONFIG_KEY_<n>, GIT_CONFIG_VALUE_<n>", runtime: "Git", source: GIT_CONFIG, kind: "code" },
  },
];

/** Families: a member without a row of its own is `unknown`. */
const FAMILIES: readonly { readonly prefix: string; readonly runtime: string; readonly source: string }[] = [
  { prefix: "LD_", runtime: "glibc ld.so", source: LD_SO },
  { prefix: "PYTHON", runtime: "Python", source: PYTHON_DOC },
  { prefix: "OPENSSL_", runtime: "OpenSSL", source: OPENSSL_ENV },
  { prefix: "GIT_CONFIG_", runtime: "Git", source: GIT_CONFIG },
  { prefix: "DYLD_", runtime: "macOS dyld", source: DYLD },
];

const BY_NAME = new Map(TABLE.map((row) => [row.name, row]));
if (BY_NAME.size !== TABLE.length) throw new Error("loader-env: a variable has two rows");

/** Every row of the table, in the order of its sources. */
export const LOADER_VARIABLES: readonly LoaderVariable[] = TABLE;

/** The row of `name`: its own, a pattern's, `unknown` for an unlisted member of a family, else null. */
export function loaderVariable(name: string): LoaderVariable | null {
  const row = BY_NAME.get(name);
  if (row !== undefined) return row;
  for (const { pattern, row: patternRow } of PATTERNS) if (pattern.test(name)) return { ...patternRow, name };
  const family = FAMILIES.find(({ prefix }) => name.startsWith(prefix));
  return family === undefined ? null : { name, runtime: family.runtime, source: family.source, kind: "unknown" };
}

/** Whether pinning `name` changes what an interpreter or the loader loads, or how: every row but an `inert` one. */
export function isLoaderEnvName(name: string): boolean {
  const row = loaderVariable(name);
  return row !== null && row.kind !== "inert";
}
