import { createHash } from "node:crypto";
import { join } from "node:path";
import { privateDir, readPrivateFile, writePrivateFile } from "./private-state.js";

/**
 * The anchored revision manifests: for a revision named by its
 * oats.tree-exec.v1 digest D, the SHA-256 of D's manifest bytes, kept in the
 * operator's private state (`<scope state>/manifests/<hex of D>`), outside
 * the scope, where a writer of the scope cannot forge it.
 *
 * A record is written only when this account read D's bytes and measured
 * the manifest rows in that same read (verify-staged at publication, or the
 * caller's verified read of an adopted tree). The manifest is a
 * deterministic function of the tree, so a record is true forever: gc never
 * removes one, and a record of a revision no longer held is harmless.
 * With it, fsck may take a revision whose manifest hashes to the record as
 * described by that manifest (anchored-check.ts); without it, or when the
 * state cannot be trusted (state-location.ts), fsck re-hashes the revision.
 * Losing a record costs only that re-hash, so it is written without fsync.
 */

const DIR = "manifests";
const DIGEST = /^sha256-([0-9a-f]{64})$/;
const RECORD = /^([0-9a-f]{64})\n$/;

export function manifestSha256(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** The directory of the anchored manifests, created 0700; null when the private state cannot be trusted. */
export function manifestAnchorDir(realScope: string): string | null {
  return privateDir(realScope, DIR);
}

/** Record that the revision named `execDigest` has a manifest whose bytes are `manifest`. Best effort. */
export function anchorManifest(realScope: string, execDigest: string, manifest: Buffer): void {
  const hex = DIGEST.exec(execDigest)?.[1];
  if (!hex) return;
  try {
    const dir = manifestAnchorDir(realScope);
    if (dir === null) return;
    writePrivateFile(dir, hex, Buffer.from(`${manifestSha256(manifest)}\n`), { durable: false });
  } catch {
    // a record lost costs a re-hash, never a verdict
  }
}

/** The SHA-256 (hex) recorded for the manifest of the revision named `execDigest`, or null. */
export function anchoredManifest(dir: string, execDigest: string): string | null {
  const hex = DIGEST.exec(execDigest)?.[1];
  if (!hex) return null;
  const bytes = readPrivateFile(join(dir, hex), 128);
  return bytes === null ? null : (RECORD.exec(bytes.toString("latin1"))?.[1] ?? null);
}
