/**
 * The package's `oats-retention/resolution` entry: the resolution layer's public names, for a caller that
 * needs nothing beside them. src/resolution/index.ts is the layer's interface to the layers above,
 * which may hold more than the package publishes.
 */
export {
  ERROR_CODES,
  ERROR_KINDS,
  type ErrorCode,
  type ErrorDetails,
  type ErrorKind,
  isOatsError,
  OatsError,
} from "../core/index.js";
export { LEGACY_LAUNCHERS, parseLegacyCommand, splitCommand } from "./legacy-command.js";
export { parsePlan, parsePlanText, type Plan, type PlanCapability, type PlanInput, readPlanFile } from "./plan.js";
export { prepare, type PrepareOptions, type PrepareResult, type PrepareStep } from "./prepare.js";
export {
  checkReadiness,
  readResolution,
  type ReadResolution,
  type ReadResolutionOptions,
  referencedArtifacts,
  resolveEntrypoint,
} from "./read.js";
export {
  type LegacyInstance,
  legacyInstanceSchema,
  LOCK_FILE,
  reconstruct,
  type ReconstructResult,
} from "./reconstruct.js";
export {
  type ArtifactRefRecord,
  type CredentialRef,
  ENTRYPOINT_ROLES,
  ORIGIN_KINDS,
  RESOLUTION_STATUSES,
  type ResolutionRecord,
  resolutionRecordSchema,
} from "./record.js";
export {
  assertNoSecrets,
  findSecrets,
  type FindSecretsOptions,
  isSecretKeyName,
  type SecretFinding,
  secretShapeOf,
} from "./secrets.js";
export {
  type InstanceRef,
  listResolutionIds,
  parseResolutionId,
  readInstanceRef,
  resolutionPath,
  writeInstanceRef,
  type ResolutionRecordInput,
  writeResolution,
  type WrittenRecord,
} from "./store.js";
