export { retainCapabilityArtifact, retainTree, type RetainOptions, type RetainTreeRequest } from "./retain.js";
export { verifyRetainedCapability, verifyTree, type VerifyOptions } from "./verify.js";
export {
  cleanupStaging,
  fsck,
  fsckListed,
  listRetained,
  listStore,
  storeRevisions,
  type CleanupReport,
  type FsckOutcome,
  type FsckReport,
  type RetainedEntry,
  type StoreListing,
} from "./inventory.js";
export {
  retainedCapabilityDir,
  retainedTreeDir,
  storeRoot,
  parseArtifactRef,
  type ArtifactRef,
  type ArtifactRefInput,
} from "./store/layout.js";
export type { ArtifactReceipt } from "./receipt.js";
export {
  emptyDirectories,
  LEFT_OUT_PATHS,
  type LeftOut,
  withoutDirectories,
} from "./store/empty-directories.js";
export { digestTree, type TreeDigests } from "./digest/tree.js";
export { DEFAULT_MAX_DEPTH } from "./digest/walk.js";
export {
  BLOBS_DIR,
  MAX_BLOB_BYTES,
  blobPath,
  parseBlobDigest,
  putBlob,
  readBlob,
  type PutBlobResult,
  type ReadBlobOptions,
} from "./store/blobs.js";
export { canonicalJson, canonicalJsonBytes, jsonDigest, bytesDigest } from "../core/index.js";
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
  type IntegrityInput,
  type TreeFormat,
} from "./digest/integrity.js";
export { ARTIFACT_KINDS, IDENTIFIER_PATTERN, type ArtifactKind } from "./store/ids.js";
export {
  parseLock,
  readLockFile,
  type OatsLock,
  type OatsLockInput,
  type CapabilityRow,
  type PackageRow,
} from "./oats-lock.js";
export { PROVENANCE_FILE } from "./provenance.js";
export { sourceIdentityKey, pinSourceIdentity, readSourceIdentity } from "./source-identity.js";
export { revisionSize, formatBytes, type RevisionSize } from "./revision-size.js";
export { adoptVerifiedTree, type VerifiedTree } from "./adopt-verified.js";
// The engine's names the layers above use with a digest: a sink's interface, and the path of a name in an
// open directory.
export { type FileConsumer, type FileEntry, type FileInfo, inDirectory, type SymlinkEntry } from "../engine/index.js";
export { digestListing, type DigestOptions, FRAMINGS } from "./digest/tree.js";
export { type TreeListing, walkTree } from "./digest/walk.js";
export {
  assertArtifactKey,
  assertArtifactKind,
  assertIdentifier,
  IDENTIFIER_MAX_LENGTH,
  identifierSchema,
  SOURCE_KEY_PATTERN,
} from "./store/ids.js";
export { DIGEST_VALUE_PATTERN, digestHex, parseDigestName, parseTreeIntegrity } from "./digest/integrity.js";
export { namesIn, stagingAbandoned } from "./inventory.js";
export { capabilityRows, lockDocumentSchema, MAX_LOCK_BYTES, parseLockText } from "./oats-lock.js";
export { hashFilesInLanes, settleInLanes } from "./parallel/pool.js";
export {
  EMIT_EVERY_FILES,
  isInterrupted,
  noteRemoved,
  type ProgressEvent,
  type ProgressListener,
  type RemovedPath,
  throwIfAborted,
} from "./digest/progress.js";
export { checkProvenance, expectedProvenance } from "./provenance.js";
export { adoptCapabilityArtifact, adoptTree } from "./retain.js";
export { checkSymlinks } from "./source-check.js";
export {
  ensureStoreAt,
  fsyncDirectory,
  inspectStore,
  inspectStoreAt,
  removeCreatedStore,
  resolveScope,
} from "./store/components.js";
export { faultPoint } from "./store/faults.js";
export {
  entryPresent,
  HeldFile,
  openNamedPath,
  readInPieces,
  readRegularFile,
  readRegularFileInPieces,
  type ReadFailure,
  writeNewFileDurably,
  writeNewFileDurablyInPieces,
  writeRestSync,
  writeStagedFile,
} from "./store/files.js";
export {
  AGENTS_DIR,
  assertContained,
  EXTRACT_STORE,
  parseStagingName,
  RUN_COPIES_STORE,
  STAGING_PREFIX,
  stagingName,
} from "./store/layout.js";
export { listLeases, withGcLock, withPublishLease, withPublishLeaseSync } from "./store/lease.js";
export { holdPublishLease, type LeaseHold } from "./store/lease-hold.js";
export { ManifestRecorder } from "./store/manifest-encoding.js";
export {
  digestTreeWithRows,
  firstDifference,
  manifestPath,
  modeDifference,
  readManifestBytes,
  readManifestRows,
  rowsDifference,
  writeManifest,
  type Difference,
  type ManifestRow,
} from "./store/manifest.js";
export { DEFAULT_LOCK_WAIT_MS, withFileLock, withRevisionLock } from "./store/publish-lock.js";
export { linksSettled, revisionParentSegments } from "./store/publish.js";
export { removeTree, StagingWriter } from "./store/staging-writer.js";
export { verifyAllTrees, verifyTrees } from "./verify-many.js";
export { checkSharedLayer, type LayerCheck } from "./layer-check.js";
export {
  FILES_STORE,
  heldPath,
  listHeldFiles,
  type FilesOutcome,
  type HeldEntry,
} from "./store/shared-layer.js";
export { dedupe, type DedupeOptions, type DedupeReport, type DedupeRevision } from "./dedupe.js";
export { privateDir, readPrivateFile, writePrivateFile } from "./store/private-state.js";
export {
  isPrivateDirectory,
  operatorStateDir,
  scopeState,
  scopeStateDir,
  stateRoot,
  type ScopeState,
  type StateProblem,
  type StateProblemReason,
} from "./store/state-location.js";
