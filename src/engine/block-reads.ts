import type { NativeAddon } from "./native-reads.js";

/**
 * A pass's signs that the page cache is cold: block reads (getrusage's
 * ru_inblock, 512-byte units), which grow only when a read misses the cache.
 *
 * The process's count is not the pass's. It grows with what the process's
 * other threads read: a retain's creates beside these reads make ext4 read
 * inode tables of the staging directory (file-reader.ts, COLD_BLOCK_READS),
 * and after someone drops the page cache this thread's own code is faulted
 * back in from the disk. So with the addon the reads' own threads count:
 * its small-file calls count theirs (readSmallFiles, both of its threads),
 * and a file opened here is measured around its open and head read on this
 * thread. A read on the thread pool has only the process's count, taken
 * around it. Without the addon, the process's count stands for all.
 */
export class PassBlockReads {
  /** This thread's, around the opens and head reads measured (warm passes). */
  private opens = 0;
  /** The process's, around each file the general path reads while the cold watch looks. */
  private generalPath = 0;
  private passAtDecision = 0;
  private processAtDecision = 0;

  constructor(private readonly addon: NativeAddon | null) {
    this.passAtDecision = this.pass();
    this.processAtDecision = process.resourceUsage().fsRead;
  }

  /**
   * The cold watch's count: the small-file calls' own and the process's
   * around the general path's files (a retain's create of one staged file
   * stays far under COLD_BLOCK_READS).
   */
  source(): number {
    return this.addon ? this.addon.smallReadsBlockReads() + this.generalPath : process.resourceUsage().fsRead;
  }

  /** The process's count now, for afterGeneralPathRead once the file is read; -1 when not measured. */
  beforeGeneralPathRead(measured: boolean): number {
    return this.addon && measured ? process.resourceUsage().fsRead : -1;
  }

  afterGeneralPathRead(before: number): void {
    if (before >= 0) this.generalPath += process.resourceUsage().fsRead - before;
  }

  /** `open()`, its block reads on this thread added to the pass's when `measured` (and the addon is there). */
  open<T>(measured: boolean, open: () => T): T {
    if (!this.addon || !measured) return open();
    const before = this.addon.threadBlockReads();
    const opened = open();
    this.opens += this.addon.threadBlockReads() - before;
    return opened;
  }

  /**
   * Whether the pass read the disk since the last call: a large file's
   * decision. A head opened ahead on the thread pool (after a cold file) is
   * judged by the process's count, the only one it has.
   */
  readSinceLastDecision(headOpenedAhead: boolean): boolean {
    const pass = this.pass();
    const processReads = process.resourceUsage().fsRead;
    const read = pass !== this.passAtDecision || (headOpenedAhead && processReads !== this.processAtDecision);
    this.passAtDecision = pass;
    this.processAtDecision = processReads;
    return read;
  }

  private pass(): number {
    return this.addon ? this.addon.smallReadsBlockReads() + this.opens : process.resourceUsage().fsRead;
  }
}
