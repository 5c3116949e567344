import assert from "node:assert/strict";
import { test } from "node:test";
import { CLEAR, createProgress, formatDuration, formatProgressLine } from "../src/cli/support/progress.js";

const MiB = 1024 * 1024;

test("the line names the label and the phase, and counts files of the total", () => {
  const line = formatProgressLine({
    label: "retain demo",
    event: { phase: "read-copy", files: 120, bytes: 0, totalFiles: 4000 },
  });
  assert.match(line, /^oats: retain demo: read-copy {2}files 120\/4000 {2}0 B$/);
});

test("without a total the files and bytes are counts alone, and no ETA is guessed", () => {
  const line = formatProgressLine({
    label: "import b",
    event: { phase: "extract", files: 7, bytes: 3 * MiB },
    elapsedSeconds: 2,
  });
  assert.equal(line, "oats: import b: extract  files 7  3.0 MiB  1.5 MiB/s");
});

test("bytes of a known total read x/y in the total's unit, with the rate and an ETA from bytes", () => {
  const line = formatProgressLine({
    label: "retain x",
    event: { phase: "verify", files: 10, bytes: 25 * MiB, totalFiles: 100, totalBytes: 100 * MiB },
    elapsedSeconds: 5,
  });
  // 25 MiB in 5 s: 5 MiB/s, 75 MiB to go: 15 s.
  assert.equal(line, "oats: retain x: verify  files 10/100  25.0/100.0 MiB  5.0 MiB/s  ETA 0:15");
});

test("with only the files' total the ETA comes from files", () => {
  const line = formatProgressLine({
    label: "r",
    event: { phase: "read-copy", files: 250, bytes: MiB, totalFiles: 1000 },
    elapsedSeconds: 10,
  });
  assert.match(line, / ETA 0:30$/);
});

test("no rate and no ETA before any time has passed", () => {
  const line = formatProgressLine({
    label: "r",
    event: { phase: "read", files: 1, bytes: MiB, totalFiles: 2, totalBytes: 2 * MiB },
    elapsedSeconds: 0,
  });
  assert.doesNotMatch(line, /\/s|ETA/);
});

test("sync and publish are one step: the phase and the size of the tree", () => {
  assert.equal(
    formatProgressLine({ label: "r", event: { phase: "sync", files: 0, bytes: 0, totalFiles: 5000 } }),
    "oats: r: sync  5000 files",
  );
  assert.equal(
    formatProgressLine({ label: "r", event: { phase: "publish", files: 0, bytes: 0, totalFiles: 3 } }),
    "oats: r: publish  3 files",
  );
});

test("the line is cut to width - 1 columns; without a width, to 79", () => {
  const event = {
    phase: "read-copy" as const,
    files: 123456,
    bytes: 999 * MiB,
    totalFiles: 999999,
    totalBytes: 9999 * MiB,
  };
  const long = formatProgressLine({
    label: "retain a-very-long-capability-name-that-goes-on",
    event,
    elapsedSeconds: 3,
  });
  assert.equal(long.length, 79);
  assert.equal(formatProgressLine({ label: "retain a", event, elapsedSeconds: 3 }, 30).length, 29);
  assert.ok(
    formatProgressLine({ label: "retain a", event, elapsedSeconds: 3 }, 30).startsWith("oats: retain a: read-copy"),
  );
  // Nonsense widths fall back to 80.
  assert.equal(
    formatProgressLine({ label: "retain a-very-long-capability-name-that-goes-on", event, elapsedSeconds: 3 }, 0)
      .length,
    79,
  );
});

test("durations read m:ss, and h:mm:ss past an hour", () => {
  assert.equal(formatDuration(0), "0:00");
  assert.equal(formatDuration(61.2), "1:02");
  assert.equal(formatDuration(3600 + 5 * 60 + 7), "1:05:07");
});

test("the writer clears its line on end, and writes nothing at all when disabled", () => {
  let written = "";
  const stream = {
    write: (text: string) => ((written += text), true),
    columns: 60,
  } as unknown as NodeJS.WritableStream;
  const progress = createProgress("retain x", true, stream);
  progress.update({ phase: "read-copy", files: 0, bytes: 0, totalFiles: 10 });
  // Within the throttle interval, the same phase is not redrawn; a new phase is, at once.
  progress.update({ phase: "read-copy", files: 1, bytes: 1, totalFiles: 10 });
  progress.update({ phase: "verify", files: 0, bytes: 0, totalFiles: 10 });
  assert.equal(progress.end(), true);
  const writes = written.split(CLEAR).slice(1);
  assert.deepEqual(writes, [
    "oats: retain x: read-copy  files 0/10  0 B",
    "oats: retain x: verify  files 0/10  0 B",
    "",
  ]);
  assert.ok(written.endsWith(CLEAR));
  assert.equal(progress.end(), false);

  let silent = "";
  const off = createProgress("retain x", false, {
    write: (text: string) => ((silent += text), true),
  } as unknown as NodeJS.WritableStream);
  off.update({ phase: "read", files: 1, bytes: 1 });
  off.end();
  assert.equal(silent, "");
});
