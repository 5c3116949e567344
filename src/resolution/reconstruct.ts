import {
  MAX_LOCK_BYTES,
  readRegularFile,
  TREE_LEGACY,
  integrityText,
  capabilityRows,
  parseLockText,
  type OatsLock,
  retainCapabilityArtifact,
  retainTree,
  resolveScope,
  entryPresent,
} from "../retention/index.js";
import { capabilityArtifactEntry } from "./artifact-entry.js";
import { escapePointerSegment, findArgSecrets, findSecrets } from "./secrets.js";
import { isAbsolute, join, resolve } from "node:path";
import { z } from "zod";
import { type JsonValue, OatsError, bytesDigest, OPERATOR_MAX_DEPTH, parseJsonText } from "../core/index.js";
import { checkReadiness, resolveEntrypoint } from "./read.js";
import { INSTALLED_DIR, identifier, parseLegacyCommand, type ParsedEntrypoint } from "./legacy-command.js";
import type { ResolutionRecord } from "./record.js";
import { readRecordBytes, readInstanceRef, writeInstanceRef, writeResolution, type InstanceRef } from "./store.js";

/**
 * reconstruct(scope, instanceHome): migrate an instance that predates
 * resolution records. Its `<instanceHome>/instance.json` records command and
 * hook strings that point into the installed store
 * `<scope>/.agents/capabilities/installed/<id>/`; the lock that installed
 * them is `<scope>/oats-lock.json` (lock v2).
 *
 * The legacy instance.json accepted (strict: any other key is invalid-input,
 * and nothing is retained or written):
 *
 *   {
 *     "name":     "<instance>",            ^[a-z0-9][a-z0-9._-]*$ (the instance reference's name)
 *     "scope":    "/abs/scope",            optional; when present it must be this scope
 *     "commands": {"<name>": "<command>"}, optional
 *     "hooks":    {"<name>": "<command>"}, optional; at least one command or hook overall,
 *                                          and no name used in both
 *     "config":   {"<capability>": {"<setting>": <JSON>}}   optional
 *   }
 *
 * Names of commands and hooks match ^[A-Za-z0-9][A-Za-z0-9._:-]*$. Each
 * command string is read as an entry point of one capability without a
 * shell (legacy-command.ts says how); one that cannot be makes that entry
 * point unresolved.
 *
 * Each referenced capability is established only EXACTLY: the installed
 * directory must hash to the `oats.tree-legacy.v0` integrity of the lock row
 * that recorded it and carry that row's provenance (retainCapabilityArtifact),
 * and the exec revision is then retained from the verified legacy revision
 * with `expect` = the exec digest measured from those same bytes. Nothing is
 * ever fetched, and today's bytes are never taken for the historical revision
 * unless they verify against the lock row.
 *
 * Whatever cannot be established becomes an unresolved entry `{pointer,
 * reason}`; `reason` is a stable code, then ": " and a human detail. Codes:
 * installed-missing, lock-missing, invalid-lock, lock-row-missing,
 * integrity-mismatch, provenance-mismatch, invalid-artifact,
 * artifact-not-contained, artifact-not-found (entry point target absent),
 * invalid-capability-id, not-in-installed-store, installed-store-of-another-scope,
 * path-outside-artifact, launcher-not-representable, shell-syntax,
 * unparseable-command, argument-references-installed-store,
 * capability-unresolved, secret-in-record.
 *
 * Status: `reconstructed` (evidence for every input, nothing unresolved),
 * `partial` (at least one capability retained, something unresolved) or
 * `unknown` (no capability could be retained).
 *
 * Legacy config values are carried as `/settings/<capability>/<setting>` with
 * origin `import-adoption` (ref: the instance.json pointer); a value that
 * looks like a secret is not carried and becomes unresolved (secret-in-record).
 */

export const LOCK_FILE = "oats-lock.json";
export const INSTANCE_FILE = "instance.json";
const MAX_INSTANCE_BYTES = 1 << 20;

const entryName = z
  .string()
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:-]*$/, "must match ^[A-Za-z0-9][A-Za-z0-9._:-]*$");
const commandString = z.string().max(8192);
const jsonValue: z.ZodType<unknown> = z.json();

