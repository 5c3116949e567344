import { stat } from "node:fs/promises";
import { capabilityArtifactEntry } from "./artifact-entry.js";
import { type JsonValue, OatsError, errnoCode, canonicalJsonBytes } from "../core/index.js";
import {
  capabilityRows,
  readLockFile,
  type OatsLock,
  retainCapabilityArtifact,
  retainTree,
  type RetainOptions,
  pinSourceIdentity,
  sourceIdentityKey,
  inspectStoreAt,
  resolveScope,
  withPublishLease,
} from "../retention/index.js";
import { parsePlan, type PlanInput, SOURCE_ENTRYPOINT, type Plan } from "./plan.js";
import { resolveEntrypoint } from "./read.js";
import type { ArtifactRefRecord, ResolutionRecord } from "./record.js";
import { escapePointerSegment, findArgSecrets, findSecrets, secretRefusal, type SecretFinding } from "./secrets.js";
import {
  INSTANCE_REFS_DIR,
  RESOLUTIONS_DIR,
  instanceRefPath,
  writeInstanceRef,
  writeResolution,
  type InstanceRef,
} from "./store.js";

/**
 * prepare(scope, plan): turn a plan into a complete resolution record and
 * point the instance at it. The order is the guarantee:
 *
 * 1. validate everything that needs no side effect: the plan, its ids, the
 *    locks and their rows, the store components, and every value bound for
 *    the record, scanned for secrets (`secret-in-record`);
 * 2. retain every capability (legacy revision checked against its lock row
 *    and provenance, then the oats.tree-exec.v1 revision the record names,
 *    required to be the same tree) and the source;
 * 3. build the record and check every entry point inside its retained tree;
 * 4. commit the record (staged, fsync, link: never replaces);
 * 5. only then move the instance reference (staged, fsync, rename).
 *
 * A failure at any step leaves the old reference in force and no record for
 * it to select; artifacts already retained may stay (they are content
 * addressed and harmless). A crash between 4 and 5 leaves a record that no
 * reference selects.
 */

export interface PrepareOptions extends RetainOptions {
  /** Where relative paths of a plan value resolve (a plan from readPlanFile is already absolute). Default: the
   * working directory. */
  readonly baseDir?: string;
}

export interface PrepareResult {
  readonly id: string;
  readonly record: ResolutionRecord;
  /** `kept` when exactly this record was already in the scope. */
  readonly status: "written" | "kept";
  readonly instance: string;
  readonly ref: InstanceRef;
}

/** Points of prepare where tests can stop or fail it (like the retention store's fault hook). No-op without a hook. */
export type PrepareStep = "retained" | "record-written";
type PrepareHook = (step: PrepareStep) => void | Promise<void>;
let hook: PrepareHook | null = null;

/** Internal, for tests: not exported from the package index. */
export function setPrepareHook(next: PrepareHook | null): void {
  hook = next;
}

interface CheckedCapability {
  readonly id: string;
  readonly dir: string;
  readonly lock: OatsLock;
  readonly rows: ReturnType<typeof capabilityRows>;
}

/** Every value of the plan that ends up in the record, scanned; pointers name the record's fields. */
export function planSecretFindings(plan: Plan, capabilities: readonly CheckedCapability[]): SecretFinding[] {
  const findings: SecretFinding[] = [];
  findings.push(...findSecrets(plan.instance, "/subject/instance"));
  if (plan.source) findings.push(...findSecrets(plan.source.identity, "/source/identity"));
  for (const { id, rows } of capabilities) {
    const at = `/artifacts/${escapePointerSegment(id)}/package`;
    findings.push(
      ...findSecrets({ id: rows.packageId, source: rows.package.source, version: rows.package.version }, at),
    );
  }
  for (const entry of plan.config ?? []) {
    const segments = entry.pointer.split("/");
    const key = (segments.at(-1) ?? "").replace(/~1/g, "/").replace(/~0/g, "~");
    if (findSecrets(entry.pointer, "").length > 0) {
      findings.push({ pointer: "/config", kind: "secret-in-config-pointer" });
      continue;
    }
    const at = `/config/${escapePointerSegment(entry.pointer)}`;
    findings.push(...findSecrets(entry.value as JsonValue, `${at}/value`, { key }));
    for (const [index, constraint] of (entry.constraints ?? []).entries()) {
      findings.push(...findSecrets(constraint.value as JsonValue, `${at}/constraints/${index}/value`, { key }));
    }
    for (const [index, considered] of (entry.considered ?? []).entries()) {
      findings.push(...findSecrets(considered.value as JsonValue, `${at}/considered/${index}/value`, { key }));
    }
    findings.push(...findSecrets(entry.origin, `${at}/origin`));
  }
  findings.push(...findSecrets((plan.bindings ?? {}) as JsonValue, "/bindings"));
  findings.push(...findSecrets(plan.messaging ?? null, "/messaging"));
  for (const [name, entrypoint] of Object.entries(plan.entrypoints)) {
    if (findSecrets(name, "").length > 0) {
      findings.push({ pointer: "/entrypoints", kind: "secret-in-entrypoint-name" });
      continue;
    }
    const at = `/entrypoints/${escapePointerSegment(name)}`;
    findings.push(
      ...findSecrets({ path: entrypoint.path }, at),
      ...findArgSecrets(entrypoint.args ?? [], `${at}/args`),
    );
  }
  return findings;
}

