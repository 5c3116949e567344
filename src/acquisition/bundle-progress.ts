import type { DigestOptions, TreeListing, ProgressListener } from "../retention/index.js";

/**
 * The digest options for each tree an export writes, in order: one `export`
 * phase whose counts run across all the trees, against the files every
 * tree's walk listed before any was written.
 */
export function exportProgress(
  listings: readonly TreeListing[],
  options: { readonly onProgress?: ProgressListener; readonly signal?: AbortSignal },
) {
  let totalFiles = 0;
  for (const listing of listings) for (const leaf of listing.leaves) if (leaf.type === "file") totalFiles += 1;
  let baseFiles = 0;
  let baseBytes = 0;
  let lastFiles = 0;
  let lastBytes = 0;
  const { onProgress, signal } = options;
  return {
    /** Options for the next tree (call once per tree, in order). */
    options(): DigestOptions {
      baseFiles += lastFiles;
      baseBytes += lastBytes;
      lastFiles = 0;
      lastBytes = 0;
      return {
        phase: "export",
        ...(signal ? { signal } : {}),
        ...(onProgress
          ? {
              onProgress: (event) => {
                lastFiles = event.files;
                lastBytes = event.bytes;
                onProgress({
                  phase: "export",
                  files: baseFiles + event.files,
                  bytes: baseBytes + event.bytes,
                  totalFiles,
                });
              },
            }
          : {}),
      };
    },
  };
}
