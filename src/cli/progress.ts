/**
 * A progress line on stderr for long work, only when stderr is a terminal and
 * neither --json nor --quiet is set. Updates are throttled (a few per second)
 * and the line is cleared when the work ends, so nothing is left behind.
 */

export interface Progress {
  /** Bytes of file content processed so far (the library's onProgress). */
  readonly bytes: (done: number) => void;
  /** Artifacts done of total (fsck's onArtifact). */
  readonly artifacts: (done: number, total: number) => void;
  readonly end: () => void;
}

const CLEAR = "\r\x1b[2K";
const INTERVAL_MS = 250;

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

const SILENT: Progress = { bytes: () => {}, artifacts: () => {}, end: () => {} };

export function progressEnabled(options: { json: boolean; quiet: boolean }, stream: { isTTY?: boolean } = process.stderr): boolean {
  return stream.isTTY === true && !options.json && !options.quiet;
}

export function createProgress(label: string, enabled: boolean, stream: NodeJS.WritableStream = process.stderr): Progress {
  if (!enabled) return SILENT;
  let last = -Infinity;
  let shown = false;
  const show = (text: string) => {
    const now = Date.now();
    if (now - last < INTERVAL_MS) return;
    last = now;
    shown = true;
    stream.write(`${CLEAR}oats: ${label}: ${text}`);
  };
  return {
    bytes: (done) => show(`${formatBytes(done)} read`),
    artifacts: (done, total) => show(`${done}/${total} revisions verified`),
    end: () => {
      if (shown) stream.write(CLEAR);
      shown = false;
    },
  };
}
