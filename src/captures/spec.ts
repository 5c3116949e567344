import { extname, isAbsolute, resolve } from "node:path";
import { z } from "zod";
import { type JsonValue, OatsError } from "../core/index.js";
import {
  decodeUtf8,
  parseByExtension,
  parseWith,
  parseYamlText,
  readOperatorFile,
  entrypointPathSchema,
} from "../resolution/index.js";
import { identifierSchema } from "../retention/index.js";
import { LEVELS } from "./classification.js";
import { isLoaderEnvName } from "./loader-env.js";
import { DEFAULT_REQUIRED_EVIDENCE, EVIDENCE_CLASSES, type EvidenceClass } from "./evidence-classes.js";
import { redactPatternsSchema, type RedactPattern } from "./redact-pattern.js";

/**
 * A capture spec: what an operator asks `oats capture prepare` to pin.
 * YAML (or JSON), strict:
 *
 *   schemaVersion: 1                      (optional)
 *   name: nightly-report                  the capture's name (an identifier)
 *   executable:                           exactly one of tree / capability
 *     tree: ./tool                        a directory, retained as capture <name>
 *     capability: demo.hello              or an installed capability (dir and lock
 *     dir: ...                            default to the scope's installed tree
 *     lock: ...                           and <scope>/oats-lock.json)
 *     path: bin/run                       entry point inside that tree
 *     args: [--fast]
 *   target: {wing?, repo?}
 *   classification: internal              declared level
 *   classificationConfig: ./classification.yaml
 *   profile: ./profile.yaml               optional capture profile, pinned
 *   env: {LOG_LEVEL: info}                optional non-secret environment
 *   loaderEnv: [NODE_OPTIONS]             names in env that change how an interpreter
 *                                         or the loader behaves (NODE_OPTIONS, LD_PRELOAD,
 *                                         OPENSSL_CONF, PYTHONPATH, ...: the loader table,
 *                                         loader-env.ts): pinned only when listed here; a
 *                                         file one names is relative to the executable
 *                                         tree's root and must lie inside the tree
 *                                         (loader-paths.ts, checked by capture prepare)
 *   credentials: [API_TOKEN]              optional names of credential variables
 *
 *   privileged: true                      optional: the capture may run as root (uid 0);
 *                                         absent or false, dispatch as root is refused
 *
 * Relative paths resolve against the spec file's directory. The capture
 * profile (also YAML) is `{schemaVersion: 1, requiredArtifactClasses?: [...],
 * retention?: {keepLast?, maxAgeDays?}, evidence?: {required: [class...]},
 * redact?: [{name, pattern, flags?}]}`; its exact bytes are pinned, and its
 * digest is part of the approved composition. `evidence.required` names the
 * evidence classes a run record must carry (evidence-classes.ts; all of
 * them when the profile or the key is absent); `redact` names the patterns
 * masked in run logs (redact-pattern.ts says which patterns are refused).
 */

export const MAX_SPEC_BYTES = 1 << 20;
export const MAX_PROFILE_BYTES = 1 << 20;

const localPath = z
  .string()
  .min(1)
  .refine((path) => !path.includes("\0"), "must not contain NUL");
const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name");
const level = z.enum(LEVELS);

const executableSchema = z
  .object({
    tree: localPath.optional(),
    capability: identifierSchema.optional(),
    dir: localPath.optional(),
    lock: localPath.optional(),
    path: entrypointPathSchema,
    args: z.array(z.string()).default([]),
  })
  .strict()
  .superRefine((executable, context) => {
    if ((executable.tree === undefined) === (executable.capability === undefined)) {
      context.addIssue({
        code: "custom",
        path: [],
        message: "give exactly one of tree (a directory) or capability (an id)",
      });
    }
    if (executable.tree !== undefined && (executable.dir !== undefined || executable.lock !== undefined)) {
      context.addIssue({
        code: "custom",
        path: [executable.dir !== undefined ? "dir" : "lock"],
        message: "dir and lock belong to a capability executable",
      });
    }
  });

export const specSchema = z
  .object({
    schemaVersion: z.literal(1).optional(),
    name: identifierSchema,
    executable: executableSchema,
    target: z
      .object({ wing: z.string().min(1).optional(), repo: z.string().min(1).optional() })
      .strict()
      .default({}),
    classification: level,
    classificationConfig: localPath,
    profile: localPath.optional(),
    env: z.record(envName, z.string()).default({}),
    loaderEnv: z.array(envName).default([]),
    credentials: z.array(envName).default([]),
    privileged: z.boolean().optional(),
  })
  .strict()
  .superRefine((spec, context) => {
    const listed = new Set(spec.loaderEnv);
    for (const name of Object.keys(spec.env)) {
      if (isLoaderEnvName(name) && !listed.has(name)) {
        context.addIssue({
          code: "custom",
          path: ["env", name],
          message:
            `${name} changes how the interpreter or the loader behaves; pin it only ` +
            `deliberately, by listing it under loaderEnv`,
        });
      }
    }
    spec.loaderEnv.forEach((name, index) => {
      if (!Object.hasOwn(spec.env, name))
        context.addIssue({
          code: "custom",
          path: ["loaderEnv", index],
          message: `${name} is listed under loaderEnv but not pinned in env`,
        });
    });
    const seen = new Set<string>();
    spec.credentials.forEach((name, index) => {
      if (seen.has(name))
        context.addIssue({
          code: "custom",
          path: ["credentials", index],
          message: `credential ${name} is listed twice`,
        });
      // A credential's value comes from the dispatcher's environment, unseen by the approver.
      if (isLoaderEnvName(name))
        context.addIssue({
          code: "custom",
          path: ["credentials", index],
          message:
            `${name} changes how the interpreter or the loader behaves and cannot be ` +
            `a credential (its value would come unapproved from the dispatcher's environment)`,
        });
      if (Object.hasOwn(spec.env, name))
        context.addIssue({
          code: "custom",
          path: ["credentials", index],
          message: `${name} is both a pinned env value and a credential`,
        });
      seen.add(name);
    });
  });

