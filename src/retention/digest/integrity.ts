import { z } from "zod";
import { OatsError } from "../../core/index.js";

/** Digest formats of contract section 2. */
export const TREE_LEGACY = "oats.tree-legacy.v0";
export const TREE_EXEC = "oats.tree-exec.v1";
export const PACKAGE_PAYLOAD_EXEC = "oats.package-payload-exec.v1";
export const JSON_V1 = "oats.json.v1";
export const BYTES_V1 = "oats.bytes.v1";

export const DIGEST_FORMATS = [TREE_LEGACY, TREE_EXEC, PACKAGE_PAYLOAD_EXEC, JSON_V1, BYTES_V1] as const;
export type DigestFormat = (typeof DIGEST_FORMATS)[number];
export const TREE_FORMATS = [TREE_LEGACY, TREE_EXEC, PACKAGE_PAYLOAD_EXEC] as const;
export type TreeFormat = (typeof TREE_FORMATS)[number];

export const DIGEST_VALUE_PATTERN = /^sha256-[0-9a-f]{64}$/;

export const integritySchema = z
  .object({
    format: z.enum(DIGEST_FORMATS),
    value: z.string().regex(DIGEST_VALUE_PATTERN, "must be sha256- followed by 64 lowercase hex digits"),
  })
  .strict();

export type Integrity = z.infer<typeof integritySchema>;

/**
 * A content-addressed name (a record id, a blob digest): exactly
 * `sha256-<64 lowercase hex>`, optionally written with its format prefix
 * (`F:sha256-...`), which is dropped. Anything else is `invalid-input`.
 */
export function parseDigestName(input: unknown, format: DigestFormat, what: string, detailKey: string): string {
  const text = typeof input === "string" && input.startsWith(`${format}:`) ? input.slice(format.length + 1) : input;
  if (typeof text !== "string" || !DIGEST_VALUE_PATTERN.test(text)) {
    throw new OatsError(
      "invalid-input",
      `invalid ${what} ${JSON.stringify(input)}: expected sha256-<64 lowercase hex>`,
      { [detailKey]: input },
    );
  }
  return text;
}

/** The text form of an integrity, `<format>:sha256-<64 hex>`, which {@link parseIntegrity} reads back. */
export function integrityText(integrity: Integrity): string {
  return `${integrity.format}:${integrity.value}`;
}

/** The 64 hex digits of an integrity value. */
export function digestHex(integrity: Integrity): string {
  return integrity.value.slice("sha256-".length);
}

export function sameIntegrity(a: Integrity, b: Integrity): boolean {
  return a.format === b.format && a.value === b.value;
}

/**
 * An integrity in any form a user holds one: the `{format, value}` object; the text form
 * `oats.tree-exec.v1:sha256-<hex>`; the store's path segment `tree-exec-v1/sha256-<hex>`; the object
 * digestTree returns (its oats.tree-exec.v1 digest, or its only one); or a bare `sha256-<hex>`, the
 * legacy format oats.tree-legacy.v0 of oats lock v2 rows.
 */
export type IntegrityInput = Integrity | string | Partial<Record<TreeFormat, string>>;

/** The store's path segment of a tree format: `oats.tree-exec.v1` is `tree-exec-v1`. */
export function formatSegment(format: TreeFormat): string {
  return format.replace(/^oats\./, "").replaceAll(".", "-");
}

/** The `{format, value}` candidate an input names, before validation. */
function integrityCandidate(input: unknown): unknown {
  if (typeof input === "string") {
    const slash = input.lastIndexOf("/");
    if (slash !== -1) {
      const format = TREE_FORMATS.find((candidate) => formatSegment(candidate) === input.slice(0, slash));
      return { format: format ?? input.slice(0, slash), value: input.slice(slash + 1) };
    }
    const separator = input.lastIndexOf(":");
    return separator === -1
      ? { format: TREE_LEGACY, value: input }
      : { format: input.slice(0, separator), value: input.slice(separator + 1) };
  }
  if (input !== null && typeof input === "object" && !("format" in input) && !("value" in input)) {
    // The object digestTree returns: its exec digest when it has one, else its only digest.
    const entries = Object.entries(input);
    const exec = entries.find(([format]) => format === TREE_EXEC);
    const [format, value] = exec ?? (entries.length === 1 ? entries[0]! : [undefined, undefined]);
    return { format, value };
  }
  return input;
}

/**
 * Parse an integrity in any form {@link IntegrityInput} names. Abbreviated, uppercase and
 * unknown-format digests are refused (`invalid-artifact-reference`): a digest that names less than
 * a full SHA-256 names nothing.
 */
export function parseIntegrity(input: IntegrityInput): Integrity {
  const parsed = integritySchema.safeParse(integrityCandidate(input));
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue?.path.length ? `${issue.path.join(".")} ` : "";
    throw new OatsError(
      "invalid-artifact-reference",
      `invalid integrity ${JSON.stringify(input)}: ${where}${issue?.message ?? "malformed"}`,
      { integrity: input },
    );
  }
  return parsed.data;
}

/** parseIntegrity of an integrity that must name a tree in one of the `allowed` formats. */
export function parseTreeIntegrity(
  input: IntegrityInput,
  allowed: readonly TreeFormat[] = TREE_FORMATS,
): Integrity & { format: TreeFormat } {
  const integrity = parseIntegrity(input);
  if (!(allowed as readonly string[]).includes(integrity.format)) {
    const bare = integrity.format === TREE_LEGACY && typeof input === "string" && !input.includes(":");
    const meant =
      bare && allowed.includes(TREE_EXEC)
        ? `: a bare ${integrity.value} is ${TREE_LEGACY}; write ${TREE_EXEC}:${integrity.value} for the exec digest`
        : "";
    throw new OatsError(
      "invalid-artifact-reference",
      `integrity format ${integrity.format} cannot name this tree (expected ${allowed.join(" or ")})${meant}`,
      {
        integrity: integrityText(integrity),
      },
    );
  }
  return integrity as Integrity & { format: TreeFormat };
}
