/**
 * A walked leaf holds its name and parent (and a symlink its target), not
 * its paths: a listing of 20,000 files is held twice during a retain, and
 * stored path strings were what grew the heap (docs/design/performance.md,
 * "Peak memory of a retain"). The paths it spells are the ones a stored field would have held.
 */
import assert from "node:assert/strict";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { walkTree } from "../src/retention/digest/walk.js";
import { tempDir } from "./helpers.js";

test(
  "Given a tree three levels deep, When it is walked, Then each leaf " +
    "stores only name, parent, type (and target) and spells its relative and " +
    "absolute path",
  async () => {
    const root = tempDir("oats-leaves-");
    mkdirSync(join(root, "a", "b é"), { recursive: true });
    writeFileSync(join(root, "top.txt"), "t");
    writeFileSync(join(root, "a", "mid.txt"), "m");
    writeFileSync(join(root, "a", "b é", "deep.txt"), "d");
    symlinkSync("../mid.txt", join(root, "a", "b é", "link"));
    const listing = await walkTree(root);
    const seen = listing.leaves.map((leaf) => [
      leaf.type,
      leaf.path,
      leaf.absolute,
      Object.keys(leaf).sort().join(","),
    ]);
    assert.deepEqual(seen, [
      ["file", "a/b é/deep.txt", `${root}/a/b é/deep.txt`, "name,parent,type"],
      ["symlink", "a/b é/link", `${root}/a/b é/link`, "name,parent,target,type"],
      ["file", "a/mid.txt", `${root}/a/mid.txt`, "name,parent,type"],
      ["file", "top.txt", `${root}/top.txt`, "name,parent,type"],
    ]);
    const link = listing.leaves[1]!;
    assert.equal(link.type === "symlink" && link.target, "../mid.txt");
    assert.equal(link.parent.path, "a/b é");
  },
);
