import { z } from "zod";
import { OatsError } from "../core/index.js";
import type { ResolutionRecord } from "../resolution/index.js";
import { parseResolutionId } from "../resolution/index.js";
import {
  ARTIFACT_KINDS,
  IDENTIFIER_MAX_LENGTH,
  IDENTIFIER_PATTERN,
  SOURCE_KEY_PATTERN,
  type ArtifactKind,
  TREE_EXEC,
  digestHex,
  type Integrity,
  parseArtifactRef,
  type ArtifactRef,
  type ArtifactRefInput,
} from "../retention/index.js";

/**
 * The bundle's format (see bundle.ts): the manifest's rows and schema, the
 * paths items travel under, and the export operands. Pure.
 */

export const BUNDLE_MANIFEST = "manifest.json";
export const BUNDLE_SCHEMA_VERSION = 1;
/** The manifest is small (one row per item); anything larger is not ours. */
export const MAX_MANIFEST_BYTES = 16 << 20;

export interface BundleArtifactRow {
  readonly kind: ArtifactKind;
  readonly key: string;
  /** `oats.tree-exec.v1:sha256-<hex>` */
  readonly integrity: string;
  readonly path: string;
}

export interface BundleManifest {
  readonly schemaVersion: 1;
  readonly artifacts: BundleArtifactRow[];
  readonly resolutions: { readonly id: string; readonly path: string }[];
  readonly blobs: { readonly digest: string; readonly path: string }[];
}

// ------------------------------------------------------------------ layout

export function bundleArtifactPath(kind: ArtifactKind, key: string, integrity: Integrity): string {
  return `artifacts/${kind}/${key}/${digestHex(integrity)}`;
}

export function bundleResolutionPath(id: string): string {
  return `resolutions/${id}.json`;
}

export function bundleBlobPath(digest: string): string {
  return `blobs/${digest}`;
}

// ------------------------------------------------------------------ refs

export type ExportRef = string | ArtifactRefInput;

export type ParsedExportRef =
  | { readonly type: "artifact"; readonly ref: ArtifactRef }
  | { readonly type: "resolution"; readonly id: string };

const RESOLUTION_ID_TEXT = /^(?:oats\.json\.v1:)?sha256-[0-9a-f]{64}$/;

/**
 * One export operand: a resolution id (`sha256-<64 hex>`, an `oats.json.v1:`
 * prefix accepted), an artifact ref object, or the text form
 * `<kind>:<key>@<integrity>` (e.g. `capability:demo.hello@oats.tree-exec.v1:sha256-...`).
 */
export function parseExportRef(input: ExportRef): ParsedExportRef {
  if (typeof input === "string") {
    if (RESOLUTION_ID_TEXT.test(input)) return { type: "resolution", id: parseResolutionId(input) };
    const match = /^([a-z]+):([^@]+)@(.+)$/.exec(input);
    if (!match) {
      throw new OatsError(
        "invalid-artifact-reference",
        `invalid export reference ${JSON.stringify(input)}: expected ` +
          `<kind>:<key>@<integrity> or a resolution id sha256-<64 hex>`,
        { ref: input },
      );
    }
    return {
      type: "artifact",
      ref: parseArtifactRef({ kind: match[1] as ArtifactKind, key: match[2]!, integrity: match[3]! }),
    };
  }
  if (typeof input !== "object" || input === null)
    throw new OatsError("invalid-artifact-reference", "an export reference is a string or {kind, key, integrity}", {
      ref: input,
    });
  return { type: "artifact", ref: parseArtifactRef(input) };
}

export function artifactId(kind: string, key: string, value: string): string {
  return `${kind}\0${key}\0${value}`;
}

/** The blobs a record pins: a capture's classification config, profile and spec. */
export function pinnedBlobs(record: ResolutionRecord): string[] {
  if (!record.capture) return [];
  const digests = [record.capture.classification.config, record.capture.profile, record.capture.spec.blob];
  return [...new Set(digests.filter((digest): digest is string => digest !== null))];
}

// ------------------------------------------------------------------ manifest schema

const digestValue = /^sha256-[0-9a-f]{64}$/;
const keySchema = z.string().min(1).max(IDENTIFIER_MAX_LENGTH);

export const manifestSchema = z
  .object({
    schemaVersion: z.literal(BUNDLE_SCHEMA_VERSION),
    artifacts: z.array(
      z
        .object({
          kind: z.enum(ARTIFACT_KINDS),
          key: keySchema,
          integrity: z
            .string()
            .regex(/^oats\.tree-exec\.v1:sha256-[0-9a-f]{64}$/, "must be oats.tree-exec.v1:sha256-<64 hex>"),
          path: z.string(),
        })
        .strict(),
    ),
    resolutions: z.array(
      z.object({ id: z.string().regex(digestValue, "must be sha256-<64 hex>"), path: z.string() }).strict(),
    ),
    blobs: z.array(
      z.object({ digest: z.string().regex(digestValue, "must be sha256-<64 hex>"), path: z.string() }).strict(),
    ),
  })
  .strict()
  .superRefine((manifest, context) => {
    const seen = new Set<string>();
    const unique = (what: string, name: string, path: (string | number)[]) => {
      if (seen.has(name)) context.addIssue({ code: "custom", path, message: `${what} is listed more than once` });
      seen.add(name);
    };
    manifest.artifacts.forEach((row, index) => {
      const keyOk = row.kind === "source" ? SOURCE_KEY_PATTERN.test(row.key) : IDENTIFIER_PATTERN.test(row.key);
      if (!keyOk)
        context.addIssue({
          code: "custom",
          path: ["artifacts", index, "key"],
          message: `invalid ${row.kind} key ${JSON.stringify(row.key)}`,
        });
      const integrity: Integrity = { format: TREE_EXEC, value: row.integrity.slice(TREE_EXEC.length + 1) };
      if (row.path !== bundleArtifactPath(row.kind, row.key, integrity)) {
        context.addIssue({
          code: "custom",
          path: ["artifacts", index, "path"],
          message: `must be ${bundleArtifactPath(row.kind, row.key, integrity)}`,
        });
      }
      unique(`artifact ${row.kind} ${row.key} ${row.integrity}`, `a\0${row.kind}\0${row.key}\0${row.integrity}`, [
        "artifacts",
        index,
      ]);
    });
    manifest.resolutions.forEach((row, index) => {
      if (row.path !== bundleResolutionPath(row.id))
        context.addIssue({
          code: "custom",
          path: ["resolutions", index, "path"],
          message: `must be ${bundleResolutionPath(row.id)}`,
        });
      unique(`resolution ${row.id}`, `r\0${row.id}`, ["resolutions", index]);
    });
    manifest.blobs.forEach((row, index) => {
      if (row.path !== bundleBlobPath(row.digest))
        context.addIssue({
          code: "custom",
          path: ["blobs", index, "path"],
          message: `must be ${bundleBlobPath(row.digest)}`,
        });
      unique(`blob ${row.digest}`, `b\0${row.digest}`, ["blobs", index]);
    });
  });
