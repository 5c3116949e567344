import { linkSync, readdirSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { OatsError, asStepError, bytesDigest, errnoCode } from "../core/index.js";
import {
  AGENTS_DIR,
  assertContained,
  ensureStoreAt,
  fsyncDirectory,
  inspectStoreAt,
  readRegularFile,
  writeStagedFile,
} from "../retention/index.js";
import { bundleOf, MAX_BUNDLE_BYTES } from "./bundle.js";
import { attestationRefusal, encodeEnvelope, type Envelope, MAX_ENVELOPE_BYTES, parseEnvelope } from "./dsse.js";

/**
 * `.agents/attestations/` in the scope (managed .gitignore), content
 * addressed: an attestation's id is the oats.bytes.v1 digest of its
 * envelope's canonical bytes.
 *
 *   sha256-<hex>.dsse.json       the DSSE envelope
 *   sha256-<hex>.sigstore.json   the same envelope as a Sigstore bundle v0.3
 *
 * Both are published by staging, fsync and link (never replaced). The store
 * is not trusted: anyone who can write the scope can add files here, so an
 * attestation is believed only after its signature verifies with a key the
 * operator trusts (trust.ts) and its subjects are checked by its user.
 */

export const ATTESTATIONS_STORE = [AGENTS_DIR, "attestations"] as const;
const ENVELOPE_NAME = /^(sha256-[0-9a-f]{64})\.dsse\.json$/;
const BUNDLE_NAME = /^(sha256-[0-9a-f]{64})\.sigstore\.json$/;
export const ATTESTATION_ID = /^sha256-[0-9a-f]{64}$/;

export function attestationsRoot(realScope: string): string {
  return join(realScope, ...ATTESTATIONS_STORE);
}

export function envelopePath(realScope: string, id: string): string {
  if (!ATTESTATION_ID.test(id))
    throw new OatsError("invalid-input", `not an attestation id: ${JSON.stringify(String(id).slice(0, 100))}`, {
      reason: "attestation-id",
    });
  const root = attestationsRoot(realScope);
  return assertContained(root, join(root, `${id}.dsse.json`), `attestation ${id}`);
}

export function bundlePath(realScope: string, id: string): string {
  return envelopePath(realScope, id).replace(/\.dsse\.json$/, ".sigstore.json");
}

function publish(dir: string, name: string, bytes: Buffer): "written" | "kept" {
  const staged = writeStagedFile(dir, `.${name}`, bytes);
  try {
    linkSync(staged, join(dir, name));
    return "written";
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") throw asStepError("attestation", error, { path: join(dir, name) });
    const held = readRegularFile(join(dir, name), {
      limit: MAX_BUNDLE_BYTES,
      refuse: (failure) =>
        new OatsError("invalid-artifact-store", `${join(dir, name)} is damaged (${failure})`, {
          path: join(dir, name),
          reason: failure,
        }),
    });
    if (!held.equals(bytes))
      throw new OatsError("integrity-mismatch", `${join(dir, name)} holds other bytes than its name says`, {
        path: join(dir, name),
        reason: "attestation-damaged",
      });
    return "kept";
  } finally {
    unlinkSync(staged);
  }
}

/** Store an envelope and its bundle; `kept` when the scope held it already. */
export function storeAttestation(
  realScope: string,
  envelope: Envelope,
): { id: string; status: "written" | "kept"; envelope: string; bundle: string } {
  const bytes = encodeEnvelope(envelope);
  const id = bytesDigest(bytes);
  ensureStoreAt(realScope, ATTESTATIONS_STORE);
  const dir = attestationsRoot(realScope);
  const status = publish(dir, `${id}.dsse.json`, bytes);
  publish(dir, `${id}.sigstore.json`, bundleOf(envelope));
  fsyncDirectory(dir);
  return { id, status, envelope: envelopePath(realScope, id), bundle: bundlePath(realScope, id) };
}

/** The ids in the store, in name order, and names that are no attestation file (left alone). */
export function listAttestationIds(realScope: string): { ids: string[]; strays: string[] } {
  if (!inspectStoreAt(realScope, ATTESTATIONS_STORE).complete) return { ids: [], strays: [] };
  const ids: string[] = [];
  const strays: string[] = [];
  const names = readdirSync(attestationsRoot(realScope)).sort();
  const envelopes = new Set(names.map((name) => ENVELOPE_NAME.exec(name)?.[1]).filter((id) => id !== undefined));
  for (const name of names) {
    const envelope = ENVELOPE_NAME.exec(name);
    if (envelope) ids.push(envelope[1]!);
    else if (name === ".gitignore" || name.startsWith(".staging-")) continue;
    else if (!envelopes.has(BUNDLE_NAME.exec(name)?.[1] ?? "")) strays.push(name);
  }
  return { ids, strays };
}

/**
 * An envelope of the store, read back: bounded (`too-large` past the
 * envelope limit), its bytes hashing to its name (`integrity-mismatch`
 * otherwise: the store was edited), in the form oats writes.
 */
export function readAttestation(realScope: string, id: string): { id: string; bytes: Buffer; envelope: Envelope } {
  const path = envelopePath(realScope, id);
  const bytes = readRegularFile(path, {
    limit: MAX_ENVELOPE_BYTES,
    refuse: (failure, details) =>
      failure === "too-large"
        ? attestationRefusal("too-large", `attestation ${id} is larger than ${MAX_ENVELOPE_BYTES} bytes`, {
            path,
            limit: MAX_ENVELOPE_BYTES,
          })
        : failure === "missing"
          ? new OatsError("artifact-not-found", `this scope holds no attestation ${id}`, { id, path })
          : new OatsError("invalid-artifact-store", `attestation ${id} cannot be read (${failure})`, {
              path,
              reason: failure,
              ...details,
            }),
  });
  const actual = bytesDigest(bytes);
  if (actual !== id)
    throw new OatsError("integrity-mismatch", `attestation ${id} hashes to ${actual}: the store was edited`, {
      path,
      expected: id,
      actual,
      reason: "attestation-damaged",
    });
  return { id, bytes, envelope: parseEnvelope(bytes, `attestation ${id}`) };
}

/** The bundle file of an attestation, checked to be exactly the bundle of its envelope. */
export function readBundleFile(realScope: string, id: string, envelope: Envelope): Buffer {
  const path = bundlePath(realScope, id);
  const bytes = readRegularFile(path, {
    limit: MAX_BUNDLE_BYTES,
    refuse: (failure) =>
      new OatsError("invalid-artifact-store", `the bundle of attestation ${id} cannot be read (${failure})`, {
        path,
        reason: failure,
      }),
  });
  if (!bytes.equals(bundleOf(envelope)))
    throw new OatsError("integrity-mismatch", `the bundle of attestation ${id} is not the bundle of its envelope`, {
      path,
      reason: "attestation-damaged",
    });
  return bytes;
}

/** An attestation named by its id or a unique prefix of it (at least 8 hex digits after `sha256-`). */
export function findAttestationId(realScope: string, ref: string): string {
  const text = String(ref);
  const prefix = text.startsWith("sha256-") ? text : `sha256-${text}`;
  if (!/^sha256-[0-9a-f]{8,64}$/.test(prefix))
    throw new OatsError(
      "invalid-input",
      `not an attestation id or prefix: ${JSON.stringify(text.slice(0, 100))} (sha256-<hex>, at least 8 hex digits)`,
      { reason: "attestation-id" },
    );
  const matches = listAttestationIds(realScope).ids.filter((id) => id.startsWith(prefix));
  if (matches.length === 1) return matches[0]!;
  if (matches.length === 0)
    throw new OatsError("artifact-not-found", `this scope holds no attestation ${prefix}`, { ref: prefix });
  throw new OatsError("invalid-input", `${prefix} names ${matches.length} attestations; give more digits`, {
    reason: "ambiguous-attestation",
    matches,
  });
}
