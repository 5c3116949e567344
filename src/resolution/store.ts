import { linkSync, lstatSync, readdirSync, renameSync, unlinkSync } from "node:fs";
import {
  JSON_V1,
  parseDigestName,
  identifierSchema,
  ensureStoreAt,
  fsyncDirectory,
  inspectStoreAt,
  resolveScope,
  readRegularFile,
  writeStagedFile,
  assertContained,
  withPublishLeaseSync,
} from "../retention/index.js";
import { join } from "node:path";
import { type JsonValue, OatsError, asStepError, errnoCode, bytesDigest, canonicalJsonBytes } from "../core/index.js";
import { refuseProtoKeys } from "./operator-input.js";
import { readCanonicalJson, readCanonicalJsonForSchema, withoutPrototypes } from "./canonical-read.js";
import { resolutionRecordSchema, type ResolutionRecord } from "./record.js";

/**
 * `.agents/resolutions/<id>.json`, where `<id>` is the oats.json.v1 digest of
 * the record's canonical bytes, and `.agents/refs/instances/<name>.json`, the
 * one mutable pointer from an instance to the record it runs.
 *
 * A record is published by writing a staged file, fsyncing it and link()ing
 * it to its name, which never replaces: a record already there is compared
 * byte for byte and reused, a damaged one is refused and left alone. An
 * instance reference is replaced atomically by rename, only after the record
 * it names is durable.
 */

export const RESOLUTIONS_DIR = [".agents", "resolutions"] as const;
export const INSTANCE_REFS_DIR = [".agents", "refs", "instances"] as const;
/** Records are read whole; anything larger is not a record. */
export const MAX_RECORD_BYTES = 16 << 20;

/**
 * A resolution id: `sha256-<64 lowercase hex>`, optionally written `oats.json.v1:sha256-...` (the prefix is
 * dropped). Anything else is refused with `invalid-input`.
 */
export function parseResolutionId(input: string): string {
  return parseDigestName(input, JSON_V1, "resolution id", "id");
}

/**
 * Where the record with this id lives: `<scope>/.agents/resolutions/<id>.json` (lexical: nothing is read).
 * Refuses a malformed id with `invalid-input`.
 */
export function resolutionPath(scope: string, id: string): string {
  const root = join(scope, ...RESOLUTIONS_DIR);
  return assertContained(root, join(root, `${parseResolutionId(id)}.json`), `resolution ${id}`);
}

export function encodeRecord(record: ResolutionRecord): { id: string; bytes: Buffer } {
  const bytes = canonicalJsonBytes(record);
  return { id: bytesDigest(bytes), bytes };
}

/** Read a regular file (never through a symlink) of at most `limit` bytes. */
function readBounded(path: string, limit: number, notFound: () => OatsError, what: string): Buffer {
  return readRegularFile(path, {
    limit,
    refuse: (failure, details) => {
      switch (failure) {
        case "missing":
          return notFound();
        case "symlink":
          return new OatsError("invalid-resolution", `${what} is a symlink, refusing to follow it: ${path}`, {
            ...details,
            reason: "symlink",
          });
        case "not-a-file":
          return new OatsError("invalid-resolution", `${what} is not a regular file: ${path}`, {
            ...details,
            reason: "not-a-file",
          });
        case "too-large":
          return new OatsError("invalid-resolution", `${what} is larger than ${limit} bytes: ${path}`, {
            ...details,
            reason: "too-large",
          });
        case "changed":
          return new OatsError("invalid-resolution", `${what} changed while it was read: ${path}`, {
            ...details,
            reason: "changed-while-reading",
          });
        default:
          return asStepError("read", new Error(`cannot open ${path}: ${String(details["errno"])}`), details);
      }
    },
  });
}

export interface WrittenRecord {
  readonly id: string;
  readonly path: string;
  readonly status: "written" | "kept";
}

/** A resolution record as a caller holds one: a {@link ResolutionRecord} built in code, or a record's JSON document. */
export type ResolutionRecordInput = ResolutionRecord | JsonValue;

/**
 * Publish a record under its id; the schema is checked first, so nothing invalid is ever written
 * (`invalid-resolution`). A record already stored with the same bytes is kept; one with other bytes under
 * the same name is refused (`integrity-mismatch`) and left alone.
 */
export function writeResolution(scope: string, input: ResolutionRecordInput): WrittenRecord {
  const realScope = resolveScope(scope);
  return withPublishLeaseSync(realScope, () => writeResolutionLeased(realScope, input));
}

