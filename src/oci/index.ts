import type { Readable } from "node:stream";
import { drain } from "./http.js";
import { getBlob, getBlobBytes, headBlob, type BlobReadOptions } from "./blobs.js";
import { readBlobPieces, type BlobPiecesOptions } from "./blob-pieces.js";
import {
  getManifest,
  listTags,
  putManifest,
  putManifestEnsuring,
  type Manifest,
  type ManifestReadOptions,
} from "./manifests.js";
import { parseOciReference, type OciReference } from "./reference.js";
import { RegistrySession, type SessionOptions } from "./session.js";
import { mountBlob, putBlob, type BlobSource, type UploadOptions, type UploadResult } from "./upload.js";

/**
 * A small OCI distribution client for one repository of one registry
 * (docs/design/fleet.md, "Transport, auth and trust boundary"). Every answer
 * is checked against what was asked: blob bytes against their digest while
 * they stream, manifests against the digest of their exact bytes, uploads
 * against the digest the registry reports. Every failure is an OatsError.
 * `SessionOptions.signal` abandons every exchange at once (Ctrl-C, or a
 * caller that refused what it read); a blob read takes its own as well.
 */
export class OciClient {
  readonly session: RegistrySession;

  constructor(reference: OciReference | string, options: SessionOptions = {}) {
    const parsed = typeof reference === "string" ? parseOciReference(reference) : reference;
    this.session = new RegistrySession(parsed, options);
  }

  get reference(): OciReference {
    return this.session.reference;
  }

  /** GET /v2/ (answering a challenge if there is one): resolves when the registry speaks the distribution API to us,
   * else a typed refusal. */
  async ping(): Promise<void> {
    const response = await this.session.request({ method: "GET", url: new URL("/v2/", this.session.base) });
    await drain(response);
    if (response.statusCode !== 200) throw this.session.unexpected(response, "GET /v2/");
  }

  /** The blob's size if the repository holds it, null if not. */
  headBlob(digest: string, options: { readonly signal?: AbortSignal } = {}): Promise<{ size: number } | null> {
    return headBlob(this.session, digest, options);
  }

  /** A stream of the blob that fails at its end unless the bytes are exactly `digest` (and `size`, if given). */
  getBlob(digest: string, options?: BlobReadOptions): Promise<Readable> {
    return getBlob(this.session, digest, options);
  }

  /** The blob a piece at a time through one reused buffer (blob-pieces.ts); fails unless it is exactly `digest`. */
  readBlobPieces(digest: string, options: BlobPiecesOptions, consume: (piece: Buffer) => void): Promise<number> {
    return readBlobPieces(this.session, digest, options, consume);
  }

  getBlobBytes(digest: string, options: BlobReadOptions & { maxBytes: number }): Promise<Buffer> {
    return getBlobBytes(this.session, digest, options);
  }

  /** Upload one blob (monolithic up to `chunkSize`, chunked above), resuming after a lost connection. */
  putBlob(source: BlobSource, options?: UploadOptions): Promise<UploadResult> {
    return putBlob(this.session, source, options);
  }

  /** Cross-repository mount; false when the registry would not (upload instead). */
  mountBlob(digest: string, fromRepository: string): Promise<boolean> {
    return mountBlob(this.session, digest, fromRepository);
  }

  getManifest(reference: string, options?: ManifestReadOptions): Promise<Manifest> {
    return getManifest(this.session, reference, options);
  }

  putManifest(reference: string, bytes: Buffer, mediaType: string): Promise<{ digest: string }> {
    return putManifest(this.session, reference, bytes, mediaType);
  }

  /** `putManifest` for a manifest whose blobs were just checked or sent: a refusal naming an unknown blob runs
   * `ensureBlobs` and asks again (bounded). */
  putManifestEnsuring(
    reference: string,
    bytes: Buffer,
    mediaType: string,
    ensureBlobs: () => Promise<void>,
  ): Promise<{ digest: string }> {
    return putManifestEnsuring(this.session, reference, bytes, mediaType, ensureBlobs);
  }

  listTags(): Promise<string[]> {
    return listTags(this.session);
  }
}

export { sha256Digest, type BlobReadOptions } from "./blobs.js";
export { readBlobPieces, type BlobPiecesOptions } from "./blob-pieces.js";
export { resolveCredentials, normalizeAuthKey, type Credentials, type CredentialOptions } from "./credentials.js";
export { isConnectionLost, registryRefusal } from "./http.js";
export { MAX_MANIFEST_BYTES, OCI_INDEX, OCI_MANIFEST, type Manifest, type ManifestReadOptions } from "./manifests.js";
export {
  formatOciReference,
  isLoopbackHost,
  parseOciReference,
  type OciReference,
  type OciRegistry,
} from "./reference.js";
export type { SessionOptions } from "./session.js";
export { bufferSource, fileSource, type BlobSource, type UploadOptions, type UploadResult } from "./upload.js";
export { getBlob, getBlobBytes, headBlob } from "./blobs.js";
export { getManifest, putManifestEnsuring } from "./manifests.js";
export { RegistrySession } from "./session.js";
export { putBlob } from "./upload.js";
export { attachReferrer, listReferrers, MAX_REFERRERS, type ReferrerDescriptor, referrersTag } from "./referrers.js";
