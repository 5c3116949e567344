/**
 * The package's `oats-retention/retention` entry: retention alone (digests,
 * the store, retain, verify, inventory), for a caller that needs nothing
 * above it. src/retention/index.ts is the layer's interface to the layers
 * above, which may hold more than the package publishes.
 */
export {
  bytesDigest,
  canonicalJson,
  canonicalJsonBytes,
  ERROR_CODES,
  ERROR_KINDS,
  type ErrorCode,
  type ErrorDetails,
  type ErrorKind,
  isOatsError,
  jsonDigest,
  OatsError,
} from "../core/index.js";
export { type TreeDigests, digestTree } from "./digest/tree.js";
export { DEFAULT_MAX_DEPTH } from "./digest/walk.js";
export { ARTIFACT_KINDS, type ArtifactKind, IDENTIFIER_PATTERN } from "./store/ids.js";
export {
  BYTES_V1,
  DIGEST_FORMATS,
  type DigestFormat,
  type Integrity,
  type IntegrityInput,
  JSON_V1,
  PACKAGE_PAYLOAD_EXEC,
  TREE_EXEC,
  TREE_FORMATS,
  TREE_LEGACY,
  type TreeFormat,
  integrityText,
  parseIntegrity,
} from "./digest/integrity.js";
export {
  type CleanupReport,
  type FsckOutcome,
  type FsckReport,
  type RetainedEntry,
  type StoreListing,
  cleanupStaging,
  fsck,
  listRetained,
  listStore,
} from "./inventory.js";
export {
  type CapabilityRow,
  type OatsLock,
  type OatsLockInput,
  type PackageRow,
  parseLock,
  readLockFile,
} from "./oats-lock.js";
export { PROVENANCE_FILE } from "./provenance.js";
export type { ArtifactReceipt } from "./receipt.js";
export type { LeftOut } from "./store/empty-directories.js";
export { type RetainOptions, type RetainTreeRequest, retainCapabilityArtifact, retainTree } from "./retain.js";
export { type RevisionSize, formatBytes, revisionSize } from "./revision-size.js";
export { pinSourceIdentity, readSourceIdentity, sourceIdentityKey } from "./source-identity.js";
export {
  MAX_BLOB_BYTES,
  type PutBlobResult,
  type ReadBlobOptions,
  parseBlobDigest,
  putBlob,
  readBlob,
} from "./store/blobs.js";
export {
  type ArtifactRef,
  type ArtifactRefInput,
  parseArtifactRef,
  retainedCapabilityDir,
  retainedTreeDir,
  storeRoot,
} from "./store/layout.js";
export { type VerifyOptions, verifyRetainedCapability, verifyTree } from "./verify.js";
