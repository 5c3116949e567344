import { z } from "zod";
import { type JsonValue, OatsError, OPERATOR_MAX_DEPTH, parseJsonText } from "../core/index.js";
import { IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN } from "./store/ids.js";
import { readRegularFile } from "./store/files.js";

/**
 * oats lock v2, read strictly: unknown keys, a bad source grammar, a
 * malformed integrity or a capability whose package row is missing are all
 * `invalid-lock`. Rows are returned in Maps, so an id such as `constructor`
 * or `x.__proto__` is an ordinary key and never reaches Object.prototype.
 */

const identifier = z.string().max(IDENTIFIER_MAX_LENGTH).regex(IDENTIFIER_PATTERN, "must match ^[a-z0-9][a-z0-9._-]*$");
const legacyIntegrity = z.string().regex(/^sha256-[0-9a-f]{64}$/, "must be a full sha256-<64 lowercase hex>");
/** Upstream writes the string `local` for a `path:` source, which has no commit. */
export const LOCAL_COMMIT = "local";
const commit = z.union([z.string().regex(/^[0-9a-f]{40}$/, "must be a full 40-hex commit"), z.literal(LOCAL_COMMIT)], {
  error: `must be a full 40-hex commit or "${LOCAL_COMMIT}"`,
});
/** `.` for the source root, else a canonical relative path (no `.`, `..` or empty segments). */
const relativePath = z
  .string()
  .min(1)
  .refine(
    (path) =>
      path === "." ||
      (!path.startsWith("/") &&
        !path.split("/").some((segment) => segment === ".." || segment === "." || segment === "")),
    "must be . or a canonical relative path without '.', '..' or empty segments",
  );

/**
 * Package sources, in upstream's grammar: `git:<url>` (optionally `@<ref>`)
 * with an http, https, ssh, git or file URL or `user@host:path`;
 * `catalog:<package-id>` (optionally `@<selector>`); `path:<absolute
 * directory>`; or `npm:<name>@<version>`. A `#<path>` fragment is never part
 * of a lock source (it belongs to source identities, not locks).
 */
