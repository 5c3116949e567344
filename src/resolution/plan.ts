import { extname, isAbsolute, resolve } from "node:path";
import { parseByExtension, readOperatorFile, refuseProtoKeys } from "./operator-input.js";
import { z } from "zod";
import { type JsonValue, OatsError } from "../core/index.js";
import { identifierSchema } from "../retention/index.js";
import { ENTRYPOINT_ROLES, entrypointPathSchema, resolutionRecordSchema, sourceIdentitySchema } from "./record.js";

/**
 * A plan: what an operator asks `oats prepare` to resolve for one instance.
 * YAML (`.yaml`, `.yml`) or JSON (`.json`), validated strictly with zod.
 *
 *   schemaVersion: 1
 *   instance: <name>
 *   source?: {identity, revision, dir}
 *   capabilities: [{id, dir, lock}]        dir: a materialized capability directory,
 *                                          lock: its oats lock v2 file
 *   config?: [{pointer, value, origin: {kind, ref}, constraints?, considered?}]
 *   bindings?: {slot: {capability, payload, credentialRefs}}
 *   messaging?: {responsible: {kind, key}, teams}
 *   entrypoints: {name: {capability: <id> | "source", path, args?, role}}
 *
 * Relative paths resolve against the plan file's directory (`baseDir`).
 * Capability tarballs belong to the acquisition issue and are refused here.
 */

/** The pieces a plan shares with the record, taken from the record's own schema so the two cannot drift. */
const recordShape = resolutionRecordSchema.shape;
const configEntrySchema = recordShape.config.valueType;
const bindingSchema = recordShape.bindings.valueType;
const messagingSchema = recordShape.messaging;

/** Plans are small; anything larger is not a plan. */
export const MAX_PLAN_BYTES = 1 << 20;

const TARBALL = /\.(?:tgz|tar|tar\.gz|tar\.xz|tar\.bz2|tar\.zst|tbz2?|txz|zip)$/i;

const localPath = z
  .string()
  .min(1)
  .refine((path) => !path.includes("\0"), "must not contain NUL");

