import { lstatSync, readdirSync, readlinkSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { pathToFileURL } from "node:url";
import { OatsError, errnoCode } from "../core/index.js";
import { type LoaderVariable, loaderVariable } from "./loader-env.js";
import {
  NODE_BUILTIN_TEST_REPORTERS,
  joinNodeOptions,
  nodeOptionKind,
  normalizeNodeOptionName,
  splitNodeOptions,
} from "./node-options.js";

/**
 * The loader rule (docs/design/captures.md, "Loader variables"): a file or
 * directory that a pinned variable makes a runtime read as code or
 * configuration must lie inside the executable tree, so that the tree's
 * digest, and with it the approval, pins its bytes.
 *
 * For each pinned variable, by its row in the loader table (loader-env.ts):
 *
 * - `path` and `paths`: each entry is a path relative to the tree's root.
 *   An absolute path, a path that climbs out with `..`, a path through a
 *   symlink whose target is absolute or climbs out, an empty entry, and text
 *   the runtime would expand (`$ORIGIN`, `$HOME`, a command substitution, a
 *   `%N` template, a `*` wildcard) are refused. When the path is a
 *   directory, every symlink beneath it must lead inside the tree as well:
 *   the runtime reads what the directory holds.
 * - `options` with the Node grammar (node-options.ts): every option that
 *   names a file Node reads is checked as a `path` entry. A module Node
 *   preloads (`--require`, `--import`, `--loader`) is written `./x.js` or
 *   `../x.js` and must be a file of the tree; a bare name (resolved through
 *   node_modules directories outside the tree, before the guard is in
 *   place), a `data:` module (code that can import anything), an absolute
 *   path or a `file:` URL is refused; `node:` builtins pass. An option
 *   oats does not know, or an argument that is not an option, is refused.
 * - `name`: one file-name component, never `..` or a path.
 * - `code`, `unknown`, and `options` without a grammar: refused, because
 *   oats cannot tell which files they name.
 * - `switch` and `inert`: pinned as they are.
 *
 * Symlinks are followed by their text, inside the tree, never by where the
 * tree happens to lie, so the answer is the same for the source directory
 * at prepare, the retained revision and the run copy at dispatch.
 *
 * `capture prepare` checks against the source tree and refuses before
 * anything is retained. Dispatch checks again against the verified run copy
 * and rewrites every such path to its absolute place in the copy (a module
 * given to `--import` or `--loader` as a `file:` URL), so the runtime reads
 * the bytes that were hashed, whatever the working directory. Every refusal
 * is `invalid-input`, with `details.variable`, `details.reason` and the
 * entry or option at fault.
 */

export type LoaderRefusalReason =
  | "loader-path-outside-tree"
  | "loader-path-symlink-out"
  | "loader-value-unchecked"
  | "loader-path-unrepresentable";

const MAX_SYMLINKS = 40;

function refusal(
  row: LoaderVariable,
  reason: LoaderRefusalReason,
  why: string,
  details: Record<string, unknown> = {},
): OatsError {
  return new OatsError(
    "invalid-input",
    `${row.name} (${row.runtime}, ${row.source}): ${why}; a file a loader variable names must lie inside the ` +
      `executable tree, given relative to its root`,
    { variable: row.name, reason, kind: row.kind, runtime: row.runtime, source: row.source, ...details },
  );
}

type Placed =
  | { readonly ok: true; readonly relative: string; readonly type: "file" | "directory" | "other" | "missing" }
  | { readonly ok: false; readonly reason: LoaderRefusalReason; readonly why: string };

/**
 * Where `entry` (relative) leads inside the tree at `root`, following each
 * symlink by its text: the normalized tree-relative path, free of symlinks,
 * and what is there. Below a component that does not exist the rest is
 * lexical; a later `..` back into existing components resumes the checks.
 */
function placeInTree(root: string, entry: string): Placed {
  const pending = entry.split("/");
  const done: string[] = [];
  let missingFrom: number | null = null;
  let links = 0;
  let type: "file" | "directory" | "other" = "directory";
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (done.length === 0) {
        return links === 0
          ? { ok: false, reason: "loader-path-outside-tree", why: `${entry} climbs out` }
          : { ok: false, reason: "loader-path-symlink-out", why: `${entry} climbs out through a symlink` };
      }
      done.pop();
      if (missingFrom !== null && done.length <= missingFrom) missingFrom = null;
      type = "directory";
      continue;
    }
    if (missingFrom !== null) {
      done.push(part);
      continue;
    }
    const here = join(root, ...done, part);
    let stats;
    try {
      stats = lstatSync(here);
    } catch (error) {
      const code = errnoCode(error);
      if (code !== "ENOENT" && code !== "ENOTDIR") throw error;
      missingFrom = done.length;
      done.push(part);
      continue;
    }
    if (stats.isSymbolicLink()) {
      const at = [...done, part].join("/");
      if (++links > MAX_SYMLINKS) return { ok: false, reason: "loader-path-symlink-out", why: `${at}: symlink loop` };
      const target = readlinkSync(here);
      if (isAbsolute(target)) {
        return {
          ok: false,
          reason: "loader-path-symlink-out",
          why: `${entry} leads through ${at}, a symlink to ${target}, outside the tree`,
        };
      }
      pending.unshift(...target.split("/"));
      continue;
    }
    done.push(part);
    type = stats.isDirectory() ? "directory" : stats.isFile() ? "file" : "other";
  }
  return { ok: true, relative: done.join("/"), type: missingFrom !== null ? "missing" : type };
}