function sameJson(a: unknown, b: unknown): boolean {
  return canonicalJsonBytes(a).equals(canonicalJsonBytes(b));
}

type ConfigEntry = NonNullable<Plan["config"]>[number];
type Constraint = NonNullable<ConfigEntry["constraints"]>[number];

/** A selected value must satisfy every hard constraint kept beside it. */
function checkConstraint(entry: ConfigEntry, constraint: Constraint, index: number): void {
  const value = entry.value;
  let ok: boolean;
  switch (constraint.kind) {
    case "equals":
      ok = sameJson(value, constraint.value);
      break;
    case "one-of":
      ok = Array.isArray(constraint.value) && constraint.value.some((option) => sameJson(value, option));
      break;
    case "minimum":
      ok = typeof value === "number" && typeof constraint.value === "number" && value >= constraint.value;
      break;
    case "maximum":
      ok = typeof value === "number" && typeof constraint.value === "number" && value <= constraint.value;
      break;
    case "pattern":
      try {
        ok =
          typeof value === "string" &&
          typeof constraint.value === "string" &&
          new RegExp(constraint.value, "u").test(value);
      } catch {
        ok = false;
      }
      break;
  }
  if (!ok) {
    throw new OatsError(
      "invalid-input",
      `config ${entry.pointer}: the selected value does not satisfy its ` +
        `${constraint.kind} constraint from ${constraint.origin.kind} ` +
        `${constraint.origin.ref}`,
      {
        config: entry.pointer,
        constraint: index,
        kind: constraint.kind,
        origin: constraint.origin,
      },
    );
  }
}

/**
 * The record's config: each selected value with its origin, its hard
 * constraints and the values considered. A soul requirement is always kept as
 * an `equals` constraint, so an operator value that happens to equal it (or
 * one that is later changed) never erases the requirement.
 */
function recordConfig(plan: Plan): ResolutionRecord["config"] {
  const config: ResolutionRecord["config"] = {};
  for (const entry of plan.config ?? []) {
    const constraints = [...(entry.constraints ?? [])];
    if (
      entry.origin.kind === "soul-requirement" &&
      !constraints.some(
        (each) =>
          each.kind === "equals" && each.origin.kind === "soul-requirement" && sameJson(each.value, entry.value),
      )
    ) {
      constraints.push({ kind: "equals", value: entry.value, origin: entry.origin });
    }
    for (const [index, constraint] of constraints.entries()) checkConstraint(entry, constraint, index);
    config[entry.pointer] = {
      value: entry.value,
      origin: entry.origin,
      constraints,
      considered: [...(entry.considered ?? [])],
    };
  }
  return config;
}

