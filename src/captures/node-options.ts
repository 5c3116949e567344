/**
 * NODE_OPTIONS as Node reads it: how the value splits into options, and which
 * options name a file Node reads as code or configuration. The loader table
 * (loader-env.ts) names this grammar for NODE_OPTIONS; loader-paths.ts checks
 * and rewrites the files it finds.
 *
 * Splitting follows Node's own parser (ParseNodeOptionsEnvVar in src/node.cc,
 * documented under NODE_OPTIONS in the Command-line API): arguments are
 * separated by spaces outside double quotes; a double quote opens or closes a
 * quoted part and is dropped; inside quotes a backslash takes the next
 * character literally; outside quotes it is an ordinary character.
 *
 * Every option Node accepts in NODE_OPTIONS (`process.allowedNodeEnvironmentFlags`,
 * and `node --help` for what each takes) has a row, by what its value is:
 *
 * - `module`: a module Node loads before the entry (`--require`, `--import`,
 *   `--loader`, `--test-reporter`);
 * - `path`: a file or directory Node reads as code or configuration
 *   (`--openssl-config`, `--icu-data-dir`, `--snapshot-blob`,
 *   `--experimental-policy`, `--env-file`);
 * - `output`: a file or directory Node only writes (`--redirect-warnings`,
 *   `--report-directory`, `--tls-keylog`);
 * - `value`: a value that names no file (`--title`, `--conditions`,
 *   `--max-old-space-size`);
 * - `optional`: a value given only after `=`, naming no file (`--inspect`);
 * - `flag`: no value (the `--no-` form of a flag or an `optional` is a flag).
 *
 * An option without a row is refused: oats cannot tell what it reads.
 * test/loader-env.test.ts fails when this Node accepts one that has no row.
 */

export type NodeOptionKind = "module" | "path" | "output" | "value" | "optional" | "flag";

const FLAGS = [
  "--abort-on-uncaught-exception",
  "--addons",
  "--allow-addons",
  "--allow-child-process",
  "--allow-wasi",
  "--allow-worker",
  "--debug-arraybuffer-allocations",
  "--deprecation",
  "--disable-wasm-trap-handler",
  "--disallow-code-generation-from-strings",
  "--enable-etw-stack-walking",
  "--enable-fips",
  "--enable-network-family-autoselection",
  "--enable-source-maps",
  "--experimental-abortcontroller",
  "--experimental-detect-module",
  "--experimental-eventsource",
  "--experimental-fetch",
  "--experimental-global-customevent",
  "--experimental-global-webcrypto",
  "--experimental-import-meta-resolve",
  "--experimental-json-modules",
  "--experimental-modules",
  "--experimental-network-imports",
  "--experimental-permission",
  "--experimental-print-required-tla",
  "--experimental-repl-await",
  "--experimental-report",
  "--experimental-require-module",
  "--experimental-shadow-realm",
  "--experimental-top-level-await",
  "--experimental-vm-modules",
  "--experimental-wasi-unstable-preview1",
  "--experimental-wasm-modules",
  "--experimental-websocket",
  "--experimental-worker",
  "--expose-gc",
  "--extra-info-on-fatal-exception",
  "--force-async-hooks-checks",
  "--force-context-aware",
  "--force-fips",
  "--force-node-api-uncaught-exceptions-policy",
  "--frozen-intrinsics",
  "--global-search-paths",
  "--heap-prof",
  "--huge-max-old-generation-size",
  "--insecure-http-parser",
  "--interpreted-frames-native-stack",
  "--jitless",
  "--napi-modules",
  "--network-family-autoselection",
  "--node-memory-debug",
  "--node-snapshot",
  "--openssl-legacy-provider",
  // Reads the openssl_conf section of the config OPENSSL_CONF names (a `path` row) or the system's.
  "--openssl-shared-config",
  "--pending-deprecation",
  "--perf-basic-prof",
  "--perf-basic-prof-only-functions",
  "--perf-prof",
  "--perf-prof-unwinding-info",
  "--preserve-symlinks",
  "--preserve-symlinks-main",
  "--prof-process",
  "--report-compact",
  "--report-exclude-network",
  "--report-on-fatalerror",
  "--report-on-signal",
  "--report-uncaught-exception",
  "--test-only",
  "--throw-deprecation",
  "--tls-max-v1.2",
  "--tls-max-v1.3",
  "--tls-min-v1.0",
  "--tls-min-v1.1",
  "--tls-min-v1.2",
  "--tls-min-v1.3",
  "--trace-atomics-wait",
  "--trace-deprecation",
  "--trace-events-enabled",
  "--trace-exit",
  "--trace-promises",
  "--trace-sigint",
  "--trace-sync-io",
  "--trace-tls",
  "--trace-uncaught",
  "--trace-warnings",
  "--track-heap-objects",
  "--use-bundled-ca",
  // Reads SSL_CERT_FILE and SSL_CERT_DIR (`path` rows) or the system's store.
  "--use-openssl-ca",
  "--verify-base-objects",
  "--warnings",
  "--watch",
  "--watch-preserve-output",
  "--zero-fill-buffers",
];

