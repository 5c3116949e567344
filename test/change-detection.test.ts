import assert from "node:assert/strict";
import { appendFileSync, mkdirSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, test } from "node:test";
import { digestTree, listRetained, retainTree } from "../src/index.js";
import { readLeavesInOrder } from "../src/engine/file-reader.js";
import { setNativeReads } from "../src/engine/native-reads.js";
import { setReadHook } from "../src/engine/read-hook.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { tempDir } from "./helpers.js";
import { refusedAsChanged } from "./support/refusals.js";

/**
 * A file that changes between being read and being checked is refused,
 * never hashed half-old. The change is real (the file is appended to,
 * rewritten, or replaced); the read hook only makes it land in the window
 * between the read and the second fstat, which a real race for a file read
 * in microseconds cannot hit on demand. (test/digest.test.ts races a real
 * writer against a large file.) Every case runs with the small files read
 * natively (native/read-small.c, which calls the hook back between its read
 * and its second fstat) and from JavaScript.
 */

afterEach(() => {
  setReadHook(null);
  setNativeReads(true);
});

const MiB = 1 << 20;

async function treeWith(files: Record<string, Buffer | string>): Promise<string> {
  const root = tempDir("oats-change-");
  for (const [path, content] of Object.entries(files)) {
    mkdirSync(join(root, path, ".."), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  // Timestamps are kept at the kernel's coarse clock: let it tick past the
  // files' creation, so a rewrite of the same size still moves mtime.
  await sleep(30);
  return root;
}

function changeOnce(root: string, target: string, change: (absolute: string) => void): string[] {
  const seen: string[] = [];
  setReadHook((path) => {
    seen.push(path);
    if (path === target && seen.filter((p) => p === target).length === 1) change(join(root, target));
  });
  return seen;
}

const small = { "a.txt": "alpha\n", "b/small.txt": "x".repeat(2048), "c.txt": "gamma\n" };

for (const native of [true, false]) {
  const way = native ? "native reads" : "JavaScript reads";
  const useWay = () => setNativeReads(native);

  test(
    `${way}: Given a small file that grows after it was read, When the tree ` +
      `is digested, Then it is refused (size)`,
    async () => {
      useWay();
      const root = await treeWith(small);
      changeOnce(root, "b/small.txt", (file) => appendFileSync(file, "more"));
      const error = await refusedAsChanged(digestTree(root), "b/small.txt");
      assert.equal(error.details.changed, "size");
    },
  );

  test(
    `${way}: Given a small file rewritten with the same size after it was ` +
      `read, When digested, Then it is refused (mtime)`,
    async () => {
      useWay();
      const root = await treeWith(small);
      changeOnce(root, "b/small.txt", (file) => writeFileSync(file, "y".repeat(2048)));
      const error = await refusedAsChanged(digestTree(root, ["oats.tree-legacy.v0"]), "b/small.txt");
      assert.match(String(error.details.changed), /^(mtime|ctime)$/);
    },
  );

  test(
    `${way}: Given a small file replaced by another after it was read, When ` + `digested, Then it is refused`,
    async () => {
      useWay();
      const root = await treeWith({ ...small, "spare.txt": "x".repeat(2048) });
      // The descriptor still holds the old inode; losing its name moves its ctime.
      changeOnce(root, "b/small.txt", (file) => renameSync(join(root, "spare.txt"), file));
      const error = await refusedAsChanged(digestTree(root), "b/small.txt");
      assert.equal(error.details.changed, "ctime");
    },
  );

  test(
    `${way}: Given a large file appended to after its last chunk was read, ` + `When digested, Then it is refused`,
    async () => {
      useWay();
      const root = await treeWith({ "big.bin": Buffer.alloc(3 * MiB, 7), "z.txt": "after\n" });
      changeOnce(root, "big.bin", (file) => appendFileSync(file, "tail"));
      const error = await refusedAsChanged(digestTree(root), "big.bin");
      assert.equal(error.details.changed, "size");
    },
  );

  test(
    `${way}: Given a small file read ahead while a large one is hashed, When ` + `it changes, Then it is refused`,
    async () => {
      useWay();
      const root = await treeWith({ "a-big.bin": Buffer.alloc(3 * MiB, 1), "b-next.txt": "next\n" });
      changeOnce(root, "b-next.txt", (file) => appendFileSync(file, "!"));
      await refusedAsChanged(digestTree(root), "b-next.txt");
    },
  );

  test(
    `${way}: Given a consumer without a whole-file path, When a small file ` +
      `changes, Then the general path refuses it too`,
    async () => {
      useWay();
      const root = await treeWith(small);
      changeOnce(root, "c.txt", (file) => appendFileSync(file, "!"));
      const listing = await walkTree(root);
      const consumer = { start() {}, chunk() {}, end() {}, symlink() {} };
      await refusedAsChanged(readLeavesInOrder(listing.leaves, consumer), "c.txt");
    },
  );

  test(
    `${way}: Given a source whose file changes while it is retained, When ` +
      `retained, Then nothing is published and no staging remains`,
    async () => {
      useWay();
      const root = await treeWith(small);
      const scope = tempDir("oats-scope-");
      changeOnce(root, "a.txt", (file) => appendFileSync(file, "!"));
      await refusedAsChanged(retainTree(scope, { kind: "capture", key: "nightly", source: root }), "a.txt");
      assert.deepEqual(listRetained(scope), []);
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    `${way}: Given no change, When the hook watches every read, Then every ` +
      `file is checked and the digest succeeds`,
    async () => {
      useWay();
      const root = await treeWith({ ...small, "big.bin": Buffer.alloc(2 * MiB, 3) });
      const seen = changeOnce(root, "none", () => undefined);
      await digestTree(root);
      assert.deepEqual([...seen].sort(), ["a.txt", "b/small.txt", "big.bin", "c.txt"]);
    },
  );
}
