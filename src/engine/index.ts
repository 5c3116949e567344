/**
 * The digest engine: the read machinery under every digest, copy and
 * verification. One entry, readLeavesInOrder, hands the bytes of a listed
 * tree's files and the text of its symlinks to a consumer in the order
 * given, each file opened inside its directory's descriptor and checked
 * not to have changed while it was read (file-reader.ts says how). Below
 * it: one file of the general path (opened-file.ts), the ring of a second
 * core (read-ring.ts), the read-ahead of a cold cache (prefetch.ts), the
 * addon's loader and its calls (native-*.ts), the directory cursor, the
 * block-read counts and the test seam between a read and its check.
 *
 * Besides the entry, what a walk needs to list what the engine reads: the
 * entries themselves, the race-free opening and listing of directories
 * (natively where the addon loaded), the refusal of a tree that changed,
 * and the warm-up of a cold walk. The engine imports only src/core/; the
 * formats, the walk and the pass driver are retention's
 * (src/retention/digest/).
 */

export { readLeavesInOrder, type FileConsumer, type FileInfo, type ReadOptions } from "./file-reader.js";
export type { DirectoryEntry, FileEntry, LeafEntry, SymlinkEntry, TreeEntry } from "./entries.js";
export { changedOrUnreadable } from "./refusals.js";
export { DIRECTORY_FDS, inDirectory, listingPath, openChildDirectory, openRoot } from "./directories.js";
export { closeOpened, listNatively, listWithInodes, type Listed, type OpenedDirectory } from "./native-directories.js";
export { prefetchMode, warmDirectories, type Prefetcher } from "./prefetch.js";
export { nativeReadsStatus, type NativeReadsStatus } from "./native-reads.js";
