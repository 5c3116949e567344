import { OatsError } from "../core/index.js";
import { closeOpened, type OpenedDirectory } from "./native-directories.js";
import { DIRECTORY_FDS, inDirectory, openChildDirectory, openRoot } from "./directories.js";
import type { DirectoryEntry, FileEntry } from "./entries.js";

/**
 * The directories the reads are in, opened again the way the walk opened
 * them (each inside its parent's descriptor, never following a symlink) and
 * checked to be the very directories the walk listed (device and inode).
 * Leaves arrive depth first, so a stack of open directories, from the root
 * to the current one, is all that is kept: at most one descriptor per
 * level, and each directory opened once per pass. A file is then opened as
 * /proc/self/fd/<its directory>/<name>, which no swap of a directory above
 * it for a symlink can redirect (see directories.ts).
 */
export class DirectoryCursor {
  private readonly open: { directory: DirectoryEntry; fd: number; native?: OpenedDirectory["native"] }[] = [];
  /**
   * Directories left while a batch is gathered (holdDescriptors): a batch of
   * the native reads names files of several directories, each by its
   * directory's descriptor, so none of them may be closed (and its number
   * reused) before the batch has been read.
   */
  private retired: { fd: number; native?: OpenedDirectory["native"] }[] | null = null;

  /** The path to open `file` by: inside its directory's descriptor, or its plain path where /proc is not available. */
  pathOf(file: FileEntry): string {
    if (!DIRECTORY_FDS) return file.absolute;
    return inDirectory(this.fdOf(file.parent), file.parent.absolute, file.name);
  }

  /** The descriptor of `file`'s directory to open it in (openat), or null where /proc is not available. */
  descriptorOf(file: FileEntry): number | null {
    return DIRECTORY_FDS ? this.fdOf(file.parent) : null;
  }

  private fdOf(directory: DirectoryEntry): number {
    const top = this.open[this.open.length - 1];
    if (top?.directory === directory) return top.fd;
    const chain: DirectoryEntry[] = [];
    for (let at: DirectoryEntry | null = directory; at !== null; at = at.parent) chain.push(at);
    chain.reverse();
    let shared = 0;
    while (shared < this.open.length && shared < chain.length && this.open[shared]!.directory === chain[shared])
      shared += 1;
    while (this.open.length > shared) this.leave(this.open.pop()!);
    for (let index = shared; index < chain.length; index++) {
      const wanted = chain[index]!;
      const opened: OpenedDirectory =
        index === 0
          ? openRoot(wanted.absolute)
          : openChildDirectory(this.open[index - 1]!.fd, wanted.parent!.absolute, wanted.name, wanted.path);
      if (opened.dev !== wanted.dev || opened.ino !== wanted.ino) {
        // Never kept: a cursor asked again must meet the same refusal, not find the impostor on its stack.
        closeOpened(opened);
        throw new OatsError(
          "invalid-artifact",
          `directory changed while it was read (replaced): ${wanted.path || "."}`,
          {
            path: wanted.path || ".",
            reason: "changed-while-reading",
            changed: "directory",
          },
        );
      }
      this.open.push({ directory: wanted, fd: opened.fd, native: opened.native });
    }
    return this.open[this.open.length - 1]!.fd;
  }

  private leave(opened: { fd: number; native?: OpenedDirectory["native"] }): void {
    if (this.retired) this.retired.push(opened);
    else closeOpened(opened);
  }

  /** Until releaseDescriptors, every descriptor descriptorOf has returned stays open. */
  holdDescriptors(): void {
    this.retired ??= [];
  }

  /** Close the directories left since holdDescriptors. */
  releaseDescriptors(): void {
    const retired = this.retired;
    this.retired = null;
    if (retired) for (const opened of retired) closeOpened(opened);
  }

  close(): void {
    this.releaseDescriptors();
    while (this.open.length > 0) closeOpened(this.open.pop()!);
  }
}
