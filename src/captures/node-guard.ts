import { statSync } from "node:fs";
import { extname } from "node:path";
import { OatsError } from "../core/index.js";

/**
 * How a dispatched entry point starts, and the Node module-resolution guard
 * it starts with (run-guard.mjs; docs/design/captures.md, "Running only what
 * was verified").
 *
 * - A non-executable .js/.mjs/.cjs entry runs under this Node with
 *   `--import <guard>` before the script.
 * - Every entry, whatever starts it, gets the guard appended to NODE_OPTIONS,
 *   so a Node it starts (a `#!/usr/bin/env node` entry, or a child of the
 *   entry) is guarded too, unless that process is started with another
 *   environment.
 *
 * The guard's URL names the run copy in its query (`?root=`), so the guard
 * needs no variable of its own in the child's environment.
 */

const NODE_EXTENSIONS = new Set([".js", ".mjs", ".cjs"]);

/** The guard module, beside this one: src/captures under tsx, dist/captures when built (tsconfig.build.json copies
 * it). */
const GUARD_MODULE = new URL("./run-guard.mjs", import.meta.url);

/** The `--import` specifier of the guard for a run copy rooted at `root` (a real path). */
export function guardSpecifier(root: string): string {
  const url = new URL(GUARD_MODULE.href);
  url.searchParams.set("root", root);
  return url.href;
}

/**
 * NODE_OPTIONS with the guard appended to what the pinned env already holds.
 * Node splits NODE_OPTIONS on spaces outside double quotes and unescapes
 * `\\` and `\"` inside them; the URL has neither space nor quote (URL
 * encoding), and is quoted and escaped all the same.
 */
export function nodeOptionsWithGuard(existing: string | undefined, specifier: string): string {
  const quoted = `"${specifier.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
  const option = `--import ${quoted}`;
  return existing !== undefined && existing.trim() !== "" ? `${existing} ${option}` : option;
}

/** How the entry point starts: directly when owner-executable, under this Node (guarded) when a non-executable
 * script; refused otherwise. */
export function launcher(
  path: string,
  args: readonly string[],
  entrypoint: string,
  guard: string,
): { command: string; argv: string[] } {
  const mode = statSync(path).mode;
  if ((mode & 0o100) !== 0) return { command: path, argv: [...args] };
  if (NODE_EXTENSIONS.has(extname(path)))
    return { command: process.execPath, argv: ["--import", guard, path, ...args] };
  throw new OatsError(
    "invalid-artifact",
    `entry point ${entrypoint} (${path}) is neither owner-executable nor a .js/.mjs/.cjs script`,
    { entrypoint, path, reason: "not-runnable" },
  );
}