function writeResolutionLeased(realScope: string, input: ResolutionRecordInput): WrittenRecord {
  // zod drops a `__proto__` key silently (an entry point or binding would vanish): refuse it instead.
  refuseProtoKeys(input, "resolution record", "invalid-resolution");
  const record = parseRecord(input, "resolution record");
  const { id, bytes } = encodeRecord(record);
  // Never write what the strict reader would refuse (an integer beyond 2^53, say).
  readCanonicalJson(bytes, "resolution record");
  inspectStoreAt(realScope, RESOLUTIONS_DIR);
  ensureStoreAt(realScope, RESOLUTIONS_DIR);
  const dir = join(realScope, ...RESOLUTIONS_DIR);
  const path = resolutionPath(realScope, id);
  const staged = writeStagedFile(dir, ".record", bytes);
  try {
    linkSync(staged, path);
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") throw asStepError("publish", error, { path });
    // Already there: reuse it only when it is exactly these bytes.
    const existing = readBounded(
      path,
      MAX_RECORD_BYTES,
      () => new OatsError("resolution-not-found", `resolution ${id} vanished`, { id }),
      `resolution ${id}`,
    );
    if (!existing.equals(bytes)) {
      throw new OatsError("integrity-mismatch", `resolution ${id} exists with other bytes; it was left alone`, {
        id,
        path,
        expected: id,
        actual: bytesDigest(existing),
      });
    }
    return { id, path, status: "kept" };
  } finally {
    unlinkSync(staged);
  }
  fsyncDirectory(dir);
  return { id, path, status: "written" };
}

function parseRecord(input: unknown, what: string): ResolutionRecord {
  const parsed = resolutionRecordSchema.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new OatsError(
      "invalid-resolution",
      `${what}: ${issue?.path.join("/") || "(root)"}: ${issue?.message ?? "malformed"}`,
      {
        pointer: `/${(issue?.path ?? []).join("/")}`,
        issues: parsed.error.issues
          .slice(0, 20)
          .map((each) => ({ pointer: `/${each.path.join("/")}`, message: each.message })),
      },
    );
  }
  return parsed.data;
}

/**
 * Read a record: bounded read, then its digest against the id and its
 * canonical form, before anything in it is parsed or followed; then the
 * schema. Objects come back without a prototype.
 */
export function readRecordBytes(scope: string, id: string): { id: string; path: string; record: ResolutionRecord } {
  const realScope = resolveScope(scope);
  const canonicalId = parseResolutionId(id);
  const path = resolutionPath(realScope, canonicalId);
  const notFound = () =>
    new OatsError("resolution-not-found", `no resolution ${canonicalId} in this scope`, { id: canonicalId, path });
  if (!inspectStoreAt(realScope, RESOLUTIONS_DIR).complete) throw notFound();
  return decodeRecord(readBounded(path, MAX_RECORD_BYTES, notFound, `resolution ${canonicalId}`), canonicalId, path);
}

/**
 * readRecordBytes for many ids of one scope (gc reads every record): the
 * scope is resolved and the store inspected once, each record checked the same.
 */
export function recordReader(
  realScope: string,
): (id: string) => { id: string; path: string; record: ResolutionRecord } {
  const complete = inspectStoreAt(realScope, RESOLUTIONS_DIR).complete;
  return (id) => {
    const canonicalId = parseResolutionId(id);
    const path = resolutionPath(realScope, canonicalId);
    const notFound = () =>
      new OatsError("resolution-not-found", `no resolution ${canonicalId} in this scope`, { id: canonicalId, path });
    if (!complete) throw notFound();
    return decodeRecord(readBounded(path, MAX_RECORD_BYTES, notFound, `resolution ${canonicalId}`), canonicalId, path);
  };
}

function decodeRecord(
  bytes: Buffer,
  canonicalId: string,
  path: string,
): { id: string; path: string; record: ResolutionRecord } {
  const actual = bytesDigest(bytes);
  if (actual !== canonicalId) {
    throw new OatsError("integrity-mismatch", `resolution ${canonicalId}: the record's bytes hash to ${actual}`, {
      id: canonicalId,
      path,
      expected: canonicalId,
      actual,
    });
  }
  const json = readCanonicalJsonForSchema(bytes, `resolution ${canonicalId}`);
  const record = withoutPrototypes(parseRecord(json, `resolution ${canonicalId}`), "") as ResolutionRecord;
  return { id: canonicalId, path, record };
}

