import { ftruncateSync, writeSync } from "node:fs";
import { writeRestSync } from "../retention/index.js";
import type { LineMasker } from "./line-capture.js";
import { formatStamp, type Stream } from "./log-format.js";

/**
 * The run's log as the child's lines reach it (docs/design/evidence.md, "The
 * log"): each chunk's lines, masked by LineCapture, stamped and appended
 * before the next chunk is read. A log that cannot be written (a full disk)
 * stops the run rather than letting it go on unrecorded: the torn piece is
 * cut back to the last whole line, nothing more is written, and `onFailure`
 * cancels the child.
 */

/** A run's redactor as the capture path uses it (createRedactor's, from the plan: run-policy.ts). */
export interface Redactor extends LineMasker {
  statement(): Array<{ rule: string; count: number }>;
}

/** A redactor that masks nothing (for callers of LineCapture outside a run); a run's redactor comes from its plan
 * (run-policy.ts). */
export const identityRedactor: Redactor = { apply: (text) => text, statement: () => [] };

/**
 * The log is written in flat pieces of about this many characters. One string
 * for a whole pipe chunk (thousands of lines, a quarter of a megabyte) cost
 * more to flatten and encode than the write itself (docs/design/performance.md,
 * "Run evidence").
 */
const LOG_PIECE_CHARS = 16 * 1024;

export class RunLog {
  /** Bytes on the log: whole lines only. */
  private logged = 0;
  /** Lines on the log. */
  lines = 0;
  /** What stopped the log; nothing is written after it. */
  failure: Error | null = null;
  /** Told once, when the log stops (the run's cancel, once the child is started). */
  onFailure: ((why: string) => void) | null = null;

  constructor(private readonly fd: number) {}

  /**
   * A chunk's lines at once (LineCapture's batch sink), masked already. The text is written as it is made, in flat
   * pieces of about LOG_PIECE_CHARS, before the next chunk is read.
   */
  readonly write = (stream: Stream, first: number, texts: readonly string[]): void => {
    const lines: string[] = [];
    let chars = 0;
    for (let index = 0; index < texts.length; index += 1) {
      const line = `${formatStamp(first + index)} ${stream} ${texts[index]!}\n`;
      lines.push(line);
      chars += line.length;
      if (chars >= LOG_PIECE_CHARS) {
        this.append(lines.join(""), lines.length);
        lines.length = 0;
        chars = 0;
      }
    }
    if (lines.length > 0) this.append(lines.join(""), lines.length);
  };

  private append(text: string, count: number): void {
    if (this.failure !== null) return;
    const length = Buffer.byteLength(text);
    try {
      const written = writeSync(this.fd, text);
      // A short write is written on: what stops it raises its own errno (ENOSPC, EFBIG), and a write that was only
      // cut short goes on.
      if (written !== length) writeRestSync(this.fd, Buffer.from(text, "utf8"), written);
      this.logged += length;
      this.lines += count;
    } catch (error) {
      this.failure = error instanceof Error ? error : new Error(String(error));
      try {
        ftruncateSync(this.fd, this.logged);
      } catch {
        // The seal cuts a torn last line off in any case (openLogForSeal).
      }
      this.onFailure?.(`the log could not be written: ${this.failure.message}`);
    }
  }
}