/** Every symlink beneath a directory of the tree (through the directories they lead to) must stay inside it. */
function checkBeneath(root: string, relative: string, seen: Set<string> = new Set()): Placed | null {
  if (seen.has(relative)) return null;
  seen.add(relative);
  for (const child of readdirSync(join(root, relative), { withFileTypes: true })) {
    const path = relative === "" ? child.name : `${relative}/${child.name}`;
    if (child.isDirectory()) {
      const inner = checkBeneath(root, path, seen);
      if (inner !== null) return inner;
    } else if (child.isSymbolicLink()) {
      const placed = placeInTree(root, path);
      if (!placed.ok) return { ...placed, why: `a symlink beneath it: ${placed.why}` };
      if (placed.type === "directory") {
        const inner = checkBeneath(root, placed.relative, seen);
        if (inner !== null) return inner;
      }
    }
  }
  return null;
}

interface PathRules {
  /** A module Node preloads: it must be a file of the tree, written ./ or ../. */
  readonly module?: boolean;
  /** Characters that would split the rewritten path, or text the runtime would expand in it. */
  readonly unsafe?: readonly string[];
}

/** Check one entry; the absolute path it has under `root` (only meaningful when `root` is the run copy). */
function placeEntry(
  row: LoaderVariable,
  entry: string,
  root: string,
  rules: PathRules,
  at: Record<string, unknown>,
): string {
  if (entry === "")
    throw refusal(row, "loader-value-unchecked", "an empty entry (some runtimes read the working directory)", at);
  if (entry.includes("\0")) throw refusal(row, "loader-value-unchecked", "a NUL byte in a path", at);
  const token = row.expands?.find((text) => entry.includes(text));
  if (token !== undefined)
    throw refusal(row, "loader-value-unchecked", `${entry} holds ${token}, which ${row.runtime} expands`, at);
  if (isAbsolute(entry)) {
    throw refusal(
      row,
      "loader-path-outside-tree",
      `${entry} is absolute, so its bytes are not part of the approved tree`,
      at,
    );
  }
  const placed = placeInTree(root, entry);
  if (!placed.ok) throw refusal(row, placed.reason, placed.why, at);
  if (rules.module === true && placed.type !== "file")
    throw refusal(row, "loader-value-unchecked", `${entry} is not a file of the tree (${placed.type})`, at);
  if (placed.type === "directory") {
    const beneath = checkBeneath(root, placed.relative);
    if (beneath !== null && !beneath.ok) throw refusal(row, beneath.reason, `${entry}: ${beneath.why}`, at);
  }
  return placed.relative === "" ? root : join(root, placed.relative);
}

function checkRepresentable(
  row: LoaderVariable,
  placed: string,
  unsafe: readonly string[],
  at: Record<string, unknown>,
): void {
  const found = unsafe.find((text) => placed.includes(text));
  if (found !== undefined) {
    throw refusal(
      row,
      "loader-path-unrepresentable",
      `the run copy's path ${placed} holds ${JSON.stringify(found)}, which ${row.name} would not read as ` +
        `part of a path`,
      at,
    );
  }
}

function moduleSpecifier(
  row: LoaderVariable,
  option: string,
  value: string,
  at: Record<string, unknown>,
): "builtin" | "path" {
  if (value.startsWith("node:")) return "builtin";
  if (option === "--test-reporter" && NODE_BUILTIN_TEST_REPORTERS.has(value)) return "builtin";
  if (value.startsWith("./") || value.startsWith("../")) return "path";
  const why = isAbsolute(value)
    ? `${value} is absolute, so its bytes are not part of the approved tree`
    : /^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(value)
      ? `${value} is a URL; write a path of the tree (./x.js)`
      : `${value} is a bare specifier, resolved through node_modules directories outside the tree before the guard ` +
        `is in place; write a path of the tree (./node_modules/x/index.js)`;
  throw refusal(row, isAbsolute(value) ? "loader-path-outside-tree" : "loader-value-unchecked", `${option} ${why}`, at);
}

