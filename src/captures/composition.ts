import { z } from "zod";
import { type JsonValue, OatsError, jsonDigest } from "../core/index.js";
import { JSON_V1, integrityText } from "../retention/index.js";
import type { ResolutionRecord } from "../resolution/index.js";
import { LEVELS } from "./classification.js";
import { isLoaderEnvName } from "./loader-env.js";

/**
 * A capture's composition (format `oats.capture-composition.v1`): every field
 * that decides what a dispatch runs, or under which gate, and nothing else.
 *
 *   {format, capture, executable: {kind, key, integrity}, entrypoint: {path, args},
 *    env: {NAME: value}, loaderEnv: [NAME], credentials: [NAME],
 *    target: {wing?, repo?}, classification: {declared, config, configPath},
 *    profile, privileged?}
 *
 * - `executable.integrity` is the tree's oats.tree-exec.v1 digest (bytes and
 *   owner-exec bits of every file).
 * - `classification.config` and `profile` are the oats.bytes.v1 digests of
 *   the pinned bytes; `configPath` is where dispatch looks for a later
 *   tightening, so pointing a capture at another config is a change too.
 * - `loaderEnv` names the pinned variables that change how an interpreter or
 *   the loader behaves (every variable of the loader table, loader-env.ts,
 *   but an inert one): a spec may pin them only by listing them, and the
 *   approver sees them apart.
 * - `privileged: true` is present only when the capture may run as root;
 *   absent, dispatch as uid 0 is refused (privilege.ts). Absent is not
 *   written as false, so compositions approved before the field existed
 *   keep their digests.
 *
 * The composition is a pure function of the capture record, and its
 * oats.json.v1 digest is what an operator approves: the approval subject is
 * `{kind: "composition", key: <capture name>, integrity: "oats.json.v1:sha256-…"}`.
 * The spec's own bytes (comments, key order) and the derived levels are left
 * out: they change nothing that runs, and the derived level is recomputed
 * from the pinned config bytes at every dispatch.
 */

export const COMPOSITION_FORMAT = "oats.capture-composition.v1";
export const COMPOSITION_KIND = "composition";

const digest = z.string().regex(/^sha256-[0-9a-f]{64}$/);
const compositionSchema = z
  .object({
    format: z.literal(COMPOSITION_FORMAT),
    capture: z.string().min(1),
    executable: z.object({ kind: z.string(), key: z.string(), integrity: z.string() }).strict(),
    entrypoint: z.object({ path: z.string(), args: z.array(z.string()) }).strict(),
    env: z.record(z.string(), z.string()),
    loaderEnv: z.array(z.string()),
    credentials: z.array(z.string()),
    target: z.object({ wing: z.string().optional(), repo: z.string().optional() }).strict(),
    classification: z.object({ declared: z.enum(LEVELS), config: digest, configPath: z.string() }).strict(),
    profile: digest.nullable(),
    privileged: z.literal(true).optional(),
  })
  .strict();

export type CaptureComposition = z.infer<typeof compositionSchema>;

export interface CompositionSubject {
  kind: typeof COMPOSITION_KIND;
  /** The capture's name. */
  key: string;
  /** `oats.json.v1:sha256-<hex>` of the composition. */
  integrity: string;
}

/** The composition of a capture record (pure). */
export function compositionOf(record: ResolutionRecord): CaptureComposition {
  const capture = record.capture;
  const entrypoint = capture ? record.entrypoints[capture.entrypoint] : undefined;
  if (!capture || !entrypoint)
    throw new OatsError("invalid-resolution", "not a capture record: it has no capture entry point", {
      kind: record.kind,
    });
  const env = Object.fromEntries(Object.entries(capture.env));
  return {
    format: COMPOSITION_FORMAT,
    capture: capture.name,
    executable: {
      kind: entrypoint.artifact.kind,
      key: entrypoint.artifact.key,
      integrity: integrityText(entrypoint.artifact.integrity),
    },
    entrypoint: { path: entrypoint.path, args: [...entrypoint.args] },
    env,
    loaderEnv: Object.keys(env).filter(isLoaderEnvName).sort(),
    credentials: capture.credentials.map((ref) => (ref.kind === "env" ? ref.name : `${ref.provider}:${ref.key}`)),
    target: { ...capture.target },
    classification: {
      declared: capture.classification.declared,
      config: capture.classification.config,
      configPath: capture.classification.configPath,
    },
    profile: capture.profile,
    ...(capture.privileged === true ? { privileged: true as const } : {}),
  };
}

