import { lstatSync, readFileSync, unlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { z } from "zod";
import { OatsError, canonicalJsonBytes, errnoCode } from "../core/index.js";
import { scopeStateDir } from "../ledger/index.js";
import { privateDir, readPrivateFile, writePrivateFile } from "../ledger/index.js";
import { HANDLE_PATTERN } from "./run-record.js";
import { runBaseSchema, type RunBase } from "./run-store.js";

/**
 * The private start record of a run (docs/design/evidence.md, "The private
 * start record"): what the dispatcher itself recorded when it started the
 * run, kept in the operator's private state OUTSIDE the scope
 * (`<scopeStateDir>/runs/<handle>.json`, src/ledger/chain-state.ts), where a
 * writer of the scope cannot reach it. `control.json` in the run directory
 * says the same for anyone who reads the scope; only this record decides
 * what `oats run seal` and `oats run cancel` may act on: a process is
 * signalled only when this account's dispatcher recorded starting it, in
 * this boot, for this run directory, under an anchored `run-start` entry.
 *
 * Written by the dispatcher three times, each a whole record (a fresh file,
 * fsync'd, renamed, the directory fsync'd): before the `run-start` audit
 * entry (no entry, no child yet), once the entry is written (its seq and
 * hash), and once the child is spawned (its pid and start time); the seal
 * adds the run id. A record that is missing, unreadable, malformed, not a
 * regular file of this account, or in a directory that is not private reads
 * as "no record": the run is foreign to this account and nothing is
 * signalled.
 */

export const START_RECORD_FORMAT = "oats.run-start-record.v1";
const MAX_START_RECORD = 1 << 20;

const processRef = z.object({ pid: z.number().int().positive(), start: z.string().regex(/^\d+$/) }).strict();
const auditRef = z.object({ seq: z.number().int().nonnegative(), hash: z.string().min(1) }).strict();
const fileIdentity = z.object({ dev: z.string().regex(/^\d+$/), ino: z.string().regex(/^\d+$/) }).strict();

export const startRecordSchema = z
  .object({
    format: z.literal(START_RECORD_FORMAT),
    /** The scope's real path (the state directory is keyed by its digest; this says which scope it was). */
    scope: z.string().min(1),
    handle: z.string().regex(HANDLE_PATTERN),
    /** /proc/sys/kernel/random/boot_id when the run started: a pid means nothing in another boot. */
    boot: z.string().nullable(),
    /** The dispatcher's effective uid. */
    uid: z.number().int().nonnegative(),
    dispatcher: processRef,
    /** The run directory and its log as the dispatcher created them. */
    dir: fileIdentity,
    log: fileIdentity,
    startAudit: auditRef.nullable(),
    /** The child: its pid is its process group id. Null until it was spawned. */
    child: processRef.nullable(),
    base: runBaseSchema,
    /** The run id the seal wrote, once sealed by this account. */
    sealed: z
      .object({ runId: z.string().regex(/^sha256-[0-9a-f]{64}$/) })
      .strict()
      .nullable(),
  })
  .strict();
export type StartRecord = z.infer<typeof startRecordSchema>;
export type FileIdentity = z.infer<typeof fileIdentity>;

/** What the private state says about one run. */
export type StartLookup =
  | { readonly kind: "found"; readonly record: StartRecord; readonly path: string }
  | { readonly kind: "missing"; readonly path: string }
  /** The private state directory cannot be used (not ours, group- or world-writable, a symlink, not creatable). */
  | { readonly kind: "unusable"; readonly stateDir: string | null };

function euid(): number {
  return typeof process.geteuid === "function" ? process.geteuid() : -1;
}

/** This boot's id, or null where the kernel does not say (then no pid is ever taken as a run's). */
export function bootId(): string | null {
  try {
    const text = readFileSync("/proc/sys/kernel/random/boot_id", "latin1").trim();
    return /^[0-9a-f-]{36}$/.test(text) ? text : null;
  } catch {
    return null;
  }
}

export function identityOf(path: string): FileIdentity {
  const stats = lstatSync(path, { bigint: true });
  return { dev: String(stats.dev), ino: String(stats.ino) };
}

/** Where the start record of `handle` is (or would be); null when the private state cannot be used. */
export function startRecordPath(realScope: string, handle: string): string | null {
  if (!HANDLE_PATTERN.test(handle)) return null;
  const dir = privateDir(realScope, "runs");
  return dir === null ? null : join(dir, `${handle}.json`);
}

/** The start record of a run, as this account's private state holds it. */
export function lookupStartRecord(realScope: string, handle: string): StartLookup {
  const path = startRecordPath(realScope, handle);
  if (path === null) return { kind: "unusable", stateDir: scopeStateDir(realScope) };
  const bytes = readPrivateFile(path, MAX_START_RECORD);
  if (bytes === null) return { kind: "missing", path };
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch {
    return { kind: "missing", path };
  }
  const parsed = startRecordSchema.safeParse(value);
  if (!parsed.success || parsed.data.handle !== handle || parsed.data.scope !== realScope)
    return { kind: "missing", path };
  return { kind: "found", record: parsed.data, path };
}

/**
 * Write a run's start record, whole and durably. `audit-unavailable` (reason
 * `start-record-unwritable`) when it cannot be: the dispatcher then refuses
 * to start the run, since nothing could ever seal or cancel it.
 */
export function writeStartRecord(realScope: string, record: StartRecord): void {
  const path = startRecordPath(realScope, record.handle);
  if (path === null) throw unwritable(realScope, record.handle, "the private state directory is not usable");
  try {
    writePrivateFile(dirname(path), `${record.handle}.json`, canonicalJsonBytes(startRecordSchema.parse(record)));
  } catch (error) {
    throw unwritable(realScope, record.handle, error instanceof Error ? error.message : String(error), error);
  }
}

function unwritable(realScope: string, handle: string, why: string, cause?: unknown): OatsError {
  const stateDir = scopeStateDir(realScope);
  return new OatsError(
    "audit-unavailable",
    `run ${handle}: its private start record cannot be written (${why}); a run no start record names could ` +
      `never be sealed or cancelled, so it does not start`,
    {
      handle,
      reason: "start-record-unwritable",
      stateDir,
      ...(cause === undefined ? {} : { errno: errnoCode(cause) ?? null }),
    },
  );
}

/** Remove a start record whose run directory was removed before its child could start (best effort). */
export function removeStartRecord(realScope: string, handle: string): void {
  const path = startRecordPath(realScope, handle);
  if (path === null) return;
  try {
    unlinkSync(path);
  } catch {
    // never written, or already gone
  }
}

/** The start record as the dispatcher writes it first: before the run-start entry, no child yet. */
export function firstStartRecord(
  realScope: string,
  base: RunBase,
  dispatcher: { pid: number; start: string },
  dir: string,
  log: string,
): StartRecord {
  return {
    format: START_RECORD_FORMAT,
    scope: realScope,
    handle: base.handle,
    boot: bootId(),
    uid: euid(),
    dispatcher,
    dir: identityOf(dir),
    log: identityOf(log),
    startAudit: null,
    child: null,
    base,
    sealed: null,
  };
}