/** Every record id in the scope (names only; reading one checks it). */
export function listResolutionIds(scope: string): string[] {
  const realScope = resolveScope(scope);
  if (!inspectStoreAt(realScope, RESOLUTIONS_DIR).complete) return [];
  return readdirSync(join(realScope, ...RESOLUTIONS_DIR))
    .filter((name) => /^sha256-[0-9a-f]{64}\.json$/.test(name))
    .map((name) => name.slice(0, -".json".length))
    .sort();
}

// ------------------------------------------------------------ instance refs

export interface InstanceRef {
  readonly schemaVersion: 1;
  readonly instance: string;
  readonly resolution: string;
}

export function instanceRefPath(scope: string, instance: string): string {
  const name = identifierSchema.safeParse(instance);
  if (!name.success)
    throw new OatsError("invalid-input", `invalid instance name ${JSON.stringify(instance)}`, { instance });
  const root = join(scope, ...INSTANCE_REFS_DIR);
  return assertContained(root, join(root, `${instance}.json`), `instance ${instance}`);
}

/** Point an instance at a record: staged, fsync'd, renamed over the old reference, parent fsync'd. */
export function writeInstanceRef(scope: string, instance: string, resolution: string): InstanceRef {
  const realScope = resolveScope(scope);
  return withPublishLeaseSync(realScope, () => writeInstanceRefLeased(realScope, instance, resolution));
}

function writeInstanceRefLeased(realScope: string, instance: string, resolution: string): InstanceRef {
  const path = instanceRefPath(realScope, instance);
  const ref: InstanceRef = { schemaVersion: 1, instance, resolution: parseResolutionId(resolution) };
  inspectStoreAt(realScope, INSTANCE_REFS_DIR);
  ensureStoreAt(realScope, INSTANCE_REFS_DIR);
  const dir = join(realScope, ...INSTANCE_REFS_DIR);
  const existing = lstatOrNull(path);
  if (existing && !existing.isFile())
    throw new OatsError("invalid-input", `instance reference is not a regular file: ${path}`, { path });
  const staged = writeStagedFile(dir, ".ref", canonicalJsonBytes(ref));
  try {
    renameSync(staged, path);
  } catch (error) {
    unlinkSync(staged);
    throw asStepError("publish", error, { path });
  }
  fsyncDirectory(dir);
  return ref;
}

/**
 * The resolution an instance currently runs: its instance reference, read and checked. `resolution-not-found` when
 * the instance has none in this scope; a malformed name or reference is refused.
 */
export function readInstanceRef(scope: string, instance: string): InstanceRef {
  const realScope = resolveScope(scope);
  const path = instanceRefPath(realScope, instance);
  const notFound = () =>
    new OatsError("resolution-not-found", `instance ${instance} has no resolution in this scope`, { instance, path });
  if (!inspectStoreAt(realScope, INSTANCE_REFS_DIR).complete) throw notFound();
  return decodeInstanceRef(readBounded(path, 4096, notFound, `instance reference ${instance}`), instance, path);
}

/** readInstanceRef for every reference of one scope (gc), the store inspected once. */
export function instanceRefReader(realScope: string): (instance: string) => InstanceRef {
  const complete = inspectStoreAt(realScope, INSTANCE_REFS_DIR).complete;
  return (instance) => {
    const path = instanceRefPath(realScope, instance);
    const notFound = () =>
      new OatsError("resolution-not-found", `instance ${instance} has no resolution in this scope`, { instance, path });
    if (!complete) throw notFound();
    return decodeInstanceRef(readBounded(path, 4096, notFound, `instance reference ${instance}`), instance, path);
  };
}

function decodeInstanceRef(bytes: Buffer, instance: string, path: string): InstanceRef {
  const json = readCanonicalJson(bytes, `instance reference ${instance}`) as Record<string, unknown> | null;
  const malformed = () =>
    new OatsError("invalid-resolution", `instance reference ${instance} is malformed`, { instance, path });
  if (typeof json !== "object" || json === null || Array.isArray(json)) throw malformed();
  if (
    json["schemaVersion"] !== 1 ||
    json["instance"] !== instance ||
    typeof json["resolution"] !== "string" ||
    Object.keys(json).length !== 3
  )
    throw malformed();
  // The file is what is damaged, not the caller's input.
  if (!/^sha256-[0-9a-f]{64}$/.test(json["resolution"])) throw malformed();
  return { schemaVersion: 1, instance, resolution: json["resolution"] };
}

function lstatOrNull(path: string) {
  try {
    return lstatSync(path);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") return null;
    throw error;
  }
}