export const legacyInstanceSchema = z
  .object({
    name: identifier,
    scope: z.string().min(1).refine(isAbsolute, "must be an absolute path").optional(),
    commands: z.record(entryName, commandString).optional(),
    hooks: z.record(entryName, commandString).optional(),
    config: z.record(identifier, z.record(z.string().min(1).max(256), jsonValue)).optional(),
  })
  .strict()
  .superRefine((instance, context) => {
    const commands = Object.keys(instance.commands ?? {});
    const hooks = Object.keys(instance.hooks ?? {});
    if (commands.length + hooks.length === 0)
      context.addIssue({ code: "custom", path: [], message: "records no command and no hook: nothing to reconstruct" });
    for (const name of hooks) {
      if (commands.includes(name))
        context.addIssue({ code: "custom", path: ["hooks", name], message: `${name} is both a command and a hook` });
    }
  });

export type LegacyInstance = z.infer<typeof legacyInstanceSchema>;

export interface ReconstructResult {
  readonly id: string;
  readonly record: ResolutionRecord;
  readonly status: ResolutionRecord["status"];
  readonly path: string;
  /** The instance reference now in force. */
  readonly ref: InstanceRef;
  /** False when an existing reference to a ready record was kept rather than replaced by a record that is not ready. */
  readonly refMoved: boolean;
}

type Unresolved = { pointer: string; reason: string };
type Evidence = { pointer: string; kind: string; detail: string };

// ----------------------------------------------------------------- parsing

function invalid(message: string, details: Record<string, unknown>): OatsError {
  return new OatsError("invalid-input", message, details);
}

function readInstanceFile(instanceHome: string): { path: string; bytes: Buffer; instance: LegacyInstance } {
  const path = join(resolve(instanceHome), INSTANCE_FILE);
  const bytes = readRegularFile(path, {
    limit: MAX_INSTANCE_BYTES,
    refuse: (failure, details) => {
      if (failure === "not-a-file") return invalid(`${path} is not a regular file`, details);
      if (failure === "too-large") return invalid(`${path} is larger than ${MAX_INSTANCE_BYTES} bytes`, details);
      if (failure === "changed") return invalid(`${path} changed while it was read`, details);
      return invalid(`cannot read ${path}: ${String(details["errno"] ?? failure)}`, details);
    },
  });
  let json: unknown;
  try {
    json = parseJsonText(
      new TextDecoder("utf-8", { fatal: true }).decode(bytes),
      OPERATOR_MAX_DEPTH,
      (reason, message, details) =>
        reason === "syntax" ? new Error(message) : invalid(`${path}: ${message}`, { path, reason, ...details }),
      (key, value: unknown) => {
        if (key === "__proto__") throw new Error("a __proto__ key is refused");
        return value;
      },
    );
  } catch (error) {
    if (error instanceof OatsError) throw error;
    throw invalid(`${path} is not JSON: ${(error as Error).message}`, { path });
  }
  const parsed = legacyInstanceSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const pointer = `/${(issue?.path ?? []).join("/")}`;
    throw invalid(`${path}: ${pointer}: ${issue?.message ?? "malformed"}`, {
      path,
      pointer,
      issues: parsed.error.issues
        .slice(0, 20)
        .map((each) => ({ pointer: `/${each.path.join("/")}`, message: each.message })),
    });
  }
  return { path, bytes, instance: parsed.data };
}

// ----------------------------------------------------------------- secrets

/**
 * No legacy value that looks like a credential lands in a record: the same
 * scanner as prepare's (secrets.ts), which here leaves the value out and
 * records it as unresolved instead of refusing the whole migration.
 */
function looksSecret(value: unknown, key = ""): boolean {
  return findSecrets(value as JsonValue, "", { key }).length > 0;
}

function argsLookSecret(args: readonly string[]): boolean {
  return findArgSecrets(args, "").length > 0;
}

// ----------------------------------------------------------------- reconstruct

const escapePointer = escapePointerSegment;

/** Refusals that say this input cannot be established (recorded as unresolved); anything else propagates. */
const UNESTABLISHED = new Set([
  "integrity-mismatch",
  "provenance-mismatch",
  "invalid-artifact",
  "artifact-not-contained",
  "invalid-input",
  "invalid-lock",
  "artifact-not-found",
]);

function unestablished(error: unknown): string {
  if (error instanceof OatsError && UNESTABLISHED.has(error.code)) return `${error.code}: ${error.message}`;
  throw error;
}

