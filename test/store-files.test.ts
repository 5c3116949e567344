/**
 * The small file operations of the stores (src/retention/store/files.ts),
 * the piecewise ones in particular: a file of megabytes read through one
 * reused buffer must hand over exactly its bytes, refuse what the whole-file
 * read refuses, and notice a file that shrinks while it is read.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import {
  readRegularFile,
  readRegularFileInPieces,
  writeNewFileDurablyInPieces,
  type ReadFailure,
} from "../src/retention/store/files.js";
import { tempDir } from "./helpers.js";

const refuse = (failure: ReadFailure, details: Record<string, unknown>) =>
  new OatsError("invalid-input", failure, { reason: failure, ...details });
const options = { limit: 64 * 1024 * 1024, refuse };

function inPieces(path: string, limit = options.limit): { bytes: Buffer; pieces: number[]; size: number } {
  const copies: Buffer[] = [];
  // Copied: a piece is valid only during its call.
  const size = readRegularFileInPieces(path, { ...options, limit }, (piece) => copies.push(Buffer.from(piece)));
  return { bytes: Buffer.concat(copies), pieces: copies.map((piece) => piece.length), size };
}

function refusedWith(reason: ReadFailure) {
  return (error: unknown) => error instanceof OatsError && error.details["reason"] === reason;
}

describe("readRegularFileInPieces", () => {
  test(
    "Given a file of a little over 1 MiB, Then the pieces, in order, are " +
      "exactly its bytes, none over 256 KiB, and the size is returned",
    () => {
      const dir = tempDir();
      const bytes = randomBytes(1024 * 1024 + 3);
      writeFileSync(join(dir, "log"), bytes);
      const read = inPieces(join(dir, "log"));
      assert.ok(read.bytes.equals(bytes));
      assert.equal(read.size, bytes.length);
      assert.ok(read.pieces.length >= 5, `${read.pieces.length} pieces`);
      assert.ok(read.pieces.every((length) => length <= 256 * 1024));
      assert.ok(readRegularFile(join(dir, "log"), options).equals(bytes), "the whole-file read agrees");
    },
  );

  test(
    "Given a consumer that reads a second file in pieces from inside its " +
      "call, Then both files come out whole (the reused buffer is not shared)",
    () => {
      const dir = tempDir();
      const outer = randomBytes(600 * 1024);
      const inner = randomBytes(300 * 1024);
      writeFileSync(join(dir, "outer"), outer);
      writeFileSync(join(dir, "inner"), inner);
      inPieces(join(dir, "inner")); // so that the reused buffer exists before the outer read takes it
      const outerCopies: Buffer[] = [];
      let innerRead: Buffer | null = null;
      readRegularFileInPieces(join(dir, "outer"), options, (piece) => {
        if (innerRead === null) innerRead = inPieces(join(dir, "inner")).bytes;
        outerCopies.push(Buffer.from(piece));
      });
      assert.ok(Buffer.concat(outerCopies).equals(outer));
      assert.ok(innerRead!.equals(inner));
    },
  );

  test("Given a file that shrinks while it is read, Then changed", () => {
    const dir = tempDir();
    writeFileSync(join(dir, "log"), randomBytes(1024 * 1024));
    let first = true;
    assert.throws(
      () =>
        readRegularFileInPieces(join(dir, "log"), options, () => {
          if (first) truncateSync(join(dir, "log"), 1000);
          first = false;
        }),
      refusedWith("changed"),
    );
  });

  test(
    "Given a symlink, a FIFO, a missing path or a file over the limit, Then " +
      "the refusals of the whole-file read, and the consumer is never called",
    () => {
      const dir = tempDir();
      writeFileSync(join(dir, "target"), "bytes\n");
      symlinkSync(join(dir, "target"), join(dir, "link"));
      execFileSync("mkfifo", [join(dir, "fifo")]);
      const never = () => assert.fail("nothing is handed over");
      assert.throws(() => readRegularFileInPieces(join(dir, "link"), options, never), refusedWith("symlink"));
      assert.throws(() => readRegularFileInPieces(join(dir, "fifo"), options, never), refusedWith("not-a-file"));
      assert.throws(() => readRegularFileInPieces(join(dir, "absent"), options, never), refusedWith("missing"));
      assert.throws(
        () => readRegularFileInPieces(join(dir, "target"), { ...options, limit: 5 }, never),
        refusedWith("too-large"),
      );
      assert.equal(inPieces(join(dir, "target"), 6).bytes.toString(), "bytes\n", "at the limit it is read");
    },
  );
});

describe("writeNewFileDurablyInPieces", () => {
  test(
    "Given pieces, Then the file holds them in order with the mode asked " +
      "for; an existing file or a symlink at the path is refused and left as " +
      "it was",
    () => {
      const dir = tempDir();
      const pieces = [randomBytes(300 * 1024), Buffer.alloc(0), randomBytes(5)];
      writeNewFileDurablyInPieces(join(dir, "copy"), 0o600, (write) => pieces.forEach(write));
      assert.ok(readFileSync(join(dir, "copy")).equals(Buffer.concat(pieces)));
      assert.equal(execFileSync("stat", ["-c", "%a", join(dir, "copy")], { encoding: "utf8" }).trim(), "600");
      assert.throws(
        () => writeNewFileDurablyInPieces(join(dir, "copy"), 0o600, (write) => write(Buffer.from("x"))),
        /EEXIST/,
      );
      writeFileSync(join(dir, "target"), "kept\n");
      symlinkSync(join(dir, "target"), join(dir, "link"));
      assert.throws(
        () => writeNewFileDurablyInPieces(join(dir, "link"), 0o600, (write) => write(Buffer.from("x"))),
        /EEXIST/,
      );
      assert.equal(readFileSync(join(dir, "target"), "utf8"), "kept\n");
    },
  );
});
