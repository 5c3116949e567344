import { usageError } from "../support/envelope.js";

/** The lifecycle library (gc, pins, repair), loaded only when a command runs. */
export function loadLifecycleLibrary() {
  return import("../../lifecycle/index.js");
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `--grace`: `0`, or a whole number with a unit (`90s`, `30m`, `24h`, `7d`). */
export function parseDuration(text: unknown, option: string): number {
  const match = typeof text === "string" ? /^(0|[0-9]{1,9})(ms|s|m|h|d)?$/.exec(text) : null;
  if (!match || (match[1] !== "0" && match[2] === undefined)) {
    throw usageError(
      `${option} must be 0 or a whole number with a unit (ms, s, m, h, d), e.g. 24h; got ${JSON.stringify(text)}`,
      { option },
    );
  }
  return Number(match[1]) * UNITS[match[2] ?? "ms"]!;
}

export function bytesText(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}
