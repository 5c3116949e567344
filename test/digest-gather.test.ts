/**
 * A tree hash gathers short pieces in a 64 KiB buffer, and a finished hash
 * hands that buffer to the next (src/retention/digest/tree.ts): digests of
 * many trees at once, each reading on its own schedule, must be the ones
 * each tree has alone; a buffer shared by two hashes under way would mix
 * their bytes.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { digestTree } from "../src/index.js";
import { tempDir } from "./helpers.js";

function smallFilesTree(root: string, files: number): string {
  for (let i = 0; i < files; i++) {
    const dir = join(root, `d${i % 7}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, `f${i}.txt`), randomBytes(64 + ((i * 37) % 900)));
  }
  return root;
}

test("trees digested at once get the digests each has alone", async () => {
  const base = tempDir("oats-gather-");
  const trees = Array.from({ length: 8 }, (_, n) => smallFilesTree(join(base, `t${n}`), 150 + 40 * n));
  const alone: string[] = [];
  for (const tree of trees) alone.push((await digestTree(tree))["oats.tree-exec.v1"]!);
  assert.equal(new Set(alone).size, trees.length);
  for (let round = 0; round < 3; round++) {
    const together = await Promise.all(trees.map(async (tree) => (await digestTree(tree))["oats.tree-exec.v1"]!));
    assert.deepEqual(together, alone);
  }
});
