export { resolutionRecordSchema, RESOLUTION_STATUSES, ENTRYPOINT_ROLES, ORIGIN_KINDS, type ResolutionRecord, type ArtifactRefRecord, type CredentialRef } from "./record.js";
export { readCanonicalJson } from "./canonical-read.js";
export {
  writeResolution,
  readRecordBytes,
  listResolutionIds,
  parseResolutionId,
  resolutionPath,
  encodeRecord,
  writeInstanceRef,
  readInstanceRef,
  instanceRefPath,
  type WrittenRecord,
  type InstanceRef,
} from "./store.js";
export { readResolution, checkReadiness, resolveEntrypoint, referencedArtifacts, type ReadResolution, type ReadResolutionOptions } from "./read.js";
export { reconstruct, splitCommand, parseLegacyCommand, legacyInstanceSchema, INSTALLED_DIR, LOCK_FILE, INSTANCE_FILE, LEGACY_LAUNCHERS, type LegacyInstance, type ReconstructResult } from "./reconstruct.js";
