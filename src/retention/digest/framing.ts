import type { TreeFormat } from "../integrity.js";

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
  fileTail(): Buffer[];
  symlink(path: string, target: string): Buffer[];
}
