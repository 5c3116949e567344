import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { bytesDigest } from "../src/core/index.js";
import { Readable } from "node:stream";
import { farSideRunOf, READ_BACK_LIMIT, readFarSideRun, type FarSideRun } from "../src/evidence/evidence-file.js";
import type { OutboxEntry } from "../src/evidence/outbox.js";
import { checkFarSide } from "../src/evidence/read-back.js";
import { checkReadBack } from "../src/index.js";
import { refusal } from "./support/refusals.js";

/**
 * The proof of delivery's two checks, whole files (checkReadBack, public)
 * and streamed (checkFarSide, what push uses), hold a read-back to what was
 * queued in the same words: the same refusal, message and details, for a
 * file missing, one that differs, one the far side adds; nothing for an
 * intact read-back.
 */

const log = Buffer.from("the run's log\n");
const record = Buffer.from('{"run":"record"}\n');
const entry = {
  format: "oats.outbox-entry.v1",
  seq: 7,
  runId: `sha256-${"ab".repeat(32)}`,
  handle: "h",
  enqueuedAt: "2026-01-01T00:00:00.000Z",
  audit: [],
  files: [
    { name: "log", digest: bytesDigest(log), bytes: log.length },
    { name: "run.json", digest: bytesDigest(record), bytes: record.length },
  ],
} as unknown as OutboxEntry;

async function bothRefuse(back: Map<string, Buffer> | null, differences: string[]): Promise<void> {
  let whole: unknown;
  try {
    checkReadBack(entry, "share:/far", back);
  } catch (error) {
    whole = error;
  }
  const expected = { to: "share:/far", seq: 7, runId: entry.runId, differences };
  refusal("integrity-mismatch", "read-back-mismatch", expected)(whole);
  await assert.rejects(
    checkFarSide(entry, "share:/far", back === null ? null : farSideRunOf(back)),
    (streamed: Error) => {
      refusal("integrity-mismatch", "read-back-mismatch", expected)(streamed);
      assert.equal(streamed.message, (whole as Error).message);
      assert.match(streamed.message, /^run sha256-(ab)+ \(outbox seq 7\) did not read back intact from share:\/far: /);
      assert.match(streamed.message, /; it stays queued$/);
      return true;
    },
  );
}

describe("read-back check", () => {
  test("an intact read-back passes both checks", async () => {
    const back = new Map([
      ["log", log],
      ["run.json", record],
    ]);
    checkReadBack(entry, "share:/far", back);
    await checkFarSide(entry, "share:/far", farSideRunOf(back));
  });

  test("nothing read back: every queued file is missing", async () => {
    await bothRefuse(null, ["log: missing", "run.json: missing"]);
  });

  test("a file missing, one that differs and one the far side adds: all named, in one refusal", async () => {
    const other = Buffer.from("the run's lag\n");
    const back = new Map([
      ["log", other],
      ["extra", Buffer.from("x")],
    ]);
    await bothRefuse(back, [
      `log: read back ${bytesDigest(other)} (${other.length} bytes), queued ${bytesDigest(log)} (${log.length} bytes)`,
      "run.json: missing",
      "extra: unexpected",
    ]);
  });
});

/** A far-side run of one file that states `size` and streams `pieces`; `closed` counts its closes. */
function oneFileRun(size: number, pieces: Iterable<Buffer>): FarSideRun & { closed: number } {
  const run = {
    closed: 0,
    files: new Map([["log", { size, stream: async () => Readable.from(pieces) }]]),
    close: async () => void (run.closed += 1),
  };
  return run;
}

describe("a transport's readBack whole (readFarSideRun)", () => {
  const where = { to: "dir:/far", runId: entry.runId };
  const tooLarge = (name: string) => ({ code: "invalid-artifact" as const, message: `${name} is too large` });

  test("every file whole, and the run closed", async () => {
    const there = oneFileRun(log.length, [log]);
    const files = await readFarSideRun(there, where, tooLarge);
    assert.deepEqual([...files.entries()], [["log", log]]);
    assert.equal(there.closed, 1);
  });

  test("a file that states more than READ_BACK_LIMIT is refused unread, in the transport's words", async () => {
    const there = oneFileRun(READ_BACK_LIMIT + 1, [log]);
    await assert.rejects(
      readFarSideRun(there, where, tooLarge),
      refusal("invalid-artifact", {
        ...where,
        file: "log",
        reason: "too-large",
        size: READ_BACK_LIMIT + 1,
        limit: READ_BACK_LIMIT,
      }),
    );
    assert.equal(there.closed, 1);
  });

  test("a file that streams past READ_BACK_LIMIT is refused as it passes it", async () => {
    const MiB = Buffer.alloc(1024 * 1024);
    // The same MiB over and over (nothing near the limit is held), then one byte more.
    const there = oneFileRun(1, [...Array.from({ length: READ_BACK_LIMIT / MiB.length }, () => MiB), Buffer.alloc(1)]);
    await assert.rejects(
      readFarSideRun(there, where, tooLarge),
      refusal("invalid-artifact", { file: "log", reason: "too-large", size: READ_BACK_LIMIT + 1 }, (error) =>
        assert.equal(error.message, "log is too large"),
      ),
    );
    assert.equal(there.closed, 1);
  });
});