/** The subject an operator approves so that this exact composition may dispatch. */
export function compositionSubject(composition: CaptureComposition): CompositionSubject {
  return { kind: COMPOSITION_KIND, key: composition.capture, integrity: `${JSON_V1}:${jsonDigest(composition)}` };
}

/**
 * A composition read back (from its pinned blob or a ledger entry); anything else, a missing one included, is
 * `invalid-input`.
 * @param origin names where the composition came from in a refusal's message
 */
export function parseComposition(
  value: CaptureComposition | JsonValue | undefined,
  origin: string,
): CaptureComposition {
  const parsed = compositionSchema.safeParse(value);
  if (!parsed.success) {
    throw new OatsError(
      "invalid-input",
      `${origin} is not an ${COMPOSITION_FORMAT} composition: ${parsed.error.issues[0]?.message ?? "invalid"}`,
      { origin, issues: parsed.error.issues },
    );
  }
  return parsed.data;
}

/**
 * The fields in which two compositions differ, as dotted paths
 * (`env.NODE_OPTIONS`, `entrypoint.args`, `classification.config`): what a
 * refusal names when a re-prepared capture no longer matches its approval.
 */
export function compositionChanges(approved: CaptureComposition, current: CaptureComposition): string[] {
  const changes: string[] = [];
  const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
  const keyed = (prefix: string, a: Record<string, unknown>, b: Record<string, unknown>) => {
    for (const key of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      if (!same(Object.hasOwn(a, key) ? a[key] : undefined, Object.hasOwn(b, key) ? b[key] : undefined))
        changes.push(`${prefix}.${key}`);
    }
  };
  keyed("executable", approved.executable, current.executable);
  keyed("entrypoint", approved.entrypoint, current.entrypoint);
  keyed("env", approved.env, current.env);
  if (!same(approved.credentials, current.credentials)) changes.push("credentials");
  keyed("target", approved.target, current.target);
  keyed("classification", approved.classification, current.classification);
  if (!same(approved.profile, current.profile)) changes.push("profile");
  if (approved.privileged !== current.privileged) changes.push("privileged");
  return changes;
}

/** Human lines that show an approver what a composition runs. Values of the pinned env are shown: records never hold
 * secrets. */
export function compositionSummary(composition: CaptureComposition): string[] {
  const { executable, entrypoint, classification, target } = composition;
  const env = Object.entries(composition.env).map(([name, value]) => `${name}=${JSON.stringify(value)}`);
  return [
    `executable   ${executable.kind} ${executable.key} ${executable.integrity}`,
    `entry point  ${[entrypoint.path, ...entrypoint.args.map((arg) => JSON.stringify(arg))].join(" ")}`,
    `env          ${env.length ? env.join(" ") : "(none)"}`,
    ...(composition.loaderEnv.length
      ? [`loader env   ${composition.loaderEnv.join(", ")} (changes how the interpreter or loader behaves)`]
      : []),
    `credentials  ${composition.credentials.length ? composition.credentials.join(", ") : "(none)"}`,
    `target       ${
      Object.entries(target)
        .map(([key, value]) => `${key}=${value}`)
        .join(" ") || "(none)"
    }`,
    `declared     ${classification.declared}; config ${classification.config} at ${classification.configPath}`,
    `profile      ${composition.profile ?? "(none)"}`,
    ...(composition.privileged === true ? ["privileged   yes: may run as root (uid 0)"] : []),
  ];
}
