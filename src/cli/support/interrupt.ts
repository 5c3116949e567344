/**
 * Ctrl-C for commands that stage work or talk to a registry (retain, import,
 * export, push, pull): the first SIGINT aborts the signal the command passed
 * to the library, which stops at its next file, entry or registry exchange and
 * removes its own staging, extraction directory or temporary bundle exactly as
 * on any other failure; the CLI then says what
 * was removed and exits 130. Further SIGINTs while that cleanup runs are
 * ignored (with one note), so a second Ctrl-C cannot leave a half-removed
 * staging directory behind. Commands that never ask for a signal keep the
 * default SIGINT behaviour.
 */
import type { OatsError } from "../../core/index.js";
import { isInterrupted, type RemovedPath } from "../../retention/index.js";

export const INTERRUPTED_EXIT = 130;

export interface Interrupt {
  /** The signal for the library; installs the SIGINT handler on first use. */
  signal(): AbortSignal;
  /** Remove the handler (idempotent). */
  release(): void;
}

export function createInterrupt(writeErr: (text: string) => void): Interrupt {
  const controller = new AbortController();
  let installed = false;
  let noted = false;
  const onSigint = () => {
    if (!controller.signal.aborted) {
      controller.abort();
      return;
    }
    if (!noted) writeErr("\r\x1b[2Koats: interrupted: cleaning up, please wait\n");
    noted = true;
  };
  return {
    signal() {
      if (!installed) {
        installed = true;
        process.on("SIGINT", onSigint);
      }
      return controller.signal;
    },
    release() {
      if (installed) process.removeListener("SIGINT", onSigint);
      installed = false;
    },
  };
}

/** The human lines of an interruption: what its cleanup removed. */
export function interruptedLines(error: unknown): string[] {
  if (!isInterrupted(error)) return [];
  const removed = ((error as OatsError).details["removed"] as RemovedPath[] | undefined) ?? [];
  if (removed.length === 0) return ["oats: interrupted: nothing was left to remove\n"];
  return removed.map((row) => `oats: interrupted: removed ${row.what} ${row.path}\n`);
}
