import { isOatsError, canonicalJsonBytes, jsonDigest } from "../core/index.js";
import { putBlob, readBlob } from "./store/blobs.js";

/** The store key of a qualified source identity: the 64 hex of its oats.json.v1 digest. */
export function sourceIdentityKey(identity: string): string {
  return jsonDigest(identity).slice("sha256-".length);
}

/*
 * A source is stored under the key of its identity, which the key alone does
 * not give back. The identity's own canonical JSON bytes, pinned as a blob,
 * have exactly that digest (oats.bytes.v1 of the oats.json.v1 bytes), so the
 * identity is found by the key and verified by it, with no index to keep.
 */

/** Pin a qualified identity's canonical bytes; its blob digest is `sha256-<key>`. */
export function pinSourceIdentity(scope: string, identity: string): void {
  putBlob(scope, canonicalJsonBytes(identity));
}

/** The qualified identity of a source key when it was pinned, else null. */
export function readSourceIdentity(scope: string, key: string): string | null {
  let bytes: Buffer;
  try {
    bytes = readBlob(scope, `sha256-${key}`);
  } catch (error) {
    if (isOatsError(error) && error.code === "blob-not-found") return null;
    throw error;
  }
  // readBlob checked the digest. The blob may still be another kind (a source retained under a
  // bare key that happens to name a pinned config): only a string in its canonical form is an identity.
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString("utf8"));
  } catch {
    return null;
  }
  return typeof value === "string" && canonicalJsonBytes(value).equals(bytes) ? value : null;
}
