import { linkSync, lstatSync, readdirSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { OatsError, asStepError, errnoCode, canonicalJsonBytes, jsonDigest } from "../core/index.js";
import { parseExportRef, type ParsedExportRef } from "../acquisition/index.js";
import { audit } from "../ledger/index.js";
import { readCanonicalJson, readRecordBytes } from "../resolution/index.js";
import {
  integrityText,
  ensureStoreAt,
  fsyncDirectory,
  inspectStoreAt,
  removeCreatedStore,
  resolveScope,
  readRegularFile,
  writeStagedFile,
  AGENTS_DIR,
  assertContained,
  retainedTreeDir,
  type ArtifactRef,
  withPublishLease,
} from "../retention/index.js";

/**
 * Pins: `.agents/pins/<sha256-hex>.json`, one gc root each, naming an
 * artifact revision (`<kind>:<key>@<integrity>`) or a resolution id. The file
 * name is the oats.json.v1 digest of the pinned reference, so a reference
 * has exactly one pin file and a file cannot claim another reference than
 * its name says. Pinning what is not in the scope is refused (missing);
 * unpinning what is not pinned too. Both are audited.
 */

export const PINS_DIR: readonly string[] = [AGENTS_DIR, "pins"];
const MAX_PIN_BYTES = 4096;
const digestValue = z.string().regex(/^sha256-[0-9a-f]{64}$/);

const pinRefSchema = z.union([
  z
    .object({
      type: z.literal("artifact"),
      kind: z.enum(["capability", "source", "capture"]),
      key: z.string(),
      integrity: z
        .object({ format: z.enum(["oats.tree-legacy.v0", "oats.tree-exec.v1"]), value: digestValue })
        .strict(),
    })
    .strict(),
  z.object({ type: z.literal("resolution"), id: digestValue }).strict(),
]);
export type PinRef = z.infer<typeof pinRefSchema>;

const pinSchema = z
  .object({ schemaVersion: z.literal(1), ref: pinRefSchema, pinnedAt: z.string().datetime({ offset: false }) })
  .strict();
export type Pin = z.infer<typeof pinSchema>;

export interface PinResult {
  readonly ref: PinRef;
  readonly text: string;
  readonly path: string;
  readonly status: "pinned" | "kept" | "unpinned";
}

function toPinRef(parsed: ParsedExportRef): PinRef {
  if (parsed.type === "resolution") return { type: "resolution", id: parsed.id };
  const { kind, key, integrity } = parsed.ref;
  return {
    type: "artifact",
    kind,
    key,
    integrity: { format: integrity.format as "oats.tree-legacy.v0" | "oats.tree-exec.v1", value: integrity.value },
  };
}

/** The text form of a pin reference, as {@link parsePinRef} reads it: `<kind>:<key>@<integrity>` or a resolution id. */
export function pinRefText(ref: PinRef): string {
  return ref.type === "resolution" ? ref.id : `${ref.kind}:${ref.key}@${integrityText(ref.integrity)}`;
}

/**
 * Parse `<kind>:<key>@<integrity>` or a resolution id into a pin reference; anything else is refused with
 * `invalid-artifact-reference`.
 */
export function parsePinRef(input: string): PinRef {
  if (typeof input !== "string")
    throw new OatsError("invalid-artifact-reference", "a pin names <kind>:<key>@<integrity> or a resolution id", {
      ref: input,
    });
  return toPinRef(parseExportRef(input));
}

function pinName(ref: PinRef): string {
  return `${jsonDigest(ref).slice("sha256-".length)}.json`;
}

export function pinPath(realScope: string, ref: PinRef): string {
  const root = join(realScope, ...PINS_DIR);
  return assertContained(root, join(root, pinName(ref)), `pin ${pinRefText(ref)}`);
}

function notFound(ref: PinRef, what: string): OatsError {
  const details = { ref: pinRefText(ref) };
  return ref.type === "resolution"
    ? new OatsError("resolution-not-found", what, details)
    : new OatsError("artifact-not-found", what, details);
}

function assertPresent(realScope: string, ref: PinRef): void {
  if (ref.type === "resolution") {
    readRecordBytes(realScope, ref.id);
    return;
  }
  const dir = retainedTreeDir(realScope, ref as ArtifactRef);
  let stats;
  try {
    stats = lstatSync(dir);
  } catch (error) {
    if (errnoCode(error) === "ENOENT")
      throw notFound(ref, `${pinRefText(ref)} is not retained in this scope; nothing to pin`);
    throw asStepError("pin", error, { dir });
  }
  if (!stats.isDirectory())
    throw new OatsError("invalid-artifact", `retained revision is not a real directory: ${dir}`, { dir });
}

/**
 * Pin a reference: a root for gc until unpinned. Refuses a malformed reference (`invalid-artifact-reference`)
 * and one not present in the scope (`artifact-not-found`, `resolution-not-found`); pinning a pinned reference
 * keeps the pin.
 * @param input `<kind>:<key>@<integrity>` or a resolution id
 */
export async function pin(scope: string, input: string): Promise<PinResult> {
  const ref = parsePinRef(input);
  const realScope = resolveScope(scope);
  const path = pinPath(realScope, ref);
  inspectStoreAt(realScope, PINS_DIR);
  // Leased: what is checked present here must not be collected before the pin is linked.
  return withPublishLease(realScope, async () => {
    assertPresent(realScope, ref);
    const created = ensureStoreAt(realScope, PINS_DIR);
    const dir = join(realScope, ...PINS_DIR);
    const staged = writeStagedFile(
      dir,
      ".pin",
      canonicalJsonBytes({ schemaVersion: 1, ref, pinnedAt: new Date().toISOString() }),
    );
    let status: "pinned" | "kept" = "pinned";
    try {
      linkSync(staged, path);
    } catch (error) {
      if (errnoCode(error) !== "EEXIST") {
        removeCreatedStore(created, dir);
        throw asStepError("pin", error, { path });
      }
      status = "kept";
    } finally {
      unlinkSync(staged);
    }
    fsyncDirectory(dir);
    if (status === "kept") readPin(path);
    await audit(realScope, {
      action: "pin",
      subject: { ref: pinRefText(ref) },
      outcome: status === "kept" ? "kept" : "ok",
    });
    return { ref, text: pinRefText(ref), path, status };
  });
}

/**
 * Remove a pin; refused with `invalid-artifact-reference` for a malformed reference, and with
 * `artifact-not-found` (`resolution-not-found` for a resolution id) when the reference is not pinned.
 * @param input `<kind>:<key>@<integrity>` or a resolution id
 */
export async function unpin(scope: string, input: string): Promise<PinResult> {
  const ref = parsePinRef(input);
  const realScope = resolveScope(scope);
  const path = pinPath(realScope, ref);
  if (!inspectStoreAt(realScope, PINS_DIR).complete) throw notFound(ref, `${pinRefText(ref)} is not pinned`);
  readPin(path, () => notFound(ref, `${pinRefText(ref)} is not pinned`));
  try {
    unlinkSync(path);
  } catch (error) {
    if (errnoCode(error) === "ENOENT") throw notFound(ref, `${pinRefText(ref)} is not pinned`);
    throw asStepError("unpin", error, { path });
  }
  fsyncDirectory(join(realScope, ...PINS_DIR));
  await audit(realScope, { action: "unpin", subject: { ref: pinRefText(ref) }, outcome: "ok" });
  return { ref, text: pinRefText(ref), path, status: "unpinned" };
}

/** Read and check one pin file: schema, and a name that is the digest of what it pins. */
export function readPin(path: string, missing?: () => OatsError): Pin {
  const damaged = (why: string) =>
    new OatsError("invalid-artifact-store", `pin ${path} is damaged: ${why}`, { path, reason: why });
  const bytes = readRegularFile(path, {
    limit: MAX_PIN_BYTES,
    refuse: (failure) => (failure === "missing" && missing ? missing() : damaged(failure)),
  });
  let value: unknown;
  try {
    value = readCanonicalJson(bytes, `pin ${path}`);
  } catch (error) {
    throw damaged(error instanceof Error ? error.message : String(error));
  }
  const parsed = pinSchema.safeParse(value);
  if (!parsed.success) throw damaged(parsed.error.issues[0]?.message ?? "malformed");
  if (path.slice(path.lastIndexOf("/") + 1) !== pinName(parsed.data.ref))
    throw damaged("its name is not the digest of the reference it pins");
  if (parsed.data.ref.type === "artifact") {
    try {
      retainedTreeDir("/", parsed.data.ref);
    } catch {
      throw damaged("it pins an invalid artifact reference");
    }
  }
  return parsed.data;
}

/** Every pin of the scope; a damaged pin refuses (gc cannot know what it was meant to keep). */
export function listPins(scope: string): Pin[] {
  const realScope = resolveScope(scope);
  if (!inspectStoreAt(realScope, PINS_DIR).complete) return [];
  const dir = join(realScope, ...PINS_DIR);
  return readdirSync(dir)
    .filter((name) => !name.startsWith("."))
    .sort()
    .map((name) => readPin(join(dir, name)));
}
