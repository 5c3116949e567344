import { linkSync, unlinkSync } from "node:fs";
import { BYTES_V1, parseDigestName } from "../digest/integrity.js";
import { join, resolve } from "node:path";
import { OatsError, asStepError, errnoCode, bytesDigest } from "../../core/index.js";
import { ensureStoreAt, fsyncDirectory, inspectStoreAt, removeCreatedStore, resolveScope } from "./components.js";
import { readRegularFile, writeStagedFile } from "./files.js";
import { assertContained } from "./layout.js";
import { withPublishLeaseSync } from "./lease.js";

/**
 * `<scope>/.agents/blobs/sha256-<hex>`: pinned configuration bytes (a
 * classification config, a capture profile), named by their oats.bytes.v1
 * digest (SHA-256 of the raw bytes). contract section 3.
 *
 * Publication follows writeResolution: the bytes are written to a staged file,
 * fsync'd and link()ed to their name, which never replaces. A blob already
 * there is compared byte for byte: identical → "kept"; other bytes →
 * `integrity-mismatch`, and the damaged blob is left alone for inspection.
 *
 * Reading always re-hashes the bytes against the digest asked for.
 *
 * Refusals:
 * - a malformed digest (abbreviated, uppercase, another algorithm): `invalid-input`;
 * - no blob (or no blob store yet): `blob-not-found`;
 * - a symlink, directory or other non-regular entry at the blob's path, or a
 *   store component that is a symlink or not a directory: `invalid-artifact-store`
 *   (the caller's input is fine; the store is what is damaged);
 * - a blob larger than the read limit, or one that changed while read: `invalid-artifact`;
 * - bytes that do not hash to the digest: `integrity-mismatch` with expected/actual.
 * A refused request creates nothing: input and the store are checked before
 * anything is written.
 */

export const BLOBS_DIR = [".agents", "blobs"] as const;
/** Pinned configuration is small; a blob is read whole and refused beyond this. */
export const MAX_BLOB_BYTES = 16 << 20;

/**
 * A blob's digest name: `sha256-<64 lowercase hex>` (an `oats.bytes.v1:` prefix is accepted and dropped).
 * Anything else is refused with `invalid-input`.
 */
export function parseBlobDigest(input: string): string {
  return parseDigestName(input, BYTES_V1, "blob digest", "digest");
}

/** Lexical: where a blob lives; nothing is read or checked on disk. */
export function blobPath(scope: string, digest: string): string {
  const root = resolve(scope, ...BLOBS_DIR);
  const name = parseBlobDigest(digest);
  return assertContained(root, join(root, name), `blob ${name}`);
}

export interface PutBlobResult {
  readonly digest: string;
  readonly path: string;
  readonly status: "written" | "kept";
}

export interface ReadBlobOptions {
  /** Refuse a blob larger than this many bytes (default MAX_BLOB_BYTES). */
  readonly limit?: number;
}

function readBlobFile(path: string, digest: string, limit: number): Buffer {
  return readRegularFile(path, {
    limit,
    refuse: (failure, details) => {
      switch (failure) {
        case "missing":
          return new OatsError("blob-not-found", `no blob ${digest} in this scope`, { ...details, digest });
        case "symlink":
          return new OatsError(
            "invalid-artifact-store",
            `blob ${digest} is a symlink, refusing to follow it: ${path}`,
            { ...details, digest, reason: "symlink" },
          );
        case "not-a-file":
          return new OatsError("invalid-artifact-store", `blob ${digest} is not a regular file: ${path}`, {
            ...details,
            digest,
            reason: "not-a-file",
          });
        case "too-large":
          return new OatsError("invalid-artifact", `blob ${digest} is larger than ${limit} bytes: ${path}`, {
            ...details,
            digest,
            reason: "too-large",
          });
        case "changed":
          return new OatsError("invalid-artifact", `blob ${digest} changed while it was read: ${path}`, {
            ...details,
            digest,
            reason: "changed-while-reading",
          });
        default:
          return asStepError("read", new Error(`cannot open ${path}: ${String(details["errno"])}`), {
            ...details,
            digest,
          });
      }
    },
  });
}

/** Pin `bytes` as a blob; returns its oats.bytes.v1 digest and path. */
export function putBlob(scope: string, bytes: Uint8Array): PutBlobResult {
  if (!(bytes instanceof Uint8Array))
    throw new OatsError("invalid-input", "blob bytes must be a Buffer or Uint8Array", { type: typeof bytes });
  if (bytes.length > MAX_BLOB_BYTES) {
    throw new OatsError("invalid-input", `blob of ${bytes.length} bytes is larger than ${MAX_BLOB_BYTES}`, {
      size: bytes.length,
      limit: MAX_BLOB_BYTES,
    });
  }
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const realScope = resolveScope(scope);
  return withPublishLeaseSync(realScope, () => putBlobLeased(realScope, buffer));
}

function putBlobLeased(realScope: string, buffer: Buffer): PutBlobResult {
  const digest = bytesDigest(buffer);
  const path = blobPath(realScope, digest);
  // Read-only first: a symlinked or foreign store is refused before anything is created.
  inspectStoreAt(realScope, BLOBS_DIR);
  const created = ensureStoreAt(realScope, BLOBS_DIR);
  const dir = join(realScope, ...BLOBS_DIR);
  let staged: string;
  try {
    staged = writeStagedFile(dir, "", buffer);
  } catch (error) {
    removeCreatedStore(created, dir);
    throw asStepError("stage", error, { path });
  }
  try {
    linkSync(staged, path);
  } catch (error) {
    if (errnoCode(error) !== "EEXIST") {
      unlinkSync(staged);
      removeCreatedStore(created, dir);
      throw asStepError("publish", error, { path, digest });
    }
    unlinkSync(staged);
    // Already there: reuse it only when it is exactly these bytes; never replace it.
    const existing = readBlobFile(path, digest, MAX_BLOB_BYTES);
    if (!existing.equals(buffer)) {
      throw new OatsError("integrity-mismatch", `blob ${digest} exists with other bytes; it was left alone`, {
        digest,
        path,
        expected: digest,
        actual: bytesDigest(existing),
      });
    }
    return { digest, path, status: "kept" };
  }
  unlinkSync(staged);
  fsyncDirectory(dir);
  return { digest, path, status: "written" };
}

/** Read a blob's bytes, after checking they hash to `digest`. */
export function readBlob(scope: string, digest: string, options: ReadBlobOptions = {}): Buffer {
  const canonical = parseBlobDigest(digest);
  const limit = options.limit ?? MAX_BLOB_BYTES;
  if (!Number.isSafeInteger(limit) || limit < 0)
    throw new OatsError("invalid-input", `invalid blob read limit ${String(limit)}`, { limit });
  const realScope = resolveScope(scope);
  const path = blobPath(realScope, canonical);
  if (!inspectStoreAt(realScope, BLOBS_DIR).complete)
    throw new OatsError("blob-not-found", `no blob ${canonical} in this scope`, { digest: canonical, path });
  const bytes = readBlobFile(path, canonical, limit);
  const actual = bytesDigest(bytes);
  if (actual !== canonical) {
    throw new OatsError("integrity-mismatch", `blob ${canonical}: its bytes hash to ${actual}`, {
      digest: canonical,
      path,
      expected: canonical,
      actual,
    });
  }
  return bytes;
}
