import { z } from "zod";
import { OatsError } from "../core/index.js";
import {
  decodeUtf8,
  escapePointerSegment,
  parseYamlText,
  readOperatorFile,
  refuseProtoKeys,
} from "../resolution/index.js";

/**
 * Classification of captures (contract section 9). Pure functions over a
 * parsed classification config; the only I/O is `readClassificationConfigFile`
 * (which reads the bytes a capture pins); `currentPrincipal` (who this
 * process runs as) is in principal.ts.
 *
 * Levels are ordered `public < internal < confidential`; "stricter" is the
 * maximum. Every combination here takes the strictest level involved, so no
 * input can ever loosen a level another input set.
 */

export const LEVELS = ["public", "internal", "confidential"] as const;
export type Level = (typeof LEVELS)[number];

export const PRINCIPAL_KINDS = ["sovereign", "non-sovereign"] as const;
export type PrincipalKind = (typeof PRINCIPAL_KINDS)[number];

/** The fallback of a config that names none: an unknown target is confidential. */
export const DEFAULT_FALLBACK: Level = "confidential";

/** Largest classification config read from disk. */
export const MAX_CLASSIFICATION_CONFIG_BYTES = 1024 * 1024;

/** Whether a value is one of the classification levels (`public`, `internal`, `confidential`). */
export function isLevel(value: unknown): value is Level {
  return typeof value === "string" && (LEVELS as readonly string[]).includes(value);
}

function rank(level: Level): number {
  const index = LEVELS.indexOf(level);
  // A value that is not a level (only reachable through an unchecked cast) is treated as the strictest.
  return index < 0 ? LEVELS.length - 1 : index;
}

/** The stricter of two levels. */
export function stricter(a: Level, b: Level): Level {
  return rank(a) >= rank(b) ? a : b;
}

/** The strictest of `levels`; `public` for none (the identity of `stricter`). */
export function strictest(levels: Iterable<Level>): Level {
  let result: Level = "public";
  for (const level of levels) result = stricter(result, level);
  return result;
}

export interface ClassificationDefault {
  readonly match: string;
  readonly level: Level;
}

/** A validated config. Name-keyed tables are Maps: no key ever reaches Object.prototype. */
export interface ClassificationConfig {
  readonly schemaVersion: 1;
  readonly wings: ReadonlyMap<string, Level>;
  readonly repos: ReadonlyMap<string, Level>;
  readonly defaults: readonly ClassificationDefault[];
  readonly fallback: Level;
  readonly principals: ReadonlyMap<string, PrincipalKind>;
}

const levelSchema = z.enum(LEVELS);
const nameSchema = z.string().min(1, "a name is not empty");

export const configSchema = z
  .object({
    schemaVersion: z.literal(1),
    wings: z.record(nameSchema, levelSchema).optional(),
    repos: z.record(nameSchema, levelSchema).optional(),
    defaults: z
      .array(z.object({ match: z.string().min(1, "a glob is not empty"), level: levelSchema }).strict())
      .optional(),
    fallback: levelSchema.default(DEFAULT_FALLBACK),
    principals: z.record(nameSchema, z.enum(PRINCIPAL_KINDS)).optional(),
  })
  .strict();

function invalid(message: string, details: Record<string, unknown> = {}): OatsError {
  return new OatsError("invalid-input", message, details);
}

function mapOf<V>(record: Record<string, V> | undefined): Map<string, V> {
  const map = new Map<string, V>();
  if (record) for (const key of Object.keys(record)) map.set(key, record[key] as V);
  return map;
}

/**
 * Parse and validate the exact bytes of a classification config: UTF-8, one
 * YAML document (core schema, duplicate keys refused), then the strict schema.
 * Any failure is `invalid-input` naming the offending path; nothing else
 * happens on invalid input.
 */
export function parseClassificationConfig(bytes: Buffer, origin = "classification config"): ClassificationConfig {
  const text = decodeUtf8(bytes, origin, { config: origin });
  const value = parseYamlText(text, origin, { config: origin });
  refuseProtoKeys(value, origin);
  const parsed = configSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const pointer = `/${(issue?.path ?? []).map((part) => escapePointerSegment(String(part))).join("/")}`;
    throw invalid(`${origin}: ${pointer}: ${issue?.message ?? "malformed"}`, {
      config: origin,
      pointer,
      issues: parsed.error.issues.length,
    });
  }
  const data = parsed.data;
  return {
    schemaVersion: 1,
    wings: mapOf(data.wings),
    repos: mapOf(data.repos),
    defaults: (data.defaults ?? []).map(({ match, level }) => ({ match, level })),
    fallback: data.fallback,
    principals: mapOf(data.principals),
  };
}

/** Read a classification config file (the operator's own file: a symlink is followed) and parse it; returns the exact
 * bytes to pin. */
export function readClassificationConfigFile(path: string): { bytes: Buffer; config: ClassificationConfig } {
  const bytes = readClassificationConfigBytes(path);
  return { bytes, config: parseClassificationConfig(bytes, classificationConfigOrigin(path)) };
}

