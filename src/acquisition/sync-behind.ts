import { fdatasync } from "node:fs";

/**
 * Starts the writeback of a file while it is still being written: after
 * every `every` bytes, one fdatasync on the thread pool (never two at once),
 * so the disk works while the writer goes on reading and hashing, and the
 * final fsync finds only the tail left to flush.
 *
 * The descriptor must outlive every sync started on it: call settle() before
 * closing it, on success and on failure alike. settle() throws the first
 * error a background sync met. The kernel reports a writeback error once per
 * open file, so an error swallowed here would let the caller's final fsync
 * succeed on a file whose bytes never reached the disk.
 */
export class SyncBehind {
  private since = 0;
  private running: Promise<void> | null = null;
  private failure: { error: unknown } | null = null;

  constructor(
    private readonly fd: number,
    private readonly every = 16 << 20,
  ) {}

  /** Note `bytes` written to the file; start a background sync when enough have been since the last. */
  wrote(bytes: number): void {
    this.since += bytes;
    if (this.since < this.every || this.running !== null) return;
    this.since = 0;
    this.running = new Promise((resolve) => {
      fdatasync(this.fd, (error) => {
        if (error && this.failure === null) this.failure = { error };
        this.running = null;
        resolve();
      });
    });
  }

  /** Wait for the sync in flight, if any; throw what any background sync met. */
  async settle(): Promise<void> {
    while (this.running !== null) await this.running;
    if (this.failure !== null) throw this.failure.error;
  }
}