export const packageSourceSchema = z.union([
  z
    .string()
    .regex(
      /^git:(https?|ssh|git|file):\/\/[^\s@#]+(@[^\s@#]+)?$|^git:[a-z0-9._-]+@[^\s:#]+:[^\s@#]+(@[^\s@#]+)?$/i,
      "git source must be git:<url>[@<ref>]",
    ),
  z
    .string()
    .regex(/^catalog:[a-z0-9][a-z0-9._-]*(@[^\s@#]+)?$/, "catalog source must be catalog:<package-id>[@<selector>]"),
  z.string().regex(/^path:\/[^\0]*$/, "path source must be path:<absolute directory>"),
  z.string().regex(/^npm:(@[a-z0-9._-]+\/)?[a-z0-9._-]+@[^\s@]+$/, "npm source must be npm:<name>@<version>"),
]);

export const packageRowSchema = z
  .object({
    source: packageSourceSchema,
    path: relativePath.optional(),
    version: z.string().min(1),
    commit: commit.nullable().optional(),
    integrity: legacyIntegrity.optional(),
    dependencies: z.array(identifier).optional(),
  })
  .strict()
  .refine((row) => row.commit !== LOCAL_COMMIT || row.source.startsWith("path:"), {
    message: `commit "${LOCAL_COMMIT}" belongs to a path: source only`,
    path: ["commit"],
  });

export const capabilityRowSchema = z
  .object({
    version: z.string().min(1),
    package: identifier,
    path: relativePath.optional(),
    integrity: legacyIntegrity,
    trusted: z.boolean().optional(),
  })
  .strict();

export type PackageRow = z.infer<typeof packageRowSchema>;
export type CapabilityRow = z.infer<typeof capabilityRowSchema>;

/** A plain object's own entries as a validated Map (zod's record would drop a `__proto__` key). */
function rowsOf<T extends z.ZodType>(row: T) {
  return z
    .custom<Record<string, unknown>>(
      (value) => typeof value === "object" && value !== null && !Array.isArray(value),
      "must be an object",
    )
    .transform((object, context) => {
      const rows = new Map<string, z.infer<T>>();
      for (const key of Object.keys(object)) {
        const id = identifier.safeParse(key);
        if (!id.success) {
          context.addIssue({
            code: "custom",
            path: [key],
            message: `invalid id ${JSON.stringify(key)}: ${id.error.issues[0]?.message}`,
          });
          continue;
        }
        const parsed = row.safeParse(object[key]);
        if (!parsed.success) {
          for (const issue of parsed.error.issues) context.addIssue({ ...issue, path: [key, ...issue.path] } as never);
          continue;
        }
        rows.set(key, parsed.data);
      }
      return rows;
    });
}

const lockSchema = z
  .object({
    lockfileVersion: z.literal(2),
    packages: rowsOf(packageRowSchema),
    capabilities: rowsOf(capabilityRowSchema),
  })
  .strict();

/**
 * The same document as plain records, for the JSON Schema (`oats schema lock`):
 * lockSchema reads the rows through rowsOf (a `__proto__` id is refused, not
 * dropped), which JSON Schema cannot express; the rows are the same schemas.
 */
export const lockDocumentSchema = z
  .object({
    lockfileVersion: z.literal(2),
    packages: z.record(identifier, packageRowSchema),
    capabilities: z.record(identifier, capabilityRowSchema),
  })
  .strict();

export interface OatsLock {
  readonly lockfileVersion: 2;
  readonly packages: ReadonlyMap<string, PackageRow>;
  readonly capabilities: ReadonlyMap<string, CapabilityRow>;
}

/** A lock as a caller holds one: the JSON document of an oats.lock file, or an {@link OatsLock} already read. */
export type OatsLockInput = JsonValue | OatsLock;

/**
 * The strict form of a lock: an {@link OatsLock} is returned as it is; a JSON document is checked
 * against lock v2 and refused with `invalid-lock` (the first problem's path in `details.path`).
 * @param origin names the lock in a refusal's message
 */
export function parseLock(input: OatsLockInput, origin = "lock"): OatsLock {
  if (isParsedLock(input)) return input;
  const parsed = lockSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.length ? issue.path.join(".") : "(root)";
    throw new OatsError("invalid-lock", `${origin}: ${where}: ${issue?.message ?? "malformed"}`, {
      lock: origin,
      path: issue?.path ?? [],
      issues: parsed.error.issues.length,
    });
  }
  const lock = parsed.data;
  for (const [id, row] of lock.capabilities) {
    if (!lock.packages.has(row.package)) {
      throw new OatsError(
        "invalid-lock",
        `${origin}: capabilities.${id}: package row ${JSON.stringify(row.package)} is missing`,
        { lock: origin, capability: id, package: row.package },
      );
    }
  }
  return lock;
}

function isParsedLock(input: unknown): input is OatsLock {
  return typeof input === "object" && input !== null && (input as { packages?: unknown }).packages instanceof Map;
}

/** Far above any real lock (a row is some 300 bytes): a bound, not a budget. */
export const MAX_LOCK_BYTES = 16 << 20;

/**
 * Read a lock file the operator named: opened once, never through a symlink
 * at its name and never blocking on a FIFO, its type checked on the
 * descriptor and read through it (readRegularFile), bounded. Every failure
 * is `invalid-lock`.
 */
export function readLockFile(path: string): OatsLock {
  const bytes = readRegularFile(path, {
    limit: MAX_LOCK_BYTES,
    refuse: (failure, details) =>
      new OatsError(
        "invalid-lock",
        failure === "symlink"
          ? `lock file ${path} is a symlink; oats never follows a symlink at the name of a file it reads`
          : failure === "not-a-file"
            ? `lock file ${path} is not a regular file`
            : failure === "too-large"
              ? `lock file ${path} is larger than ${MAX_LOCK_BYTES} bytes`
              : `cannot read lock file ${path}: ${String(details["errno"] ?? failure)}`,
        { lock: path, ...details, ...(failure === "symlink" || failure === "not-a-file" ? { reason: failure } : {}) },
      ),
  });
  return parseLockText(bytes.toString("utf8"), path);
}

/** A lock file's text: JSON with no duplicate keys and bounded nesting (`invalid-lock`, reason `duplicate-key` /
 * `too-deep`), then the v2 schema. */
export function parseLockText(text: string, path: string): OatsLock {
  const json = parseJsonText(text, OPERATOR_MAX_DEPTH, (reason, message, details) =>
    reason === "syntax"
      ? new OatsError("invalid-lock", `lock file ${path} is not JSON: ${message}`, { lock: path })
      : new OatsError("invalid-lock", `lock file ${path}: ${message}`, { lock: path, reason, ...details }),
  );
  return parseLock(json as JsonValue, path);
}

export function capabilityRows(
  lock: OatsLock,
  capabilityId: string,
): { capability: CapabilityRow; packageId: string; package: PackageRow } {
  const capability = lock.capabilities.get(capabilityId);
  if (!capability)
    throw new OatsError("invalid-lock", `lock has no capability row for ${capabilityId}`, { capability: capabilityId });
  // parseLock guarantees the package row exists.
  return { capability, packageId: capability.package, package: lock.packages.get(capability.package)! };
}
