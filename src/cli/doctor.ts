import type { CommandSpec } from "./support/context.js";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  BUNDLE_HEAD,
  type CodeCacheLocation,
  FAST_COMMANDS,
  bundleStamp,
  bundleUrl,
  codeCacheLocations,
  codeCacheName,
  parseCache,
  readCache,
  readIfPresent,
} from "./load-bundle.js";
import { packageVersion } from "./support/version.js";

/**
 * How this installation runs here, for a user who wonders why oats is slower
 * than it should be: whether digests read small files through the native
 * addon (and if not, why: never built at install, made for another machine,
 * turned off), and which bundles have a V8 code cache yet. Neither is
 * needed; both only make oats faster. Nothing else prints this: the library
 * never prints, and a run that falls back to JavaScript says nothing, so a
 * --json stdout stays one envelope. It lives beside load-bundle.ts, not among
 * the commands, because it reports that loader's code caches (a command under
 * commands/ importing the loader would make a folder cycle).
 */
export const doctor: CommandSpec = {
  name: "doctor",
  define(command) {
    command.description(
      "how oats runs here: the native reads (or why not) and the code caches of the CLI (changes nothing)",
    );
  },
  async run() {
    const { nativeReadsStatus } = await import("../engine/index.js");
    const nativeReads = nativeReadsStatus();
    const codeCache = codeCacheReport();
    const node = {
      version: process.version,
      platform: process.platform,
      arch: process.arch,
      nodeApi: process.versions.napi ?? null,
    };
    const version = packageVersion();
    const lines = [
      `oats ${version}, node ${node.version} (${node.platform} ${node.arch}, Node-API ${node.nodeApi ?? "none"})`,
      nativeReads.state === "loaded"
        ? `native reads: loaded (${nativeReads.file})`
        : `native reads: not in use, ${nativeReads.state}: ${nativeReads.reason}; ` +
          `digests read every file from JavaScript, the same way, only slower (${nativeReads.file})`,
      `code caches (each written by the first run of its bundle; looked for in ${
        codeCache.locations.map(({ dir }) => dir).join(", then ") || "no place"
      }):`,
      ...codeCache.bundles.map(
        ({ bundle, cache }) => `  ${bundle.slice(bundle.lastIndexOf("/") + 1)}: ${cache ?? "none yet"}`,
      ),
    ];
    return {
      result: { version, node, nativeReads, codeCache },
      lines,
      quietLines: [lines[1]!],
    };
  },
};

/** A bundle's code cache as `oats doctor` reports it: where it is, if this Node with these options has one yet. */
export interface CodeCacheEntry {
  readonly bundle: string;
  readonly cache: string | null;
}

/**
 * The code caches of this install for this Node and its options
 * (`oats doctor`): the places looked in, in order, and each bundle's cache,
 * found as loadBundle finds it (no bundle is compiled).
 */
export function codeCacheReport(env: NodeJS.ProcessEnv = process.env): {
  locations: CodeCacheLocation[];
  bundles: CodeCacheEntry[];
} {
  let locations: CodeCacheLocation[] = [];
  const bundles: CodeCacheEntry[] = [];
  for (const command of [undefined, ...FAST_COMMANDS]) {
    const file = fileURLToPath(bundleUrl(command));
    const text = readIfPresent(bundleUrl(command));
    if (text === undefined) continue;
    const stamp = bundleStamp(text.subarray(0, BUNDLE_HEAD.length + 100).toString("latin1"));
    if (stamp === undefined) {
      bundles.push({ bundle: file, cache: null });
      continue;
    }
    locations = codeCacheLocations(stamp.version, env);
    const name = codeCacheName(command, stamp.digest);
    const found = locations
      .map(({ dir }) => join(dir, name))
      .find((path) => {
        const text = readCache(path);
        return text !== undefined && parseCache(text) !== undefined;
      });
    bundles.push({ bundle: file, cache: found ?? null });
  }
  return { locations, bundles };
}
