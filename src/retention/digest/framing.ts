import type { TreeFormat } from "./integrity.js";

/**
 * What distinguishes one tree digest format from another: its record framing
 * and the order in which records are fed to the one SHA-256 stream. The tree
 * walk, the streamed reads and the hashing are shared (see tree.ts).
 */
export interface TreeFraming {
  readonly format: TreeFormat;
  /** "legacy": pre-order with collated siblings; "bytes": sorted by the UTF-8 bytes of the full path. */
  readonly order: "legacy" | "bytes";
  header(): Buffer[];
  /** Whether a file or symlink at this path is part of the digest. */
  includes(path: string): boolean;
  /** True when includes() is true for every path, so it need not be asked per file. */
  readonly includesAll: boolean;
  fileHead(path: string, mode: number, size: number): Buffer[];
  /**
   * The bytes fileHead() gives, written into `out` at `at` instead of into
   * buffers of their own: the end offset, or -1 (nothing meant) when they
   * do not fit or the path is not ASCII, and fileHead() is asked instead.
   * Optional: a framing without it is asked fileHead() for every file.
   */
  writeFileHead?(out: Buffer, at: number, path: string, mode: number, size: number): number;
  fileTail(): Buffer[];
  symlink(path: string, target: string): Buffer[];
}
