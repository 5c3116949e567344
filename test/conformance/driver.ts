/**
 * The conformance suite's driver interface (docs/design/evidence.md,
 * "Conformance suite"). Properties (properties/*.ts) are written once against this file
 * and never name an implementation module; a driver (drivers/*.ts) is the
 * only place that knows how the implementation is reached (the library, the
 * CLI, or a deliberately broken wrapper).
 *
 * Everything here is an observable: what a script printed, what a run's log
 * says, what the far side holds, whether a marker file exists. A property
 * that needs to watch something itself (the log's size over time, a marker,
 * the far side's bytes) gets a path or bytes from the driver and looks for
 * itself, so the driver cannot answer for it.
 */

/** The properties by name; a driver skips by these names and the suite checks which were skipped. */
export const PROPERTY_NAMES = [
  "stamp-per-line", // 1
  "gap-preserved", // 2
  "exit-status", // 3
  "failed-run-complete", // 4
  "refused-dispatch-no-run", // 5
  "privileged-account", // 6
  "redaction", // 7
  "cancel-takes-tree", // 8
  "far-side-delivery", // 9
  "text-not-terminal", // 10
  "trust-unapproved", // run-time trust chain: an unapproved capture never starts a run
  "trust-tampered", // run-time trust chain: a tampered capture never starts a run
] as const;

export type PropertyName = (typeof PROPERTY_NAMES)[number];

export type Level = "public" | "internal" | "confidential";
export type RunResult = "OK" | "FAILED" | "CANCELLED" | "INTERRUPTED";

/** The body of the capture's executable: a `/bin/sh` script or an ES module run by Node. */
export interface Script {
  readonly lang: "sh" | "node";
  readonly body: string;
}

/** A capture profile's redaction pattern (rule name `profile:<name>`). */
export interface RedactPattern {
  readonly name: string;
  readonly source: string;
  readonly flags?: string;
}

export interface CaptureRequest {
  /** The capture's name (an identifier); also its job's name. Unique within a scope. */
  readonly name: string;
  readonly script: Script;
  /** Pinned, non-secret environment. The driver adds PATH=/usr/bin:/bin unless given. */
  readonly env?: Readonly<Record<string, string>>;
  /** Credential names pinned in the capture; the values are supplied by the dispatcher's environment at dispatch. */
  readonly credentials?: Readonly<Record<string, string>>;
  /** The capture profile: redaction patterns and required evidence classes. */
  readonly profile?: { readonly redact?: readonly RedactPattern[]; readonly requiredClasses?: readonly string[] };
  /** The approved composition lets the capture run as root (uid 0). */
  readonly privileged?: boolean;
  /** Declared level (default internal). */
  readonly classification?: Level;
  /** Whether the classification config names the dispatching principal sovereign (default true). */
  readonly sovereign?: boolean;
  /** Approve the prepared composition (default true). */
  readonly approve?: boolean;
}

/** A prepared (and, unless asked otherwise, approved) capture, queued as a job. */
export interface QueuedCapture {
  readonly name: string;
  readonly job: string;
  readonly request: CaptureRequest;
}

export type ExitStatus = { readonly code: number | null; readonly signal: string | null };

export type DispatchOutcome =
  | { readonly kind: "refused"; readonly code: string; readonly message: string }
  | {
      readonly kind: "ran";
      readonly runId: string;
      readonly handle: string;
      /** The child's real end: a code, or the signal that killed it. */
      readonly exit: ExitStatus;
      /** What the dispatcher itself reports as its exit code (the CLI's process status). */
      readonly exitCode: number;
      readonly result: RunResult;
    };

export type CancelVia = "command" | "SIGINT" | "SIGTERM";

/** A dispatch in flight. */
export interface RunningDispatch {
  /**
   * The absolute path of the run's log file as it is being written, once
   * the run has started (rejects if the dispatch ends without a run). The
   * suite stats this path itself to see whether the log still grows.
   */
  logPath(): Promise<string>;
  /**
   * Cancel the run: `command` is `oats run cancel <run>` (or its library
   * equivalent); SIGINT and SIGTERM go to the dispatcher, or to what the
   * driver documents as its equivalent (see Driver.dispatcher).
   */
  cancel(via: CancelVia): Promise<void>;
  readonly done: Promise<DispatchOutcome>;
}

export interface LogLine {
  /** `2026-12-01T03:40:00.123456Z` */
  readonly at: string;
  readonly stream: "out" | "err";
  readonly text: string;
}

