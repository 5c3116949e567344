export {
  bytesDigest,
  bytesDigester,
  canonicalJson,
  canonicalJsonBytes,
  compareUtf8,
  jsonDigest,
  type JsonObject,
  type JsonValue,
} from "./canonical-json.js";
export {
  asStepError,
  errnoCode,
  ERROR_CODES,
  ERROR_KINDS,
  type ErrorCode,
  type ErrorDetails,
  type ErrorKind,
  interruptedError,
  isInterrupted,
  isOatsError,
  OatsError,
} from "./errors.js";
export {
  describeJsonProblem,
  nestsDeeperThan,
  OPERATOR_MAX_DEPTH,
  parseJsonText,
  scanJsonText,
  STORED_MAX_DEPTH,
  valueDepthProblem,
} from "./json-text.js";
