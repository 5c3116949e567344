/**
 * What a run holds while it runs (run-exec.ts): each entry is released once,
 * the last taken first, by the one `release` at the end of the run, whichever
 * way it ends. An entry handed on to someone who releases it (the log's
 * descriptor to the seal, which closes it) or that is no longer to be undone
 * (the run directory, once its run-start entry names it) is dismissed.
 */

export interface Held {
  /** Take the entry off the stack: `release` will not touch it. */
  dismiss(): void;
}

type Release = () => void | Promise<void>;

export class ResourceStack {
  private readonly entries: Array<{ release: Release | null }> = [];

  /** Hold something until `release`; `release` undoes it, after everything held later. */
  defer(release: Release): Held {
    const entry: { release: Release | null } = { release };
    this.entries.push(entry);
    return {
      dismiss: () => {
        entry.release = null;
      },
    };
  }

  /**
   * Release every entry not dismissed, the last first, each once. A release
   * that fails does not stop the ones after it; the failures are thrown when
   * all have run (the only one as it is, several as an AggregateError). An
   * entry that must not fail its caller catches its own errors.
   */
  async release(): Promise<void> {
    const errors: unknown[] = [];
    for (let entry = this.entries.pop(); entry !== undefined; entry = this.entries.pop()) {
      const release = entry.release;
      entry.release = null;
      if (release === null) continue;
      try {
        const pending = release();
        if (pending !== undefined) await pending;
      } catch (error) {
        errors.push(error);
      }
    }
    if (errors.length === 1) throw errors[0];
    if (errors.length > 1) throw new AggregateError(errors, "releasing what the run held failed");
  }
}