export const planSchema = z
  .object({
    schemaVersion: z.literal(1),
    instance: identifierSchema,
    source: z
      .object({
        identity: sourceIdentitySchema,
        revision: z.union([z.string().regex(/^[0-9a-f]{40}$/, "must be a full 40-hex commit"), z.literal("local")]),
        dir: localPath,
      })
      .strict()
      .optional(),
    capabilities: z.array(z.object({ id: identifierSchema, dir: localPath, lock: localPath }).strict()),
    config: z
      .array(
        configEntrySchema
          .extend({ pointer: z.string().regex(/^\//, "config pointers are JSON pointers starting with /") })
          .partial({ constraints: true, considered: true }),
      )
      .optional(),
    bindings: z.record(z.string().min(1), bindingSchema).optional(),
    messaging: messagingSchema.optional(),
    entrypoints: z.record(
      z.string().min(1),
      z
        .object({
          capability: identifierSchema,
          path: entrypointPathSchema,
          args: z.array(z.string()).optional(),
          role: z.enum(ENTRYPOINT_ROLES),
        })
        .strict(),
    ),
  })
  .strict();

export type Plan = z.infer<typeof planSchema>;
export type PlanCapability = Plan["capabilities"][number];

/** In a plan, an entry point's `capability: "source"` names the source tree. */
export const SOURCE_ENTRYPOINT = "source";

function invalid(message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-input", message, details);
}

/** A plan as a caller holds one: a {@link Plan} built in code, or the JSON document of a plan file. */
export type PlanInput = Plan | JsonValue;

/**
 * Validate a plan value and resolve its paths against `baseDir`. Idempotent:
 * a parsed plan (absolute paths) parses to itself. Refuses a malformed plan or a `__proto__` key with
 * `invalid-input`, the first problem's JSON pointer in `details.pointer`.
 */
export function parsePlan(value: PlanInput, baseDir: string): Plan {
  refuseProtoKeys(value, "plan");
  const parsed = planSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const pointer = `/${(issue?.path ?? []).map(String).join("/")}`;
    throw invalid(`plan: ${pointer}: ${issue?.message ?? "malformed"}`, {
      pointer,
      issues: parsed.error.issues
        .slice(0, 20)
        .map((each) => ({ pointer: `/${each.path.map(String).join("/")}`, message: each.message })),
    });
  }
  const plan = parsed.data;
  const base = resolve(baseDir);
  const at = (path: string) => (isAbsolute(path) ? resolve(path) : resolve(base, path));

  const ids = new Set<string>();
  const capabilities = plan.capabilities.map((capability, index) => {
    if (ids.has(capability.id)) {
      throw invalid(
        `plan: capability ${capability.id} is named more than once; a resolution ` +
          `selects exactly one artifact per capability`,
        {
          pointer: `/capabilities/${index}/id`,
          capability: capability.id,
        },
      );
    }
    if (capability.id === SOURCE_ENTRYPOINT) {
      throw invalid(
        `plan: capability id "${SOURCE_ENTRYPOINT}" is reserved in plans (entry points use it to name the source tree)`,
        { pointer: `/capabilities/${index}/id` },
      );
    }
    ids.add(capability.id);
    if (TARBALL.test(capability.dir)) {
      throw invalid(
        `plan: capability ${capability.id}: tarballs are not yet supported; give the materialized capability directory`,
        {
          pointer: `/capabilities/${index}/dir`,
          capability: capability.id,
          reason: "tarball-not-supported",
        },
      );
    }
    return { id: capability.id, dir: at(capability.dir), lock: at(capability.lock) };
  });

  const pointers = new Set<string>();
  for (const [index, entry] of (plan.config ?? []).entries()) {
    if (pointers.has(entry.pointer))
      throw invalid(`plan: config ${entry.pointer} is chosen more than once`, {
        pointer: `/config/${index}/pointer`,
        config: entry.pointer,
      });
    pointers.add(entry.pointer);
  }
  for (const [slot, binding] of Object.entries(plan.bindings ?? {})) {
    if (!ids.has(binding.capability))
      throw invalid(`plan: binding ${slot} names capability ${binding.capability}, which the plan does not list`, {
        slot,
        capability: binding.capability,
      });
  }
  for (const [name, entrypoint] of Object.entries(plan.entrypoints)) {
    if (entrypoint.capability === SOURCE_ENTRYPOINT ? !plan.source : !ids.has(entrypoint.capability)) {
      throw invalid(`plan: entry point ${name} names ${entrypoint.capability}, which the plan does not list`, {
        entrypoint: name,
        capability: entrypoint.capability,
      });
    }
  }
  return {
    ...plan,
    ...(plan.source ? { source: { ...plan.source, dir: at(plan.source.dir) } } : {}),
    capabilities,
  };
}

function readPlanBytes(path: string): Buffer {
  // A plan is the operator's own file: it may be reached through a symlink.
  return readOperatorFile(path, MAX_PLAN_BYTES, `plan ${path}`, { plan: path });
}

/** Parse the text of a plan file by its extension: `.json` as JSON, `.yaml`/`.yml` as YAML (one document, unique
 * keys, core schema). */
export function parsePlanText(text: string, extension: string, origin = "plan"): unknown {
  return parseByExtension(text, extension, origin, { plan: origin });
}

/** Read and validate a plan file; relative paths in it resolve against its directory. */
export function readPlanFile(path: string): Plan {
  const absolute = resolve(path);
  const extension = extname(absolute);
  if (![".json", ".yaml", ".yml"].includes(extension.toLowerCase()))
    throw invalid(`${path}: a plan file ends in .json, .yaml or .yml`, { plan: path, extension });
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(readPlanBytes(absolute));
  } catch (error) {
    if (error instanceof OatsError) throw error;
    throw invalid(`plan ${path} is not UTF-8`, { plan: path });
  }
  return parsePlan(parsePlanText(text, extension, `plan ${path}`) as JsonValue, resolve(absolute, ".."));
}
