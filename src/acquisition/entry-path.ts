import { posix } from "node:path";
import { OatsError } from "../errors.js";

/**
 * The pure half of safe extraction: what one archive entry's name and link
 * text may be. An entry is accepted only if it names a normalised relative
 * path inside the tree; a symlink only if its text is relative and resolves
 * inside the tree from the link's own directory. Everything here is lexical:
 * the writer never follows a link, so lexical containment is containment.
 */

export type EntryRefusalReason =
  | "absolute-path"
  | "dot-dot"
  | "outside-prefix"
  | "absolute-symlink"
  | "escaping-symlink"
  | "hard-link"
  | "special-file"
  | "unsupported-entry"
  | "duplicate-entry"
  | "case-collision"
  | "type-conflict"
  | "through-symlink"
  | "too-many-entries"
  | "too-large"
  | "empty-archive"
  | "corrupt-archive";

/** Escapes are `artifact-not-contained`; every other unsafe entry is `invalid-artifact`; a broken archive is `invalid-input`. */
export function entryRefusal(origin: string, reason: EntryRefusalReason, entry: string | null, message: string, details: Record<string, unknown> = {}): OatsError {
  // As for a source directory (source-check.ts): absolute and escaping symlinks alike are not contained.
  const escapes = reason === "absolute-path" || reason === "dot-dot" || reason === "absolute-symlink" || reason === "escaping-symlink" || reason === "through-symlink";
  const code = escapes ? "artifact-not-contained" : reason === "corrupt-archive" ? "invalid-input" : "invalid-artifact";
  return new OatsError(code, `${origin}: ${entry === null ? "" : `entry ${JSON.stringify(entry)}: `}${message}; nothing was extracted outside staging and nothing was retained`, {
    archive: origin,
    ...(entry === null ? {} : { entry }),
    reason,
    ...details,
  });
}

/**
 * The path of an entry inside the tree, or null for the root itself.
 * `prefix` (e.g. "package") is the one top-level directory every entry must
 * sit under; it is removed.
 */
export function entryPath(raw: string, prefix: string | null, origin: string): string | null {
  if (raw.startsWith("/") || /^[A-Za-z]:[\\/]/.test(raw)) throw entryRefusal(origin, "absolute-path", raw, "absolute paths are refused");
  const segments = raw.split("/").filter((segment) => segment !== "" && segment !== ".");
  if (segments.includes("..")) throw entryRefusal(origin, "dot-dot", raw, "a `..` segment would climb out of the tree");
  if (prefix !== null) {
    if (segments[0] !== prefix) throw entryRefusal(origin, "outside-prefix", raw, `every entry of a package tarball sits under ${prefix}/`);
    segments.shift();
  }
  return segments.length === 0 ? null : segments.join("/");
}

/** Check a symlink's text: relative, and resolving inside the tree from the link's directory. Returns it verbatim. */
export function symlinkTarget(path: string, linkText: string, origin: string): string {
  if (linkText === "" || linkText.includes("\0")) throw entryRefusal(origin, "unsupported-entry", path, "a symlink needs a non-empty target");
  if (linkText.startsWith("/")) throw entryRefusal(origin, "absolute-symlink", path, `symlink to the absolute path ${JSON.stringify(linkText)} is refused`, { target: linkText });
  const resolved = posix.normalize(posix.join(posix.dirname(path), linkText));
  if (resolved === ".." || resolved.startsWith("../")) {
    throw entryRefusal(origin, "escaping-symlink", path, `symlink to ${JSON.stringify(linkText)} resolves outside the tree`, { target: linkText });
  }
  return linkText;
}

/** The key two names collide under on a case-insensitive or normalising filesystem. */
export function foldKey(path: string): string {
  return path.normalize("NFC").toLowerCase();
}

/** Every proper ancestor of a relative path, shortest first: "a/b/c" → ["a", "a/b"]. */
export function ancestors(path: string): string[] {
  const segments = path.split("/");
  return segments.slice(0, -1).map((_, index) => segments.slice(0, index + 1).join("/"));
}
