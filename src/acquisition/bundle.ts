/**
 * Offline and deferred transfer of retained artifacts: a bundle is an
 * uncompressed tar holding
 *
 *   manifest.json                         first; canonical JSON (oats.json.v1 form)
 *   artifacts/<kind>/<key>/<64 hex>/...   each tree, exec bits and symlink text verbatim
 *   resolutions/sha256-<hex>.json         each record's exact bytes
 *   blobs/sha256-<hex>                    each pinned blob's exact bytes
 *
 * and the manifest `{schemaVersion: 1, artifacts: [{kind, key, integrity,
 * path}], resolutions: [{id, path}], blobs: [{digest, path}]}` names every
 * item by its digest. Trees are always named by oats.tree-exec.v1.
 *
 * Export reads only the store. Every tree is hashed from the very bytes that
 * are written into the bundle (one read: a revision damaged or changed while
 * it is read is `integrity-mismatch`, never a bundle), every record and blob
 * is read through its checking reader, and the bundle is written to a
 * dot-prefixed temporary file beside its destination, fsync'd, and only then
 * linked (or with `force`, renamed) to its name.
 *
 * A capability revision named by its lock's oats.tree-legacy.v0 integrity is
 * accepted: it is verified under that name first, and exported under the
 * oats.tree-exec.v1 digest measured by the same verification (the report
 * says `translatedFrom`). A bundle never carries a legacy name: that format
 * ignores exec bits and has no length framing, so it cannot vouch for a
 * bundle's bytes. The import retains the tree under `tree-exec-v1/`.
 *
 * Import extracts with the safe extractor into a staging directory inside
 * the scope (`.agents/extract/`, see staging.ts), validates the manifest
 * strictly, checks that the extracted content is exactly what the manifest
 * lists, verifies every tree, record and blob against its digest, checks
 * that every record's artifacts and blobs travel with it, and checks what
 * the target scope already holds under the same names, all before anything
 * is published. Only then does each item go through its normal publication
 * path (adoptTree with `expect`, putBlob, writeResolution; records last, so
 * a record never appears before what it names). The staging directory is
 * always removed.
 */

// The module is split by concern; this file keeps the one import path the rest of the project uses.
export {
  BUNDLE_MANIFEST,
  BUNDLE_SCHEMA_VERSION,
  bundleArtifactPath,
  bundleBlobPath,
  bundleResolutionPath,
  parseExportRef,
  pinnedBlobs,
  type BundleArtifactRow,
  type BundleManifest,
  type ExportRef,
  type ParsedExportRef,
} from "./bundle-format.js";
export { exportBundle, type ExportOptions, type ExportReport } from "./bundle-export.js";
export { importBundle, importStaged, type ImportOptions, type ImportReport } from "./bundle-import.js";
