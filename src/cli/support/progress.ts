/**
 * A progress line on stderr for long work, only when stderr is a terminal and
 * neither --json nor --quiet is set. The library reports structured events
 * (src/retention/digest/progress.ts); formatProgressLine turns one into a line (pure,
 * unit-tested), and the writer below throttles updates (a few per second),
 * cuts the line to the terminal width and clears it when the work ends, so
 * nothing is left behind.
 */
import type { ProgressEvent } from "../../retention/index.js";

export interface Progress {
  /** The library's onProgress. */
  readonly update: (event: ProgressEvent) => void;
  /** Artifacts done of total (fsck's onArtifact). */
  readonly artifacts: (done: number, total: number) => void;
  /** Clear the line (idempotent); true when something had been shown. */
  readonly end: () => boolean;
}

export const CLEAR = "\r\x1b[2K";
const INTERVAL_MS = 250;
const DEFAULT_WIDTH = 80;

export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** `12.0/340.5 MiB`: both in the unit of the total, so the two read together. */
function bytesOfTotal(done: number, total: number): string {
  const unit = formatBytes(total).split(" ")[1]!;
  const scale = { B: 1, KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, TiB: 1024 ** 4 }[unit] ?? 1;
  const digits = unit === "B" ? 0 : 1;
  return `${(done / scale).toFixed(digits)}/${(total / scale).toFixed(digits)} ${unit}`;
}

export function formatDuration(seconds: number): string {
  const whole = Math.max(0, Math.ceil(seconds));
  const h = Math.floor(whole / 3600);
  const m = Math.floor((whole % 3600) / 60);
  const s = String(whole % 60).padStart(2, "0");
  return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${s}` : `${m}:${s}`;
}

export interface ProgressLine {
  readonly label: string;
  readonly event: ProgressEvent;
  /** Seconds since this phase began (rate and ETA need it); none before any time has passed. */
  readonly elapsedSeconds?: number;
}

/**
 * One progress line, e.g. `oats: retain demo: read-copy  files 120/4000
 * 12.0 MiB  3.1 MiB/s  ETA 0:38`, cut to width - 1 columns (the last column
 * is left free so no terminal wraps it). The ETA is shown only when a total
 * is known: from bytes when their total is, else from files.
 */
export function formatProgressLine(line: ProgressLine, width?: number): string {
  const { event } = line;
  const parts = [`oats: ${line.label}: ${event.phase}`];
  if (STEP_PHASES.has(event.phase)) {
    // One step over the whole tree: nothing to count, only its size.
    if (event.totalFiles !== undefined) parts.push(`${event.totalFiles} files`);
    return cut(parts.join("  "), width);
  }
  parts.push(event.totalFiles === undefined ? `files ${event.files}` : `files ${event.files}/${event.totalFiles}`);
  parts.push(event.totalBytes === undefined ? formatBytes(event.bytes) : bytesOfTotal(event.bytes, event.totalBytes));
  const elapsed = line.elapsedSeconds ?? 0;
  if (elapsed > 0 && event.bytes > 0) parts.push(`${formatBytes(event.bytes / elapsed)}/s`);
  const eta = etaSeconds(event, elapsed);
  if (eta !== undefined) parts.push(`ETA ${formatDuration(eta)}`);
  return cut(parts.join("  "), width);
}

/** Phases that are one step (fsync, rename) rather than a count of files. */
const STEP_PHASES = new Set(["sync", "publish"]);

function cut(text: string, width: number | undefined): string {
  const columns = Math.max(
    1,
    (width !== undefined && Number.isFinite(width) && width > 0 ? Math.floor(width) : DEFAULT_WIDTH) - 1,
  );
  return text.length > columns ? text.slice(0, columns) : text;
}

function etaSeconds(event: ProgressEvent, elapsed: number): number | undefined {
  if (elapsed <= 0) return undefined;
  if (event.totalBytes !== undefined && event.bytes > 0)
    return (elapsed * Math.max(0, event.totalBytes - event.bytes)) / event.bytes;
  if (event.totalFiles !== undefined && event.files > 0)
    return (elapsed * Math.max(0, event.totalFiles - event.files)) / event.files;
  return undefined;
}

const SILENT: Progress = { update: () => {}, artifacts: () => {}, end: () => false };

export function progressEnabled(
  options: { json: boolean; quiet: boolean },
  stream: { isTTY?: boolean } = process.stderr,
): boolean {
  return stream.isTTY === true && !options.json && !options.quiet;
}

export function createProgress(
  label: string,
  enabled: boolean,
  stream: NodeJS.WritableStream & { columns?: number } = process.stderr,
): Progress {
  if (!enabled) return SILENT;
  let last = -Infinity;
  let shown = false;
  let phase: string | null = null;
  let phaseStart = 0;
  const show = (text: string) => {
    shown = true;
    stream.write(`${CLEAR}${text}`);
  };
  const due = (force: boolean) => {
    const now = Date.now();
    if (!force && now - last < INTERVAL_MS) return false;
    last = now;
    return true;
  };
  return {
    update: (event) => {
      const now = Date.now();
      // A new phase is shown at once, so a short phase still names itself.
      const changed = event.phase !== phase;
      if (changed) {
        phase = event.phase;
        phaseStart = now;
      }
      if (!due(changed)) return;
      show(formatProgressLine({ label, event, elapsedSeconds: (now - phaseStart) / 1000 }, stream.columns));
    },
    artifacts: (done, total) => {
      if (due(false)) show(cut(`oats: ${label}: ${done}/${total} revisions verified`, stream.columns));
    },
    end: () => {
      const was = shown;
      if (shown) stream.write(CLEAR);
      shown = false;
      return was;
    },
  };
}
