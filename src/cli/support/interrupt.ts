/**
 * Ctrl-C, SIGTERM and SIGHUP for commands that stage work or talk to a
 * registry (retain, import, export, push, pull): the first of them aborts the
 * signal the command passed to the library, which stops at its next file,
 * entry or registry exchange and removes its own staging, extraction directory
 * or temporary bundle exactly as on any other failure; the CLI then says what
 * was removed and exits 128 + the signal's number (130, 143, 129), as a shell
 * reports a command that signal ended. Further signals while that cleanup runs
 * are ignored (with one note), so a second Ctrl-C or a service manager's
 * repeated SIGTERM cannot leave a half-removed staging directory behind.
 * Commands that never ask for a signal keep the default behaviour of each.
 */
import { constants } from "node:os";
import type { OatsError } from "../../core/index.js";
import { isInterrupted, type RemovedPath } from "../../retention/index.js";

/** The signals that stop a staging command cleanly. */
export const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;
export type StopSignal = (typeof STOP_SIGNALS)[number];

/** 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP. */
export function interruptedExit(signal: StopSignal): number {
  return 128 + constants.signals[signal];
}

export interface Interrupt {
  /** The signal for the library; installs the SIGINT handler on first use. */
  signal(): AbortSignal;
  /** The first stop signal received, or SIGINT when none was (a library abort of its own). */
  received(): StopSignal;
  /** Remove the handlers (idempotent). */
  release(): void;
}

export function createInterrupt(writeErr: (text: string) => void): Interrupt {
  const controller = new AbortController();
  let installed = false;
  let noted = false;
  let received: StopSignal | null = null;
  const onSignal = (signal: StopSignal) => {
    if (!controller.signal.aborted) {
      received = signal;
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
        for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
      }
      return controller.signal;
    },
    received() {
      return received ?? "SIGINT";
    },
    release() {
      if (installed) for (const signal of STOP_SIGNALS) process.removeListener(signal, onSignal);
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