const VALUES = [
  // Permission grants: they name paths, but Node reads nothing from them.
  "--allow-fs-read",
  "--allow-fs-write",
  "--conditions",
  "-C",
  "--debug-port",
  "--inspect-port",
  "--disable-proto",
  "--disable-warning",
  "--dns-result-order",
  "--es-module-specifier-resolution",
  "--experimental-specifier-resolution",
  "--experimental-default-type",
  "--heap-prof-interval",
  "--heapsnapshot-near-heap-limit",
  "--heapsnapshot-signal",
  "--http-parser",
  "--input-type",
  "--inspect-publish-uid",
  "--max-http-header-size",
  "--max-old-space-size",
  "--max-semi-space-size",
  "--stack-trace-limit",
  "--network-family-autoselection-attempt-timeout",
  "--policy-integrity",
  "--report-signal",
  "--secure-heap",
  "--secure-heap-min",
  "--test-shard",
  "--title",
  "--tls-cipher-list",
  "--trace-event-categories",
  "--trace-require-module",
  "--unhandled-rejections",
  "--use-largepages",
  "--v8-pool-size",
  // Watched for changes, not read as code.
  "--watch-path",
];

const OUTPUTS = [
  "--diagnostic-dir",
  "--heap-prof-dir",
  "--heap-prof-name",
  "--redirect-warnings",
  "--report-dir",
  "--report-directory",
  "--report-filename",
  "--tls-keylog",
  "--test-reporter-destination",
  "--trace-event-file-pattern",
  "--localstorage-file",
];

const TABLE = new Map<string, NodeOptionKind>([
  ...FLAGS.map((name) => [name, "flag"] as const),
  ...VALUES.map((name) => [name, "value"] as const),
  ...OUTPUTS.map((name) => [name, "output"] as const),
  ...["--inspect", "--inspect-brk", "--inspect-wait"].map((name) => [name, "optional"] as const),
  ...["--require", "-r", "--import", "--loader", "--experimental-loader", "--test-reporter"].map(
    (name) => [name, "module"] as const,
  ),
  ...[
    "--openssl-config",
    "--icu-data-dir",
    "--snapshot-blob",
    "--experimental-policy",
    "--env-file",
    "--env-file-if-exists",
    "--experimental-config-file",
  ].map((name) => [name, "path"] as const),
]);

/** `--test-reporter` also takes the name of a reporter built into Node. */
export const NODE_BUILTIN_TEST_REPORTERS: ReadonlySet<string> = new Set(["spec", "tap", "dot", "junit", "lcov"]);

/** Node spells `--a_b` as `--a-b`. */
export function normalizeNodeOptionName(name: string): string {
  return name.startsWith("--") ? `--${name.slice(2).replaceAll("_", "-")}` : name;
}

/** What an option's value is, or null for an option oats does not know. */
export function nodeOptionKind(name: string): NodeOptionKind | null {
  const normalized = normalizeNodeOptionName(name);
  const kind = TABLE.get(normalized);
  if (kind !== undefined) return kind;
  const negated = normalized.startsWith("--no-") ? TABLE.get(`--${normalized.slice(5)}`) : undefined;
  if (negated === "flag" || negated === "optional") return "flag";
  return null;
}

/** Split NODE_OPTIONS as Node does; a dangling escape or an unterminated quote is an error, as in Node. */
export function splitNodeOptions(value: string): { tokens: string[] } | { error: string } {
  const tokens: string[] = [];
  let quoted = false;
  let startNew = true;
  for (let index = 0; index < value.length; index++) {
    let c = value[index]!;
    if (c === "\\" && quoted) {
      if (index + 1 === value.length) return { error: "a backslash ends the value (invalid escape)" };
      c = value[++index]!;
    } else if (c === " " && !quoted) {
      startNew = true;
      continue;
    } else if (c === '"') {
      quoted = !quoted;
      continue;
    }
    if (startNew) {
      tokens.push(c);
      startNew = false;
    } else {
      tokens[tokens.length - 1] += c;
    }
  }
  if (quoted) return { error: "a double quote is not closed" };
  return { tokens };
}

/**
 * Join non-empty arguments so that splitNodeOptions gives them back: an
 * argument with a space or a double quote is quoted, and its backslashes and
 * quotes escaped; any other is written as it is.
 */
export function joinNodeOptions(tokens: readonly string[]): string {
  return tokens
    .map((token) => (/[ "]/.test(token) ? `"${token.replace(/[\\"]/g, (c) => `\\${c}`)}"` : token))
    .join(" ");
}
