export {
  extractTar,
  extractLimits,
  DEFAULT_EXTRACT_LIMITS,
  type ExtractLimits,
  type ExtractOptions,
  type ExtractResult,
} from "./extract.js";
export { entryPath, symlinkTarget, foldKey, type EntryRefusalReason } from "./entry-path.js";
export {
  retainTarball,
  parseTarballIntegrity,
  type RetainTarballRequest,
  type TarballCapabilityRequest,
  type TarballTreeRequest,
  type TarballReceipt,
} from "./tarball.js";
export { retainSource, type SourceRequest, type SourceReceipt, type RetainSourceOptions } from "./source.js";
export { assertFullCommit, gitEnvironment, FULL_COMMIT_PATTERN } from "./git.js";
export { withExtractionDir, EXTRACT_ROOT } from "./staging.js";
export {
  exportBundle,
  importBundle,
  parseExportRef,
  pinnedBlobs,
  bundleArtifactPath,
  bundleResolutionPath,
  bundleBlobPath,
  BUNDLE_MANIFEST,
  type BundleManifest,
  type BundleArtifactRow,
  type ExportRef,
  type ParsedExportRef,
  type ExportOptions,
  type ExportReport,
  type ImportOptions,
  type ImportReport,
} from "./bundle.js";
export { BUNDLE_SCHEMA_VERSION, importStaged } from "./bundle.js";
export { type TarOutput, TarWriter, TreeSink } from "./tar-writer.js";
