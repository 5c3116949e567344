import { posix } from "node:path";
import { OatsError } from "../core/index.js";

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
  | "path-too-long"
  | "too-deep"
  | "header-too-large"
  | "empty-archive"
  | "corrupt-archive";

/** Escapes are `artifact-not-contained`; every other unsafe entry is `invalid-artifact`; a broken archive is
 * `invalid-input`. */
export function entryRefusal(
  origin: string,
  reason: EntryRefusalReason,
  entry: string | null,
  message: string,
  details: Record<string, unknown> = {},
): OatsError {
  // As for a source directory (source-check.ts): absolute and escaping symlinks alike are not contained.
  const escapes =
    reason === "absolute-path" ||
    reason === "dot-dot" ||
    reason === "absolute-symlink" ||
    reason === "escaping-symlink" ||
    reason === "through-symlink";
  const code = escapes ? "artifact-not-contained" : reason === "corrupt-archive" ? "invalid-input" : "invalid-artifact";
  return new OatsError(
    code,
    `${origin}: ` +
      `${entry === null ? "" : `entry ${JSON.stringify(entry)}: `}${message}; ` +
      `nothing was extracted outside staging and nothing was retained`,
    {
      archive: origin,
      ...(entry === null ? {} : { entry }),
      reason,
      ...details,
    },
  );
}

/**
 * The path of an entry inside the tree, or null for the root itself.
 * `prefix` (e.g. "package") is the one top-level directory every entry must
 * sit under; it is removed.
 */
/** The extractor's defaults for names (DEFAULT_EXTRACT_LIMITS has them too). */
export const DEFAULT_NAME_LIMITS = { maxPathBytes: 4096, maxDepth: 256 } as const;

export function entryPath(
  raw: string,
  prefix: string | null,
  origin: string,
  limits: { maxPathBytes: number; maxDepth: number } = DEFAULT_NAME_LIMITS,
): string | null {
  // Measured before anything proportional to the name is done with it; the refusal shows only its start.
  const length = Buffer.byteLength(raw);
  if (length > limits.maxPathBytes)
    throw entryRefusal(
      origin,
      "path-too-long",
      shown(raw),
      `the name is ${length} bytes, more than the limit of ${limits.maxPathBytes}`,
      { limit: limits.maxPathBytes, length },
    );
  if (raw.startsWith("/") || /^[A-Za-z]:[\\/]/.test(raw))
    throw entryRefusal(origin, "absolute-path", raw, "absolute paths are refused");
  const segments = raw.split("/").filter((segment) => segment !== "" && segment !== ".");
  if (segments.includes("..")) throw entryRefusal(origin, "dot-dot", raw, "a `..` segment would climb out of the tree");
  if (prefix !== null) {
    if (segments[0] !== prefix)
      throw entryRefusal(origin, "outside-prefix", raw, `every entry of a package tarball sits under ${prefix}/`);
    segments.shift();
  }
  if (segments.length > limits.maxDepth)
    throw entryRefusal(
      origin,
      "too-deep",
      shown(raw),
      `the name is ${segments.length} levels deep, more than the limit of ${limits.maxDepth}`,
      { limit: limits.maxDepth, depth: segments.length },
    );
  return segments.length === 0 ? null : segments.join("/");
}

/** Check a symlink's text: relative, and resolving inside the tree from the link's directory. Returns it verbatim. */
export function symlinkTarget(
  path: string,
  linkText: string,
  origin: string,
  maxBytes: number = DEFAULT_NAME_LIMITS.maxPathBytes,
): string {
  const length = Buffer.byteLength(linkText);
  if (length > maxBytes)
    throw entryRefusal(
      origin,
      "path-too-long",
      path,
      `the symlink text is ${length} bytes, more than the limit of ${maxBytes}`,
      { limit: maxBytes, length },
    );
  if (linkText === "" || linkText.includes("\0"))
    throw entryRefusal(origin, "unsupported-entry", path, "a symlink needs a non-empty target");
  if (linkText.startsWith("/"))
    throw entryRefusal(
      origin,
      "absolute-symlink",
      path,
      `symlink to the absolute path ${JSON.stringify(linkText)} is refused`,
      { target: linkText },
    );
  const resolved = posix.normalize(posix.join(posix.dirname(path), linkText));
  if (resolved === ".." || resolved.startsWith("../")) {
    throw entryRefusal(
      origin,
      "escaping-symlink",
      path,
      `symlink to ${JSON.stringify(linkText)} resolves outside the tree`,
      { target: linkText },
    );
  }
  return linkText;
}

/** The key two names collide under on a case-insensitive or normalising filesystem. */
export function foldKey(path: string): string {
  return path.normalize("NFC").toLowerCase();
}

/** A name as a refusal shows it: an oversized one is cut, so the error stays small. */
const SHOWN_BYTES = 256;
function shown(raw: string): string {
  return raw.length <= SHOWN_BYTES ? raw : `${raw.slice(0, SHOWN_BYTES)}...(${Buffer.byteLength(raw)} bytes)`;
}
