import assert from "node:assert/strict";
import { appendFileSync, existsSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { describe, test } from "node:test";
import { bytesDigest } from "../src/core/canonical-json.js";
import type { EvidenceFile } from "../src/evidence/evidence-file.js";
import { LogChecker, parseLog } from "../src/evidence/log-format.js";
import { dirTransport } from "../src/evidence/transport-dir.js";
import type { EvidenceFileName } from "../src/evidence/transport.js";
import { pushEvidence, receiveRun } from "../src/index.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";
import { makeSealedRun } from "./support/sealed-runs.js";
import { makeShare } from "./support/shares.js";

/**
 * The checks that streaming must keep, each on small inputs: a log checked
 * in pieces says what parseLog says of it whole, whatever the pieces; a file
 * that changes while a share copies it is refused before it lands; a far
 * side's log longer than the sealed one is refused though the stream stops
 * at the sealed size.
 */

/** `bytes` handed to a LogChecker in pieces of `size` bytes; what it finds, or the refusal's reason. */
function checkInPieces(bytes: Buffer, size: number): unknown {
  const checker = new LogChecker();
  for (let at = 0; at < bytes.length; at += size) checker.update(bytes.subarray(at, at + size));
  try {
    return checker.result();
  } catch (error) {
    return { refused: (error as { details?: { reason?: string; line?: number } }).details };
  }
}

function checkWhole(text: string): unknown {
  try {
    const parsed = parseLog(text);
    return { lines: parsed.lines.length, footer: parsed.footer, exit: parsed.exit, result: parsed.result };
  } catch (error) {
    return { refused: (error as { details?: { reason?: string; line?: number } }).details };
  }
}

const STAMP = (n: number) => `2026-12-01T04:00:00.${String(n).padStart(6, "0")}Z`;

describe("a log checked in pieces", () => {
  const logs: Array<[string, string]> = [
    ["an empty log", ""],
    [
      "lines and a footer with a note",
      `${STAMP(1)} out a\n${STAMP(2)} err ünïcödé ✓\n${STAMP(3)} out ${"long ".repeat(100)}\n` +
        "# note: cut\n# exit: signal SIGKILL\n# RESULT: CANCELLED\n",
    ],
    ["an open log (no footer)", `${STAMP(1)} out a\n${STAMP(2)} out b\n`],
    ["stamps that do not increase", `${STAMP(2)} out a\n${STAMP(2)} out b\n`],
    ["an unknown stream", `${STAMP(1)} tty a\n`],
    ["a torn last line", `${STAMP(1)} out a\n${STAMP(2)} out b`],
    ["a line after the footer", `# exit: code 0\n# RESULT: OK\n${STAMP(1)} out a\n`],
    ["a footer without RESULT", "# exit: code 0\n"],
    ["RESULT before exit", "# RESULT: OK\n"],
    ["a bad exit", "# exit: code 256\n# RESULT: OK\n"],
    ["a line without a stream", `${STAMP(1)}\n`],
  ];
  for (const [name, text] of logs) {
    test(`Given ${name}, Then pieces of any size find what parseLog finds of it whole`, () => {
      const whole = checkWhole(text);
      const bytes = Buffer.from(text, "utf8");
      for (const size of [1, 2, 3, 7, 64, 1 << 20]) assert.deepEqual(checkInPieces(bytes, size), whole, `${size}`);
    });
  }

  test("Given a footer line longer than its bound, Then it is refused (run-log-malformed), not held", () => {
    const text = `# note: ${"n".repeat(LogChecker.FOOTER_LINE_LIMIT)}\n# exit: code 0\n# RESULT: OK\n`;
    assert.deepEqual(checkInPieces(Buffer.from(text), 4096), { refused: { line: 1, reason: "run-log-malformed" } });
  });

  test("Given a captured line of megabytes, Then only its start is kept and it counts as one line", () => {
    const text = `${STAMP(1)} out ${"x".repeat(3 << 20)}\n# exit: code 0\n# RESULT: OK\n`;
    assert.deepEqual(checkInPieces(Buffer.from(text), 65536), checkWhole(text));
  });
});

describe("a share copy checked as it is written", () => {
  test(
    "Given a file whose bytes are not the digest it was handed over with (it changed after it was hashed), When " +
      "put on a share, Then integrity-mismatch (changed-while-sent) and the share holds no run and no staging",
    async () => {
      const { share } = makeShare();
      const good = Buffer.from("record\n");
      const promised = Buffer.from("the log as it was hashed\n");
      const changed = Buffer.from("the log as it is now read\n");
      const log: EvidenceFile = {
        size: promised.length,
        digest: bytesDigest(promised),
        pieces: async (consume) => consume(changed.subarray(0, promised.length)),
        open: (start, end) => Readable.from([changed.subarray(start, end)]),
      };
      const files = new Map<EvidenceFileName, Buffer | EvidenceFile>([
        ["record.json", good],
        ["log", log],
        ["audit.jsonl", good],
      ]);
      const transport = dirTransport(share, { allowSameFilesystem: true });
      const runId = `sha256-${"ab".repeat(32)}`;
      await assert.rejects(
        transport.put({ runId, seq: 1, files }),
        refusal("integrity-mismatch", "changed-while-sent"),
      );
      assert.deepEqual(readdirSync(join(share, "runs")), [], "no run directory and no staging left");
      assert.equal(await transport.readBack(runId), null);
    },
  );
});

describe("a far side's log longer than the sealed one", () => {
  test(
    "Given a share whose copy of a run's log has bytes appended after a read's boundary (the sealed log is exactly " +
      "256 KiB), When pulled, Then integrity-mismatch and the scope is unchanged",
    async () => {
      const scope = tempDir("oats-stream-check-");
      // One line padded so that the log is exactly one read (256 KiB): what follows comes in a read of its own.
      const footer = "# exit: code 0\n# RESULT: OK\n";
      const head = `${STAMP(1)} out `;
      const sealed = Buffer.from(`${head}${"p".repeat(256 * 1024 - footer.length - head.length - 1)}\n${footer}`);
      assert.equal(sealed.length, 256 * 1024);
      const run = await makeSealedRun(scope, {
        index: 3,
        writeLog: (path) => {
          writeFileSync(path, sealed);
          return { digest: bytesDigest(sealed), bytes: sealed.length, lines: 1 };
        },
      });
      const { share } = makeShare();
      const pushed = await pushEvidence(scope, { to: `dir:${share}`, allowSameFilesystem: true });
      assert.equal(pushed.delivered.length, 1);
      const log = join(share, "runs", run.runId.slice("sha256-".length), "log");
      appendFileSync(log, "2026-12-01T05:00:00.000000Z out appended\n");
      const into = tempDir("oats-stream-check-into-");
      const before = snapshotTree(into);
      await assert.rejects(
        receiveRun(into, `dir:${share}`, run.runId),
        refusal("integrity-mismatch", "run-log-mismatch"),
      );
      assert.deepEqual(snapshotTree(into), before);
      assert.equal(existsSync(join(into, ".agents", "received-runs")), false);
    },
  );
});
