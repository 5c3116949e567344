/**
 * SyncBehind (src/acquisition/sync-behind.ts): the export's early writeback.
 * A writeback error met in the background must reach the caller; the kernel
 * reports it once per open file, so the final fsync would not see it again.
 */
import assert from "node:assert/strict";
import { closeSync, constants, openSync, readFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { execFileSync } from "node:child_process";
import { SyncBehind } from "../src/acquisition/sync-behind.js";
import { tempDir } from "./helpers.js";

describe("SyncBehind", () => {
  test(
    "Given a regular file written past the threshold several times When " +
      "settled Then every byte is there and nothing is thrown",
    async () => {
      const path = join(tempDir("oats-sync-behind-"), "out");
      const fd = openSync(path, "wx");
      const behind = new SyncBehind(fd, 4096);
      const chunk = Buffer.alloc(10_000, 0x61);
      for (let round = 0; round < 20; round++) {
        writeSync(fd, chunk);
        behind.wrote(chunk.length);
        // Let some background syncs finish between writes, so more than one is started.
        if (round % 5 === 0) await new Promise((resolve) => setTimeout(resolve, 5));
      }
      await behind.settle();
      closeSync(fd);
      assert.equal(readFileSync(path).length, 200_000);
    },
  );

  test(
    "Given a descriptor that cannot be synced (a FIFO: fdatasync fails with " +
      "EINVAL) When a background sync runs Then settle() throws that error",
    async () => {
      const fifo = join(tempDir("oats-sync-behind-"), "fifo");
      execFileSync("mkfifo", [fifo]);
      // O_RDWR opens a FIFO on Linux without waiting for a reader.
      const fd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
      try {
        const behind = new SyncBehind(fd, 1);
        behind.wrote(1);
        await assert.rejects(behind.settle(), (error: NodeJS.ErrnoException) => error.code === "EINVAL");
      } finally {
        closeSync(fd);
      }
    },
  );
});