export type CaptureSpec = z.infer<typeof specSchema>;

/** A spec whose paths are absolute, plus where it came from and its exact bytes (pinned as a blob). */
export interface LoadedCaptureSpec {
  readonly spec: CaptureSpec;
  readonly path: string;
  readonly bytes: Buffer;
}

export const profileSchema = z
  .object({
    schemaVersion: z.literal(1),
    requiredArtifactClasses: z.array(identifierSchema).optional(),
    retention: z
      .object({ keepLast: z.number().int().min(1).optional(), maxAgeDays: z.number().int().min(1).optional() })
      .strict()
      .optional(),
    evidence: z
      .object({
        required: z
          .array(z.enum(EVIDENCE_CLASSES))
          .refine((classes) => new Set(classes).size === classes.length, "an evidence class is listed twice"),
      })
      .strict()
      .optional(),
    redact: redactPatternsSchema.optional(),
  })
  .strict();

export type CaptureProfile = z.infer<typeof profileSchema>;

/** What a pinned profile (or none) asks of a run: the required evidence classes and the redaction patterns. */
export interface ProfileEvidencePolicy {
  readonly required: readonly EvidenceClass[];
  readonly redact: readonly RedactPattern[];
}

/**
 * What a pinned profile asks of a run: the evidence classes it requires (the default set when it names none,
 * or when there is no profile) and its redaction patterns.
 */
export function evidencePolicy(profile: CaptureProfile | null): ProfileEvidencePolicy {
  return {
    required:
      profile?.evidence === undefined
        ? [...DEFAULT_REQUIRED_EVIDENCE]
        : EVIDENCE_CLASSES.filter((name) => profile.evidence!.required.includes(name)),
    redact: profile?.redact ?? [],
  };
}

/** Parse the exact bytes of a pinned profile (read back from its blob at dispatch). */
export function parseCaptureProfileBytes(bytes: Buffer, origin: string): CaptureProfile {
  const value = parseYamlText(decodeUtf8(bytes, origin, { profile: origin }), origin, { profile: origin });
  return parseWith(profileSchema, value, origin, { profile: origin });
}

/** A capture spec as a caller holds one: a {@link CaptureSpec} built in code, or the JSON document of a spec file. */
export type CaptureSpecInput = CaptureSpec | JsonValue;

/**
 * Validate a spec value; relative paths resolve against `baseDir`. A malformed spec or a `__proto__` key is
 * refused with `invalid-input`, the first problem's JSON pointer in `details.pointer`.
 * @param origin names the spec in a refusal's message
 */
export function parseCaptureSpec(value: CaptureSpecInput, baseDir: string, origin = "capture spec"): CaptureSpec {
  const spec = parseWith(specSchema, value, origin, { spec: origin });
  const at = (path: string) => (isAbsolute(path) ? resolve(path) : resolve(baseDir, path));
  const { tree, dir, lock } = spec.executable;
  return {
    ...spec,
    executable: {
      ...spec.executable,
      ...(tree === undefined ? {} : { tree: at(tree) }),
      ...(dir === undefined ? {} : { dir: at(dir) }),
      ...(lock === undefined ? {} : { lock: at(lock) }),
    },
    classificationConfig: at(spec.classificationConfig),
    ...(spec.profile === undefined ? {} : { profile: at(spec.profile) }),
  };
}

/** Read and validate a capture spec file. */
export function readCaptureSpecFile(path: string): LoadedCaptureSpec {
  const absolute = resolve(path);
  const origin = `capture spec ${path}`;
  const extension = extname(absolute);
  if (![".json", ".yaml", ".yml"].includes(extension.toLowerCase())) {
    throw new OatsError("invalid-input", `${origin}: a capture spec ends in .json, .yaml or .yml`, {
      spec: path,
      extension,
    });
  }
  const bytes = readOperatorFile(absolute, MAX_SPEC_BYTES, origin, { spec: path });
  const value = parseByExtension(decodeUtf8(bytes, origin, { spec: path }), extension, origin, { spec: path });
  return { spec: parseCaptureSpec(value as JsonValue, resolve(absolute, ".."), origin), path: absolute, bytes };
}

/** Read and validate a capture profile; returns the exact bytes to pin. */
export function readCaptureProfileFile(path: string): { bytes: Buffer; profile: CaptureProfile } {
  const origin = `capture profile ${path}`;
  const bytes = readOperatorFile(path, MAX_PROFILE_BYTES, origin, { profile: path });
  const value = parseYamlText(decodeUtf8(bytes, origin, { profile: path }), origin, { profile: path });
  return { bytes, profile: parseWith(profileSchema, value, origin, { profile: path }) };
}
