import { isAbsolute } from "node:path";
import { z } from "zod";
import { IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN } from "../retention/index.js";
import { entrypointPathSchema } from "./record.js";

/**
 * A legacy command or hook string (instance.json, reconstruct.ts) read as an
 * entry point of one capability, without a shell. Pure: no file is touched.
 *
 * The string is split on spaces and tabs, with '...' (literal) and "..."
 * (\" and \\ escapes) quoting and \x escapes outside quotes. Unquoted shell
 * syntax (| & ; < > ( ) $ ` * ? [ ] { } ~ # !, or any expansion inside
 * double quotes, or a newline) cannot be represented as an argv and is
 * refused. The entry point is the first token that is
 * `.agents/capabilities/installed/<id>/<path>` (relative to the scope,
 * optionally `./`-prefixed) or `<scope>/.agents/capabilities/installed/
 * <id>/<path>`; the tokens after it are its args. Before it only the
 * launcher `node` (or nothing) may appear, since a record entry point has
 * no launcher field; the launcher is kept in the evidence. Each refusal is
 * a reason: a stable code, ": ", a human detail.
 */

export const INSTALLED_DIR = [".agents", "capabilities", "installed"] as const;
const INSTALLED_PREFIX = `${INSTALLED_DIR.join("/")}/`;
/** Launchers a record entry point can stand for (the record has no launcher field). */
export const LEGACY_LAUNCHERS = ["node"] as const;

export const identifier = z
  .string()
  .max(IDENTIFIER_MAX_LENGTH)
  .regex(IDENTIFIER_PATTERN, "must match ^[a-z0-9][a-z0-9._-]*$");

const UNQUOTED_SHELL = new Set([..."|&;<>()$`*?[]{}~#!"]);

/** Split a command string into argv without a shell; a string a shell would treat specially is refused. */
export function splitCommand(text: string): { ok: true; tokens: string[] } | { ok: false; reason: string } {
  const tokens: string[] = [];
  let current: string | null = null;
  let i = 0;
  const fail = (code: string, detail: string) => ({ ok: false as const, reason: `${code}: ${detail}` });
  while (i < text.length) {
    const char = text[i]!;
    if (char === " " || char === "\t") {
      if (current !== null) tokens.push(current);
      current = null;
      i++;
      continue;
    }
    if (char === "\n" || char === "\r") return fail("shell-syntax", "a newline separates shell commands");
    current ??= "";
    if (char === "'") {
      const end = text.indexOf("'", i + 1);
      if (end === -1) return fail("unparseable-command", "unterminated single quote");
      current += text.slice(i + 1, end);
      i = end + 1;
      continue;
    }
    if (char === '"') {
      i++;
      for (;;) {
        if (i >= text.length) return fail("unparseable-command", "unterminated double quote");
        const inner = text[i]!;
        if (inner === '"') break;
        if (inner === "$" || inner === "`") return fail("shell-syntax", `${inner} expands inside double quotes`);
        if (inner === "\\" && i + 1 < text.length && '"\\'.includes(text[i + 1]!)) {
          current += text[i + 1];
          i += 2;
          continue;
        }
        current += inner;
        i++;
      }
      i++;
      continue;
    }
    if (char === "\\") {
      if (i + 1 >= text.length) return fail("unparseable-command", "trailing backslash");
      const next = text[i + 1]!;
      if (next === "\n") return fail("shell-syntax", "line continuation");
      current += next;
      i += 2;
      continue;
    }
    if (UNQUOTED_SHELL.has(char)) return fail("shell-syntax", `unquoted ${JSON.stringify(char)} needs a shell`);
    current += char;
    i++;
  }
  if (current !== null) tokens.push(current);
  if (tokens.length === 0) return fail("unparseable-command", "empty command");
  return { ok: true, tokens };
}

type Target = { at: "installed"; rest: string } | { at: "foreign" } | null;

/** Where a token points: into this scope's installed store, into some other installed store, or neither. */
function classifyToken(token: string, scopeForms: readonly string[]): Target {
  if (isAbsolute(token)) {
    for (const scope of scopeForms) {
      const prefix = `${scope}/${INSTALLED_PREFIX}`;
      if (token.startsWith(prefix)) return { at: "installed", rest: token.slice(prefix.length) };
    }
  } else {
    const relative = token.startsWith("./") ? token.slice(2) : token;
    if (relative.startsWith(INSTALLED_PREFIX))
      return { at: "installed", rest: relative.slice(INSTALLED_PREFIX.length) };
  }
  return token.includes(INSTALLED_PREFIX.slice(0, -1)) ? { at: "foreign" } : null;
}

export interface ParsedEntrypoint {
  readonly name: string;
  readonly role: "command" | "hook";
  readonly source: string;
  readonly launcher: string | null;
  readonly capability: string;
  readonly path: string;
  readonly args: string[];
}

/** A legacy command string as an entry point of one capability, or why it is not one. */
export function parseLegacyCommand(
  name: string,
  role: "command" | "hook",
  source: string,
  text: string,
  scopeForms: readonly string[],
): { ok: true; entrypoint: ParsedEntrypoint } | { ok: false; reason: string } {
  const split = splitCommand(text);
  if (!split.ok) return split;
  const targets = split.tokens.map((token) => classifyToken(token, scopeForms));
  const at = targets.findIndex((target) => target?.at === "installed");
  if (at === -1) {
    const foreign = targets.some((target) => target?.at === "foreign");
    return foreign
      ? {
          ok: false,
          reason: "installed-store-of-another-scope: the command points into an installed store outside this scope",
        }
      : { ok: false, reason: `not-in-installed-store: no token points into ${INSTALLED_PREFIX}<id>/` };
  }
  if (targets.some((target, index) => index !== at && target !== null)) {
    return {
      ok: false,
      reason:
        "argument-references-installed-store: another token names the installed " +
        "store, which will not outlive the migration",
    };
  }
  const prefix = split.tokens.slice(0, at);
  if (prefix.length > 1 || (prefix.length === 1 && !(LEGACY_LAUNCHERS as readonly string[]).includes(prefix[0]!))) {
    return {
      ok: false,
      reason:
        `launcher-not-representable: ${JSON.stringify(prefix.join(" "))} before ` +
        `the entry point cannot be recorded`,
    };
  }
  const rest = (targets[at] as { rest: string }).rest;
  const slash = rest.indexOf("/");
  const capability = slash === -1 ? rest : rest.slice(0, slash);
  if (!identifier.safeParse(capability).success)
    return { ok: false, reason: `invalid-capability-id: ${JSON.stringify(capability)}` };
  const segments = (slash === -1 ? "" : rest.slice(slash + 1)).split("/");
  if (segments.includes(".."))
    return { ok: false, reason: `path-outside-artifact: ${JSON.stringify(rest)} climbs out of ${capability}` };
  const path = segments.filter((segment) => segment !== "" && segment !== ".").join("/");
  if (!entrypointPathSchema.safeParse(path).success)
    return { ok: false, reason: `path-outside-artifact: ${JSON.stringify(rest)} names no file inside ${capability}` };
  return {
    ok: true,
    entrypoint: { name, role, source, launcher: prefix[0] ?? null, capability, path, args: split.tokens.slice(at + 1) },
  };
}
