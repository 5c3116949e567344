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
export { reconstruct, legacyInstanceSchema, LOCK_FILE, INSTANCE_FILE, type LegacyInstance, type ReconstructResult } from "./reconstruct.js";
export { splitCommand, parseLegacyCommand, INSTALLED_DIR, LEGACY_LAUNCHERS } from "./legacy-command.js";
export { findSecrets, assertNoSecrets, isSecretKeyName, secretShapeOf, type SecretFinding, type FindSecretsOptions } from "./secrets.js";
export { parsePlan, readPlanFile, parsePlanText, type Plan, type PlanCapability } from "./plan.js";
export { prepare, type PrepareOptions, type PrepareResult, type PrepareStep } from "./prepare.js";
