export {
  resolutionRecordSchema,
  RESOLUTION_STATUSES,
  ENTRYPOINT_ROLES,
  ORIGIN_KINDS,
  type ResolutionRecord,
  type ArtifactRefRecord,
  type CredentialRef,
} from "./record.js";
export { readCanonicalJson } from "./canonical-read.js";
export {
  writeResolution,
  type ResolutionRecordInput,
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
export {
  readResolution,
  checkReadiness,
  resolveEntrypoint,
  referencedArtifacts,
  type ReadResolution,
  type ReadResolutionOptions,
} from "./read.js";
export {
  reconstruct,
  legacyInstanceSchema,
  LOCK_FILE,
  INSTANCE_FILE,
  type LegacyInstance,
  type ReconstructResult,
} from "./reconstruct.js";
export { splitCommand, parseLegacyCommand, INSTALLED_DIR, LEGACY_LAUNCHERS } from "./legacy-command.js";
export {
  findSecrets,
  assertNoSecrets,
  isSecretKeyName,
  secretShapeOf,
  type SecretFinding,
  type FindSecretsOptions,
} from "./secrets.js";
export { parsePlan, readPlanFile, parsePlanText, type Plan, type PlanCapability, type PlanInput } from "./plan.js";
export { prepare, type PrepareOptions, type PrepareResult, type PrepareStep } from "./prepare.js";
export { capabilityArtifactEntry } from "./artifact-entry.js";
export {
  decodeUtf8,
  escapePointerSegment,
  parseByExtension,
  parseWith,
  parseYamlText,
  readOperatorFile,
  refuseProtoKeys,
} from "./operator-input.js";
export { planSchema } from "./plan.js";
export { resolveEntrypointIn } from "./read.js";
export { entrypointPathSchema, sourceIdentitySchema } from "./record.js";
export { findArgSecrets, secretRefusal } from "./secrets.js";
export { INSTANCE_REFS_DIR, instanceRefReader, MAX_RECORD_BYTES, recordReader, RESOLUTIONS_DIR } from "./store.js";
