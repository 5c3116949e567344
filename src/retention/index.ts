export { retainCapabilityArtifact, retainTree, type RetainOptions, type RetainTreeRequest } from "./retain.js";
export { verifyRetainedCapability, verifyTree, type VerifyOptions } from "./verify.js";
export { cleanupStaging, fsck, listRetained, listStore, type CleanupReport, type FsckOutcome, type FsckReport, type RetainedEntry, type StoreListing } from "./inventory.js";
export { retainedCapabilityDir, retainedTreeDir, storeRoot, parseArtifactRef, type ArtifactRef } from "./store/layout.js";
export type { ArtifactReceipt } from "./receipt.js";
export { digestTree, type TreeDigests } from "./digest/tree.js";
export { DEFAULT_MAX_DEPTH } from "./digest/walk.js";
export { BLOBS_DIR, MAX_BLOB_BYTES, blobPath, parseBlobDigest, putBlob, readBlob, type PutBlobResult, type ReadBlobOptions } from "./store/blobs.js";
export { canonicalJson, canonicalJsonBytes, jsonDigest, bytesDigest } from "./digest/json.js";
export {
  BYTES_V1,
  DIGEST_FORMATS,
  JSON_V1,
  PACKAGE_PAYLOAD_EXEC,
  TREE_EXEC,
  TREE_FORMATS,
  TREE_LEGACY,
  integrityText,
  parseIntegrity,
  type DigestFormat,
  type Integrity,
  type TreeFormat,
} from "./integrity.js";
export { ARTIFACT_KINDS, IDENTIFIER_PATTERN, type ArtifactKind } from "./ids.js";
export { parseLock, readLockFile, type OatsLock, type CapabilityRow, type PackageRow } from "./oats-lock.js";
export { PROVENANCE_FILE } from "./provenance.js";
export { sourceIdentityKey, pinSourceIdentity, readSourceIdentity } from "./source-identity.js";
export { revisionSize, formatBytes, type RevisionSize } from "./revision-size.js";
