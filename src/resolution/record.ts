import { posix } from "node:path";
import { z } from "zod";
import {
  IDENTIFIER_MAX_LENGTH,
  IDENTIFIER_PATTERN,
  SOURCE_KEY_PATTERN,
  DIGEST_VALUE_PATTERN,
  TREE_EXEC,
  TREE_LEGACY,
  sourceIdentityKey,
} from "../retention/index.js";

/**
 * A resolution record (schemaVersion 1): exactly what an instance or a queued
 * capture will run, with which non-secret configuration, and where each
 * choice came from. Its id is the oats.json.v1 digest of its canonical bytes,
 * never a runtime or session identity. See docs/design/resolution.md.
 */

const identifier = z.string().max(IDENTIFIER_MAX_LENGTH).regex(IDENTIFIER_PATTERN, "must match ^[a-z0-9][a-z0-9._-]*$");
const commit = z.string().regex(/^[0-9a-f]{40}$/, "must be a full 40-hex commit");
const digestValue = z.string().regex(DIGEST_VALUE_PATTERN, "must be sha256-<64 lowercase hex>");

/** The identity of everything new: an artifact is always named by its oats.tree-exec.v1 digest. */
export const execIntegritySchema = z.object({ format: z.literal(TREE_EXEC), value: digestValue }).strict();
const legacyIntegritySchema = z.object({ format: z.literal(TREE_LEGACY), value: digestValue }).strict();

export const artifactRefSchema = z
  .object({
    kind: z.enum(["capability", "source", "capture"]),
    key: z.string(),
    integrity: execIntegritySchema,
  })
  .strict()
  .superRefine((ref, context) => {
    const ok = ref.kind === "source" ? SOURCE_KEY_PATTERN.test(ref.key) : identifier.safeParse(ref.key).success;
    if (!ok)
      context.addIssue({
        code: "custom",
        path: ["key"],
        message: `invalid ${ref.kind} key ${JSON.stringify(ref.key)}`,
      });
  });