/** Step 1: everything that can be refused without touching the store. */
async function validate(realScope: string, plan: Plan): Promise<CheckedCapability[]> {
  instanceRefPath(realScope, plan.instance);
  inspectStoreAt(realScope, RESOLUTIONS_DIR);
  inspectStoreAt(realScope, INSTANCE_REFS_DIR);
  const capabilities = plan.capabilities.map(({ id, dir, lock: lockPath }) => {
    const lock = readLockFile(lockPath);
    return { id, dir, lock, rows: capabilityRows(lock, id) };
  });
  for (const { id, dir } of capabilities) {
    let isDirectory: boolean;
    try {
      isDirectory = (await stat(dir)).isDirectory();
    } catch (error) {
      throw new OatsError("invalid-input", `capability ${id}: ${dir} does not exist`, {
        capability: id,
        dir,
        errno: errnoCode(error),
      });
    }
    if (!isDirectory) {
      throw new OatsError(
        "invalid-input",
        `capability ${id}: ${dir} is not a directory; tarballs are not yet supported`,
        { capability: id, dir, reason: "tarball-not-supported" },
      );
    }
  }
  const findings = planSecretFindings(plan, capabilities);
  if (findings.length > 0) throw secretRefusal(findings);
  // Constraints are checked here too, before anything is retained.
  recordConfig(plan);
  return capabilities;
}

/**
 * Turn a plan into a complete resolution record and point its instance at it, in the order src/resolution/prepare.ts
 * gives: nothing is retained before the plan, its locks and every value bound for the record are checked
 * (`invalid-input`, `invalid-lock`, `secret-in-record`, ...), and the instance reference moves last. Runs under a
 * publish lease (store/lease.ts) from the first retain until the reference is moved: gc never takes what it found.
 * @param planInput the plan; relative paths resolve against `options.baseDir`
 */
export function prepare(scope: string, planInput: PlanInput, options: PrepareOptions = {}): Promise<PrepareResult> {
  return withPublishLease(resolveScope(scope), () => prepareLeased(scope, planInput, options));
}

async function prepareLeased(scope: string, planInput: PlanInput, options: PrepareOptions): Promise<PrepareResult> {
  const plan = parsePlan(planInput, options.baseDir ?? process.cwd());
  const realScope = resolveScope(scope);
  const capabilities = await validate(realScope, plan);
  const retainOptions: RetainOptions = {
    ...(options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs }),
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
  };

  // Step 2: retain.
  const artifacts: ResolutionRecord["artifacts"] = {};
  for (const { id, dir, lock, rows } of capabilities) {
    const legacy = await retainCapabilityArtifact(realScope, dir, id, lock, retainOptions);
    // The record names the exec revision; it must be the very tree the lock row vouched for.
    const exec = await retainTree(
      realScope,
      { kind: "capability", key: id, source: dir, expect: legacy.execIntegrity },
      retainOptions,
    );
    artifacts[id] = capabilityArtifactEntry(id, rows, exec.execIntegrity.value);
  }
  let source: ResolutionRecord["source"] = null;
  if (plan.source) {
    const retained = await retainTree(
      realScope,
      { kind: "source", key: sourceIdentityKey(plan.source.identity), source: plan.source.dir },
      retainOptions,
    );
    pinSourceIdentity(realScope, plan.source.identity);
    source = {
      identity: plan.source.identity,
      revision: plan.source.revision,
      artifact: {
        kind: "source",
        key: retained.key,
        integrity: { format: "oats.tree-exec.v1", value: retained.execIntegrity.value },
      },
    };
  }

  // Step 3: the record, every entry point checked inside its retained tree.
  const entrypoints: ResolutionRecord["entrypoints"] = {};
  for (const [name, entrypoint] of Object.entries(plan.entrypoints)) {
    const artifact: ArtifactRefRecord =
      entrypoint.capability === SOURCE_ENTRYPOINT ? source!.artifact : artifacts[entrypoint.capability]!.artifact;
    entrypoints[name] = { artifact, path: entrypoint.path, args: [...(entrypoint.args ?? [])], role: entrypoint.role };
  }
  const record: ResolutionRecord = {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: plan.instance },
    source,
    artifacts,
    config: recordConfig(plan),
    bindings: plan.bindings ?? {},
    messaging: plan.messaging ?? null,
    entrypoints,
    capture: null,
    evidence: [],
    unresolved: [],
  };
  for (const [name, entrypoint] of Object.entries(record.entrypoints))
    await resolveEntrypoint(realScope, name, entrypoint);
  await hook?.("retained");

  // Step 4: commit the record; step 5: only then move the reference.
  const written = writeResolution(realScope, record);
  await hook?.("record-written");
  const ref = writeInstanceRef(realScope, plan.instance, written.id);
  return { id: written.id, record, status: written.status, instance: plan.instance, ref };
}