export interface RunView {
  readonly handle: string;
  readonly runId: string | null;
  readonly lines: readonly LogLine[];
  /** The footer lines, without their `# ` prefix (`exit: code 42`, `RESULT: FAILED`). */
  readonly footer: readonly string[];
  readonly exit: ExitStatus | null;
  readonly result: RunResult | null;
  /** The sealed record (null while unsealed). */
  readonly record: Readonly<Record<string, any>> | null;
  /** The log file's absolute path. */
  readonly logPath: string;
}

export interface RunSummary {
  readonly handle: string;
  readonly runId: string | null;
  readonly result: string | null;
}

export interface VerifyOutcome {
  readonly ok: boolean;
  readonly detail: string;
}

export interface PushOutcome {
  /** What the pusher claims it delivered (run ids). */
  readonly delivered: readonly string[];
}

/** A run as the far side holds it, read from the far side only. */
export interface DeliveredRun {
  /** The sealed record's exact bytes. */
  readonly recordBytes: Buffer;
  /** The log's exact bytes. */
  readonly log: Buffer;
}

/** A far side of one transport, made for one test and removed after it. */
export interface FarSide {
  /** What `oats push --to` takes, e.g. `dir:/dev/shm/oats-far-x`. */
  readonly to: string;
  cleanup(): Promise<void>;
}

/** A transport the whole suite runs against (a dir share; an OCI registry). */
export interface Transport {
  readonly name: string;
  /** Why this machine cannot run it (the entry files skip it by name, loudly), or null. */
  readonly unavailable: string | null;
  farSide(): Promise<FarSide>;
  /** Stop what the transport started for its far sides (a registry). */
  close(): Promise<void>;
}

/** Ways to make a queued capture refusable after it was approved (run-time trust chain and property 5). */
export type Spoil =
  /** Re-prepare the capture with a changed pinned env value and queue that under a new job; the approval covers the
   * old composition only. */
  | "mismatch"
  /** Change a byte of the retained executable in the store, as a writer outside oats would. */
  | "tamper"
  /** Revoke the approval of the capture's composition. */
  | "revoke";

/** One store (scope) a property works in. */
export interface DriverScope {
  readonly dir: string;
  /** Prepare, approve (unless `approve: false`) and queue; a refusal on the way is a DriverRefusal. */
  queue(request: CaptureRequest): Promise<QueuedCapture>;
  /** Spoil a queued capture; returns the capture to dispatch (the same one, or a new job for "mismatch"). */
  spoil(capture: QueuedCapture, how: Spoil): Promise<QueuedCapture>;
  /** Run `body` while the audit log cannot be written; restores it after. */
  withAuditUnavailable<T>(body: () => Promise<T>): Promise<T>;
  /** Dispatch with capture. `uid0`: dispatch as uid 0 (the driver says how in Driver.uid0). */
  dispatch(capture: QueuedCapture, options?: { readonly uid0?: boolean }): RunningDispatch;
  listRuns(): Promise<RunSummary[]>;
  readRun(ref: string): Promise<RunView>;
  verifyRun(ref: string): Promise<VerifyOutcome>;
  /** Deliver the evidence outbox to the far side. */
  push(far: FarSide): Promise<PushOutcome>;
  /** Read a delivered run back from the far side (never from the scope); null when the far side does not have it. */
  readDelivered(far: FarSide, runId: string): Promise<DeliveredRun | null>;
}

export interface Driver {
  readonly name: string;
  readonly transport: Transport;
  /** Properties this driver cannot observe, each with the reason; the suite checks the names. */
  readonly skips: Readonly<Partial<Record<PropertyName, string>>>;
  /** How this driver enters or simulates uid 0 for `dispatch(..., {uid0: true})`. */
  readonly uid0: string;
  /** What receives SIGINT/SIGTERM for `cancel("SIGINT" | "SIGTERM")`. */
  readonly dispatcher: string;
  /** How many properties may run at once through this driver (a CLI step is a process start; a library step is a
   * call). */
  readonly parallel: number;
  /** A fresh, empty scope in `dir` (an existing empty directory the suite made). */
  scope(dir: string): Promise<DriverScope>;
}

/**
 * Thrown by DriverScope.queue (and spoil) when the implementation refuses to
 * prepare, approve or queue: the contract's error code and message.
 */
export class DriverRefusal extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "DriverRefusal";
  }
}
