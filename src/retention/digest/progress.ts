import { interruptedError, isInterrupted, type OatsError } from "../../core/index.js";

/**
 * Structured progress and cancellation for long library work. The library
 * never prints: it reports events to a listener, and a caller that wants
 * to stop it aborts the signal it passed. Both are optional and cheap when
 * absent.
 */

/**
 * What is being done: `read` (hashing a tree in place), `read-copy` (hashing
 * while copying into staging), `sync` (making staging durable), `verify`
 * (reading a tree back), `publish` (the rename into place), `extract`
 * (unpacking an archive into staging), `export` (writing a bundle).
 */
export type ProgressPhase = "read" | "read-copy" | "sync" | "verify" | "publish" | "extract" | "export";

export interface ProgressEvent {
  readonly phase: ProgressPhase;
  /** Files (or archive entries) done in this phase. */
  readonly files: number;
  /** Bytes of file content done in this phase. */
  readonly bytes: number;
  /** Present when the work was listed before it was read (a walked tree). */
  readonly totalFiles?: number;
  readonly totalBytes?: number;
}

export type ProgressListener = (event: ProgressEvent) => void;

/** At most one event per this many files or bytes, so a tree of small files does not pay for reporting. */
export const EMIT_EVERY_FILES = 64;
export const EMIT_EVERY_BYTES = 4 << 20;

export interface Cancellable {
  readonly signal?: AbortSignal;
}

/** What a cleanup removed after an interruption (reported by the CLI). */
export interface RemovedPath {
  readonly what: "staging" | "extraction" | "temp";
  readonly path: string;
}

// The error an aborted signal turns into lives in core, so that the OCI client (which imports only core) raises the
// very same one.
export { interruptedError, isInterrupted } from "../../core/index.js";

export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw interruptedError();
}

/** Record on an interruption what its cleanup removed; other errors are left as they are. */
export function noteRemoved(error: unknown, what: RemovedPath["what"], path: string): void {
  if (!isInterrupted(error)) return;
  const removed = (error as OatsError).details["removed"];
  if (Array.isArray(removed)) removed.push({ what, path });
}