/** NODE_OPTIONS: every option oats knows, each file Node would read placed in the tree. */
function placeNodeOptions(row: LoaderVariable, value: string, root: string, rewrite: boolean): string {
  const split = splitNodeOptions(value);
  if ("error" in split) throw refusal(row, "loader-value-unchecked", `Node cannot read it: ${split.error}`);
  const tokens = [...split.tokens];
  let changed = false;
  for (let index = 0; index < tokens.length; index++) {
    const token = tokens[index]!;
    if (!token.startsWith("-") || token === "-" || token === "--") {
      throw refusal(row, "loader-value-unchecked", `${token} is not an option`, { option: token });
    }
    const equals = token.startsWith("--") ? token.indexOf("=") : -1;
    const name = equals < 0 ? token : token.slice(0, equals);
    const option = normalizeNodeOptionName(name);
    const kind = nodeOptionKind(name);
    if (kind === null)
      throw refusal(row, "loader-value-unchecked", `${name} is an option oats does not know`, { option: name });
    if (kind === "flag" || kind === "optional") continue;
    let valueIndex = index;
    let given: string | undefined;
    if (equals >= 0) {
      given = token.slice(equals + 1);
    } else {
      valueIndex = ++index;
      given = tokens[valueIndex];
      if (given === undefined) throw refusal(row, "loader-value-unchecked", `${name} lacks its value`, { option });
      if (given.startsWith("-"))
        throw refusal(row, "loader-value-unchecked", `${name} is followed by ${given}, not a value`, { option });
    }
    if (kind === "value" || kind === "output") continue;
    const at = { option, entry: given };
    let placed: string;
    if (kind === "module") {
      if (moduleSpecifier(row, option, given, at) === "builtin") continue;
      const absolute = placeEntry(row, given, root, { module: true }, at);
      placed = option === "--require" || option === "-r" ? absolute : pathToFileURL(absolute).href;
    } else {
      placed = placeEntry(row, given, root, {}, at);
    }
    if (!rewrite) continue;
    tokens[valueIndex] = equals >= 0 ? `${name}=${placed}` : placed;
    changed = true;
  }
  return changed ? joinNodeOptions(tokens) : value;
}

/** The value to run with; throws the refusal. `rewrite` false only checks (prepare). */
function placeValue(name: string, value: string, root: string, rewrite: boolean): string {
  const row = loaderVariable(name);
  if (row === null) return value;
  switch (row.kind) {
    case "switch":
    case "inert":
      return value;
    case "unknown":
      throw refusal(
        row,
        "loader-value-unchecked",
        `it is not in the loader table (src/captures/loader-env.ts), so oats cannot tell what it makes ` +
          `${row.runtime} read`,
      );
    case "code":
      throw refusal(row, "loader-value-unchecked", "its value is code that can name any file, which oats cannot check");
    case "name":
      if (value === "" || value === "." || value === ".." || value.includes("/") || value.includes("\0"))
        throw refusal(row, "loader-path-outside-tree", `${value} is not one file name`, { entry: value });
      return value;
    case "options":
      if (row.syntax === "node-options") return placeNodeOptions(row, value, root, rewrite);
      throw refusal(
        row,
        "loader-value-unchecked",
        "oats does not parse its options, so it cannot check the files they name",
      );
    case "path": {
      const placed = placeEntry(row, value, root, {}, { entry: value });
      if (!rewrite) return value;
      checkRepresentable(row, placed, row.expands ?? [], { entry: value });
      return placed;
    }
    case "paths": {
      const separators = row.separators ?? ":";
      const entries = value.split(new RegExp(`[${separators.replace(/[\]\\^-]/g, "\\$&")}]`));
      const placed = entries.map((entry) => {
        const absolute = placeEntry(row, entry, root, {}, { entry });
        if (rewrite) checkRepresentable(row, absolute, [...separators, ...(row.expands ?? [])], { entry });
        return absolute;
      });
      return rewrite ? placed.join(separators[0]) : value;
    }
  }
}

/**
 * `capture prepare`: refuse a pinned env whose loader variables name a file
 * outside the tree at `root` (the source directory), or one oats cannot check.
 */
export function checkLoaderEnvironment(env: Readonly<Record<string, string>>, root: string): void {
  for (const [name, value] of Object.entries(env)) placeValue(name, value, root, false);
}

/**
 * Dispatch: the same check against the verified run copy at `root` (a real
 * path), and the values to run with, every path rewritten to its place in
 * the copy. Only the variables whose value changes are returned.
 */
export function placeLoaderEnvironment(env: Readonly<Record<string, string>>, root: string): Map<string, string> {
  const placed = new Map<string, string>();
  for (const [name, value] of Object.entries(env)) {
    const next = placeValue(name, value, root, true);
    if (next !== value) placed.set(name, next);
  }
  return placed;
}