function readLock(scope: string): { lock: OatsLock; path: string; digest: string } | { reason: string } {
  const path = join(scope, LOCK_FILE);
  let bytes: Buffer;
  try {
    // One descriptor, never a symlink at the name, never a FIFO's wait (readRegularFile); its type checked on it.
    bytes = readRegularFile(path, {
      limit: MAX_LOCK_BYTES,
      refuse: (failure, details) => new OatsError("invalid-lock", failure, details),
    });
  } catch (error) {
    if (!(error instanceof OatsError)) throw error;
    if (error.message === "missing")
      return { reason: `lock-missing: ${path} does not exist; nothing says which revision was installed` };
    if (error.message === "symlink" || error.message === "not-a-file")
      return { reason: `invalid-lock: ${path} is not a regular file` };
    return { reason: `invalid-lock: cannot read ${path}: ${String(error.details["errno"] ?? error.message)}` };
  }
  try {
    return { lock: parseLockText(bytes.toString("utf8"), path), path, digest: bytesDigest(bytes) };
  } catch (error) {
    return { reason: unestablished(error) };
  }
}

/**
 * Migrate an instance that predates resolution records into one (src/resolution/reconstruct.ts): what can be
 * established exactly is retained and recorded, the rest recorded as unresolved, and the instance reference moved to
 * the new record unless that would replace a ready record with one that is not. Refuses a malformed instance.json, or
 * one of another scope, with `invalid-input`.
 * @param instanceHome the directory holding the legacy `instance.json`
 */
