export * from "./retention/index.js";
export { OatsError, ERROR_CODES, ERROR_KINDS, isOatsError, type ErrorCode, type ErrorKind, type ErrorDetails } from "./errors.js";
export * from "./resolution/index.js";
export * from "./captures/index.js";
export * from "./acquisition/index.js";
export * from "./scope/index.js";
export * from "./lifecycle/index.js";
export * from "./evidence/index.js";
export * from "./evidence/delivery.js";