/** How a config file is named in refusals. */
export function classificationConfigOrigin(path: string): string {
  return `classification config ${path}`;
}

/** The exact bytes of a config file, unparsed (a dispatcher parses each exact content once). */
export function readClassificationConfigBytes(path: string): Buffer {
  return readOperatorFile(path, MAX_CLASSIFICATION_CONFIG_BYTES, classificationConfigOrigin(path), { config: path });
}

/**
 * Anchored, case-sensitive glob match where `*` is any run of characters
 * (including none) and `?` is exactly one; every other character is literal.
 * No regular expression is built, so nothing in a pattern can be interpreted
 * as one, and matching is linear-ish (greedy with one backtrack point).
 */
export function globMatch(pattern: string, name: string): boolean {
  const p = Array.from(pattern);
  const s = Array.from(name);
  let pi = 0;
  let si = 0;
  let starAt = -1;
  let resumeAt = 0;
  while (si < s.length) {
    if (pi < p.length && p[pi] === "*") {
      starAt = pi++;
      resumeAt = si;
    } else if (pi < p.length && (p[pi] === "?" || p[pi] === s[si])) {
      pi++;
      si++;
    } else if (starAt >= 0) {
      pi = starAt + 1;
      si = ++resumeAt;
    } else {
      return false;
    }
  }
  while (pi < p.length && p[pi] === "*") pi++;
  return pi === p.length;
}

export interface ClassificationTarget {
  readonly wing?: string;
  readonly repo?: string;
}

export type ClassificationMatch =
  | { readonly source: "wing"; readonly key: string; readonly level: Level }
  | { readonly source: "repo"; readonly key: string; readonly level: Level }
  | { readonly source: "default"; readonly match: string; readonly against: string; readonly level: Level };

export interface DerivedLevel {
  readonly level: Level;
  /** Every entry that matched the target; empty when the fallback applied. */
  readonly matched: readonly ClassificationMatch[];
  readonly fallback: boolean;
}

/**
 * The level a config derives for a target: the strictest of the wing's level,
 * the repo's level and every default whose glob matches the wing or repo
 * name. A target nothing matches gets the config's fallback.
 */
export function deriveLevel(config: ClassificationConfig, target: ClassificationTarget): DerivedLevel {
  const matched: ClassificationMatch[] = [];
  const { wing, repo } = target;
  if (wing !== undefined) {
    const level = config.wings.get(wing);
    if (level !== undefined) matched.push({ source: "wing", key: wing, level });
  }
  if (repo !== undefined) {
    const level = config.repos.get(repo);
    if (level !== undefined) matched.push({ source: "repo", key: repo, level });
  }
  for (const entry of config.defaults) {
    for (const name of [repo, wing]) {
      if (name !== undefined && globMatch(entry.match, name)) {
        matched.push({ source: "default", match: entry.match, against: name, level: entry.level });
        break;
      }
    }
  }
  if (matched.length === 0) return { level: config.fallback, matched, fallback: true };
  return { level: strictest(matched.map((entry) => entry.level)), matched, fallback: false };
}

export interface EffectiveClassification {
  readonly declared: Level;
  readonly pinned: Level;
  readonly current: Level | null;
  readonly effective: Level;
  /** The caller's declared level differs from the level the pinned config derives: a security event. */
  readonly mismatch: boolean;
}

/**
 * Effective = strictest of the declared level, the level the pinned config
 * derives and (when a current config is present) the level it derives now. A
 * later tightening of the config is honoured; a later loosening is not, since
 * the pinned level still takes part.
 */
export function effectiveClassification(input: {
  declared: Level;
  pinned: Level;
  current?: Level | null;
}): EffectiveClassification {
  const { declared, pinned } = input;
  const current = input.current ?? null;
  for (const [name, value] of [
    ["declared", declared],
    ["pinned", pinned],
    ["current", current ?? "public"],
  ] as const) {
    if (!isLevel(value))
      throw invalid(`classification: ${name} is not a level: ${JSON.stringify(value)}`, { [name]: value });
  }
  const levels: Level[] = [declared, pinned];
  if (current !== null) levels.push(current);
  return { declared, pinned, current, effective: strictest(levels), mismatch: declared !== pinned };
}

/**
 * The dispatch gate: a confidential capture runs only for a principal the
 * config names `sovereign`. An unknown principal is not sovereign.
 */
export function classificationGate(input: { effective: Level; principal: string; config: ClassificationConfig }): {
  allowed: true;
} {
  const { effective, principal, config } = input;
  if (effective === "public" || effective === "internal") return { allowed: true };
  // Anything else (confidential, or a value that is not a level) needs a sovereign principal.
  const kind = config.principals.get(principal);
  if (kind !== "sovereign") {
    throw new OatsError(
      "classification-refused",
      `a ${String(effective)} capture cannot be dispatched by ${principal}: ` +
        `the classification config does not name it sovereign`,
      {
        effective,
        principal,
        principalKind: kind ?? "unknown",
      },
    );
  }
  return { allowed: true };
}

/** The principal lives in principal.ts (user-namespace and setuid refusals); re-exported for existing callers. */
export { currentPrincipal } from "../ledger/index.js";
