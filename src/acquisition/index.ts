export { extractTar, DEFAULT_EXTRACT_LIMITS, type ExtractLimits, type ExtractOptions, type ExtractResult } from "./extract.js";
export { entryPath, symlinkTarget, foldKey, type EntryRefusalReason } from "./entry-path.js";