/** `git:<url>#<path>` or `path:<absolute dir>`. */
export const sourceIdentitySchema = z
  .string()
  .regex(/^git:[^\s#]+#[^\s]*$|^path:\/[^\0]*$/, "must be git:<url>#<path> or path:<absolute dir>");

const sourceSchema = z
  .object({
    identity: sourceIdentitySchema,
    revision: z.union([commit, z.literal("local")]),
    artifact: artifactRefSchema,
  })
  .strict()
  .refine((source) => source.artifact.kind === "source", {
    message: "the source artifact must be of kind source",
    path: ["artifact", "kind"],
  })
  .refine((source) => source.artifact.key === sourceIdentityKey(source.identity), {
    message: "the source artifact must be retained under the key of the source identity",
    path: ["artifact", "key"],
  });

const packageSchema = z
  .object({
    id: identifier,
    source: z.string().min(1),
    version: z.string().min(1),
    /** As the lock names it: a full commit, or `local` for a path: source. */
    commit: z.union([commit, z.literal("local")]).nullable(),
    integrity: digestValue.nullable(),
  })
  .strict();

const artifactEntrySchema = z
  .object({
    artifact: artifactRefSchema,
    package: packageSchema,
    legacyIntegrity: legacyIntegritySchema.nullable(),
  })
  .strict();

const json: z.ZodType<unknown> = z.json();

export const ORIGIN_KINDS = [
  "soul-requirement",
  "soul-default",
  "workspace-default",
  "import-adoption",
  "operator",
] as const;
const originSchema = z.object({ kind: z.enum(ORIGIN_KINDS), ref: z.string().min(1) }).strict();

const constraintSchema = z
  .object({
    kind: z.enum(["equals", "one-of", "minimum", "maximum", "pattern"]),
    value: json,
    origin: originSchema,
  })
  .strict();

const configEntrySchema = z
  .object({
    value: json,
    origin: originSchema,
    constraints: z.array(constraintSchema),
    considered: z.array(z.object({ value: json, origin: originSchema }).strict()),
  })
  .strict();

export const credentialRefSchema = z.union([
  z
    .object({
      kind: z.literal("env"),
      name: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"),
    })
    .strict(),
  z.object({ kind: z.literal("provider"), provider: z.string().min(1), key: z.string().min(1) }).strict(),
]);

const bindingSchema = z
  .object({
    capability: identifier,
    payload: json,
    credentialRefs: z.array(credentialRefSchema),
  })
  .strict();

const messagingSchema = z
  .object({
    responsible: z.object({ kind: z.enum(["human", "team"]), key: z.string().min(1) }).strict(),
    teams: z.array(z.string().min(1)),
  })
  .strict();

export const ENTRYPOINT_ROLES = ["command", "hook", "helper", "launch", "retire"] as const;

/** Relative, normalised, never climbing: checked lexically here and against the retained tree at prepare and read. */
export const entrypointPathSchema = z
  .string()
  .min(1)
  .refine(
    (path) =>
      !path.startsWith("/") &&
      posix.normalize(path) === path &&
      path !== ".." &&
      !path.startsWith("../") &&
      path !== ".",
    "must be a normalised relative path inside its artifact",
  );

const entrypointSchema = z
  .object({
    artifact: artifactRefSchema,
    path: entrypointPathSchema,
    args: z.array(z.string()),
    role: z.enum(ENTRYPOINT_ROLES),
  })
  .strict();

const evidenceSchema = z.object({ pointer: z.string(), kind: z.string().min(1), detail: z.string() }).strict();
const unresolvedSchema = z.object({ pointer: z.string(), reason: z.string().min(1) }).strict();

const LEVEL_ORDER = ["public", "internal", "confidential"] as const;
const levelSchema = z.enum(LEVEL_ORDER);
const envNameSchema = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name");

/**
 * What a capture record pins beyond its entry point (contract section 9):
 * the exact classification config and profile bytes (as oats.bytes.v1 blob
 * digests), the levels at prepare time, the non-secret environment, the names
 * of the credential variables it may receive, and the spec it came from.
 */
export const captureSchema = z
  .object({
    name: identifier,
    /** The name of the record's entry point that the capture runs. */
    entrypoint: z.string().min(1),
    target: z.object({ wing: z.string().min(1).optional(), repo: z.string().min(1).optional() }).strict(),
    classification: z
      .object({
        declared: levelSchema,
        derived: levelSchema,
        effective: levelSchema,
        config: digestValue,
        /** Where the config lived at prepare time: dispatch also honours a later tightening of that file. */
        configPath: z.string().regex(/^\//, "must be absolute"),
      })
      .strict(),
    profile: digestValue.nullable(),
    env: z.record(envNameSchema, z.string()),
    credentials: z.array(credentialRefSchema),
    spec: z.object({ path: z.string().regex(/^\//, "must be absolute"), blob: digestValue }).strict(),
    /** Present (and true) only when the capture may run as root; absent keeps older records' bytes. */
    privileged: z.literal(true).optional(),
  })
  .strict()
  .superRefine((capture, context) => {
    const rank = (level: (typeof LEVEL_ORDER)[number]) => LEVEL_ORDER.indexOf(level);
    const { declared, derived, effective } = capture.classification;
    if (rank(effective) !== Math.max(rank(declared), rank(derived))) {
      context.addIssue({
        code: "custom",
        path: ["classification", "effective"],
        message: "effective must be the stricter of declared and derived",
      });
    }
  });

export const RESOLUTION_STATUSES = ["complete", "reconstructed", "partial", "unknown"] as const;

type ArtifactRefShape = z.infer<typeof artifactRefSchema>;

/** The artifact of the record that an entry point's reference must equal. */
function selectedArtifact(
  record: {
    kind: string;
    artifacts: Record<string, { artifact: ArtifactRefShape }>;
    source: { artifact: ArtifactRefShape } | null;
    capture: { name: string } | null;
  },
  ref: ArtifactRefShape,
): ArtifactRefShape | undefined {
  if (ref.kind === "capability")
    return Object.hasOwn(record.artifacts, ref.key) ? record.artifacts[ref.key]!.artifact : undefined;
  if (ref.kind === "source") return record.source?.artifact;
  // A capture record runs its own capture tree, retained under the capture's name.
  return record.kind === "capture" && record.capture?.name === ref.key ? ref : undefined;
}

export const resolutionRecordSchema = z
  .object({
    schemaVersion: z.literal(1),
    kind: z.enum(["instance", "capture"]),
    status: z.enum(RESOLUTION_STATUSES),
    subject: z.union([z.object({ instance: identifier }).strict(), z.object({ capture: identifier }).strict()]),
    source: sourceSchema.nullable(),
    artifacts: z.record(identifier, artifactEntrySchema),
    config: z.record(z.string().regex(/^\//, "config keys are JSON pointers starting with /"), configEntrySchema),
    bindings: z.record(z.string().min(1), bindingSchema),
    messaging: messagingSchema.nullable(),
    entrypoints: z.record(z.string().min(1), entrypointSchema),
    capture: captureSchema.nullable(),
    evidence: z.array(evidenceSchema),
    unresolved: z.array(unresolvedSchema),
  })
  .strict()
  .superRefine((record, context) => {
    const subjectKind = "instance" in record.subject ? "instance" : "capture";
    if (subjectKind !== record.kind)
      context.addIssue({
        code: "custom",
        path: ["subject"],
        message: `a ${record.kind} record needs subject {${record.kind}: name}`,
      });
    if ((record.status === "complete" || record.status === "reconstructed") && record.unresolved.length > 0) {
      context.addIssue({
        code: "custom",
        path: ["unresolved"],
        message: `a ${record.status} record has no unresolved inputs`,
      });
    }
    if (record.status === "reconstructed" && record.evidence.length === 0) {
      context.addIssue({
        code: "custom",
        path: ["evidence"],
        message: "a reconstructed record needs evidence for its inputs",
      });
    }
    if ((record.status === "partial" || record.status === "unknown") && record.unresolved.length === 0) {
      context.addIssue({
        code: "custom",
        path: ["unresolved"],
        message: `a ${record.status} record lists what is unresolved`,
      });
    }
    if ((record.kind === "capture") !== (record.capture !== null)) {
      context.addIssue({
        code: "custom",
        path: ["capture"],
        message:
          record.kind === "capture" ? "a capture record pins its capture" : "only a capture record has a capture field",
      });
    }
    if (record.capture) {
      if (!("capture" in record.subject) || record.subject.capture !== record.capture.name) {
        context.addIssue({
          code: "custom",
          path: ["capture", "name"],
          message: "the capture name must equal the subject",
        });
      }
      if (!Object.hasOwn(record.entrypoints, record.capture.entrypoint)) {
        context.addIssue({
          code: "custom",
          path: ["capture", "entrypoint"],
          message: `entry point ${record.capture.entrypoint} is not in the record`,
        });
      }
    }
    for (const [id, entry] of Object.entries(record.artifacts)) {
      if (entry.artifact.kind !== "capability" || entry.artifact.key !== id) {
        context.addIssue({
          code: "custom",
          path: ["artifacts", id, "artifact"],
          message: `artifact of ${id} must be the capability ${id}`,
        });
      }
    }
    for (const [name, entrypoint] of Object.entries(record.entrypoints)) {
      const ref = entrypoint.artifact;
      const selected = selectedArtifact(record, ref);
      if (!selected || selected.key !== ref.key || selected.integrity.value !== ref.integrity.value) {
        context.addIssue({
          code: "custom",
          path: ["entrypoints", name, "artifact"],
          message: `entry point ${name} points into an artifact the record does not select`,
        });
      }
    }
    for (const [slot, binding] of Object.entries(record.bindings)) {
      if (!Object.hasOwn(record.artifacts, binding.capability)) {
        context.addIssue({
          code: "custom",
          path: ["bindings", slot, "capability"],
          message: `binding ${slot} names capability ${binding.capability}, which the record does not select`,
        });
      }
    }
  });

export type ResolutionRecord = z.infer<typeof resolutionRecordSchema>;
export type ArtifactRefRecord = z.infer<typeof artifactRefSchema>;
export type CredentialRef = z.infer<typeof credentialRefSchema>;