export async function reconstruct(scope: string, instanceHome: string): Promise<ReconstructResult> {
  const realScope = resolveScope(scope);
  const { path: instancePath, bytes: instanceBytes, instance } = readInstanceFile(instanceHome);
  if (instance.scope !== undefined) {
    let declared: string;
    try {
      declared = resolveScope(instance.scope);
    } catch {
      declared = instance.scope;
    }
    if (declared !== realScope)
      throw invalid(`${instancePath} belongs to scope ${instance.scope}, not ${realScope}`, {
        path: instancePath,
        scope: instance.scope,
        expected: realScope,
      });
  }
  const scopeForms = [...new Set([resolve(scope), realScope])];

  const evidence: Evidence[] = [];
  const unresolved: Unresolved[] = [];
  evidence.push({
    pointer: "/subject",
    kind: "legacy-instance",
    detail: `${instancePath} (${instanceBytes.length} bytes, oats.bytes.v1:${bytesDigest(instanceBytes)})`,
  });

  // 1. Entry points, parsed without a shell.
  const parsed: ParsedEntrypoint[] = [];
  const legacy: Array<[string, "command" | "hook", string]> = [
    ...Object.entries(instance.commands ?? {}).map(
      ([name, text]) => [name, "command", text] as [string, "command", string],
    ),
    ...Object.entries(instance.hooks ?? {}).map(([name, text]) => [name, "hook", text] as [string, "hook", string]),
  ];
  for (const [name, role, text] of legacy) {
    const source = `${instancePath}#/${role === "command" ? "commands" : "hooks"}/${escapePointer(name)}`;
    const result = parseLegacyCommand(name, role, source, text, scopeForms);
    if (!result.ok) unresolved.push({ pointer: `/entrypoints/${escapePointer(name)}`, reason: result.reason });
    else if (argsLookSecret(result.entrypoint.args)) {
      unresolved.push({
        pointer: `/entrypoints/${escapePointer(name)}`,
        reason: "secret-in-record: an argument looks like a credential and is not carried",
      });
    } else parsed.push(result.entrypoint);
  }

  // 2. Each referenced capability, verified against the lock row that recorded it.
  const artifacts: ResolutionRecord["artifacts"] = {};
  const failed = new Map<string, string>();
  const capabilities = [...new Set(parsed.map((entry) => entry.capability))].sort();
  const lock = capabilities.length > 0 ? readLock(realScope) : null;
  for (const id of capabilities) {
    const pointer = `/artifacts/${id}`;
    const fail = (reason: string) => {
      failed.set(id, reason);
      unresolved.push({ pointer, reason });
    };
    const installed = join(realScope, ...INSTALLED_DIR, id);
    if (!entryPresent(installed)) {
      fail(`installed-missing: ${installed} does not exist; it is never re-fetched`);
      continue;
    }
    if (!lock || "reason" in lock) {
      fail(lock?.reason ?? "lock-missing");
      continue;
    }
    if (!lock.lock.capabilities.has(id)) {
      fail(`lock-row-missing: ${lock.path} has no capability row for ${id}`);
      continue;
    }
    const rows = capabilityRows(lock.lock, id);
    let execIntegrity;
    try {
      const legacyReceipt = await retainCapabilityArtifact(realScope, installed, id, lock.lock);
      // The exec revision, from the verified legacy revision, pinned to the digest of those same bytes.
      const execReceipt = await retainTree(realScope, {
        kind: "capability",
        key: id,
        source: legacyReceipt.dir,
        expect: legacyReceipt.execIntegrity,
      });
      execIntegrity = execReceipt.integrity;
    } catch (error) {
      fail(unestablished(error));
      continue;
    }
    artifacts[id] = capabilityArtifactEntry(id, rows, execIntegrity.value);
    evidence.push(
      {
        pointer,
        kind: "lock-row-integrity",
        detail:
          `${installed} hashes to ${TREE_LEGACY}:${rows.capability.integrity}, the ` +
          `integrity of capabilities.${id} in ${lock.path} (oats.bytes.v1:${lock.digest})`,
      },
      {
        pointer,
        kind: "lock-row-provenance",
        detail:
          `.oats-installation.json matches capabilities.${id} (version ` +
          `${rows.capability.version}) and packages.${rows.packageId} ` +
          `(${rows.package.source}, commit ${rows.package.commit ?? "none"})`,
      },
      {
        pointer: `${pointer}/artifact`,
        kind: "exec-revision",
        detail: `${integrityText(execIntegrity)} measured from the same verified bytes`,
      },
    );
  }

  // 3. Entry points inside the retained artifacts.
  const entrypoints: ResolutionRecord["entrypoints"] = {};
  for (const entry of parsed) {
    const pointer = `/entrypoints/${escapePointer(entry.name)}`;
    const selected = artifacts[entry.capability];
    if (!selected) {
      unresolved.push({
        pointer,
        reason: `capability-unresolved: ${entry.capability} (${(failed.get(entry.capability) ?? "").split(":")[0]})`,
      });
      continue;
    }
    const entrypoint = { artifact: selected.artifact, path: entry.path, args: entry.args, role: entry.role };
    try {
      await resolveEntrypoint(realScope, entry.name, entrypoint);
    } catch (error) {
      unresolved.push({ pointer, reason: unestablished(error) });
      continue;
    }
    entrypoints[entry.name] = entrypoint;
    evidence.push({
      pointer,
      kind: entry.role === "command" ? "legacy-command" : "legacy-hook",
      detail:
        `${entry.source}: ` +
        `${entry.launcher ? `launcher ${entry.launcher}, ` : ""}${entry.capability}/${entry.path} ` +
        `with ${entry.args.length} argument(s), inside the retained artifact`,
    });
  }

  // 4. Legacy configuration, adopted with its origin.
  const config: ResolutionRecord["config"] = {};
  for (const [capability, settings] of Object.entries(instance.config ?? {})) {
    for (const [setting, value] of Object.entries(settings)) {
      const key = `/settings/${escapePointer(capability)}/${escapePointer(setting)}`;
      const pointer = `/config/${escapePointer(key)}`;
      if (looksSecret(value, setting)) {
        unresolved.push({ pointer, reason: "secret-in-record: the value looks like a credential and is not carried" });
        continue;
      }
      const ref = `${instancePath}#/config/${escapePointer(capability)}/${escapePointer(setting)}`;
      config[key] = { value, origin: { kind: "import-adoption", ref }, constraints: [], considered: [] };
      evidence.push({ pointer, kind: "legacy-config", detail: ref });
    }
  }

  const status: ResolutionRecord["status"] =
    unresolved.length === 0 ? "reconstructed" : Object.keys(artifacts).length > 0 ? "partial" : "unknown";
  const record: ResolutionRecord = {
    schemaVersion: 1,
    kind: "instance",
    status,
    subject: { instance: instance.name },
    source: null,
    artifacts,
    config,
    bindings: {},
    messaging: null,
    entrypoints,
    capture: null,
    evidence,
    unresolved,
  };
  // writeResolution checks the schema (status, evidence and unresolved agree) before writing anything.
  const written = writeResolution(realScope, record);

  // 5. The instance reference: never replace one naming a ready record with one that is not ready.
  let previous: InstanceRef | null = null;
  try {
    previous = readInstanceRef(realScope, instance.name);
  } catch {
    previous = null;
  }
  if (
    previous &&
    previous.resolution !== written.id &&
    status !== "reconstructed" &&
    recordIsReady(realScope, previous.resolution)
  ) {
    return { id: written.id, record, status, path: written.path, ref: previous, refMoved: false };
  }
  const ref = writeInstanceRef(realScope, instance.name, written.id);
  return { id: written.id, record, status, path: written.path, ref, refMoved: true };
}

function recordIsReady(scope: string, id: string): boolean {
  try {
    checkReadiness(readRecordBytes(scope, id).record);
    return true;
  } catch {
    return false;
  }
}
