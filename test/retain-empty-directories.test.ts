/**
 * Empty directories are outside tree identity (contract section 2), so a
 * store holds none: two hosts holding the same digest hold the same tree,
 * whether the revision was retained from a source that had empty
 * directories, from one that had none, adopted from a tarball, or imported
 * from a bundle. Retain says what it left out: the receipt's leftOut (a
 * count and the first paths) and the CLI's lines.
 */
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { c as tarCreate } from "tar";
import {
  exportBundle,
  importBundle,
  retainCapabilityArtifact,
  retainTarball,
  retainTree,
  TREE_EXEC,
} from "../src/index.js";
import { copyVerifiedTree, removeRunCopy } from "../src/captures/run-copy.js";
import { adoptTree, LEFT_OUT_PATHS } from "../src/retention/index.js";
import {
  FIXTURE_PAYLOAD,
  fixtureCopy,
  fixtureLock,
  makeTree,
  runJson,
  runOats,
  snapshotTree,
  tempDir,
} from "./helpers.js";

const FILES = { "bin/run.sh": "#!/bin/sh\necho hi\n", "d/file.txt": "kept\n", "top.txt": "top\n" };
/** Directories with no file or symlink at any depth, as the receipt names them (UTF-8 order). */
const EMPTY = ["a", "a/b", "a/b/c", "d/e", "z"];

/** The tree of FILES, and a copy of it with the EMPTY directories added. */
function pair(): { plain: string; hollow: string } {
  const plain = makeTree(FILES);
  const hollow = makeTree(FILES);
  for (const path of EMPTY) mkdirSync(join(hollow, path), { recursive: true });
  return { plain, hollow };
}

const receiptOf = (scope: string, source: string) => retainTree(scope, { kind: "capture", key: "cap", source });

describe("empty directories are never stored, and retain says it left them out", () => {
  test("a source with empty directories is stored exactly as the same source without them", async () => {
    const { plain, hollow } = pair();
    const withEmpty = tempDir("oats-scope-");
    const without = tempDir("oats-scope-");
    const left = await receiptOf(withEmpty, hollow);
    const right = await receiptOf(without, plain);
    assert.deepEqual(left.integrity, right.integrity, "identity does not see the empty directories");
    assert.equal(left.status, "retained");
    assert.deepEqual(snapshotTree(left.dir), snapshotTree(right.dir), "two hosts with one digest hold one tree");
    assert.deepEqual(readdirSync(left.dir).sort(), ["bin", "d", "top.txt"]);
    assert.deepEqual(left.leftOut, { emptyDirectories: EMPTY.length, paths: EMPTY });
    assert.equal("leftOut" in right, false, "a source without empty directories leaves nothing out");
  });

  test("a kept retain of the same source says again what it left out, and stores nothing", async () => {
    const { hollow } = pair();
    const scope = tempDir("oats-scope-");
    const first = await receiptOf(scope, hollow);
    const before = snapshotTree(scope);
    const again = await receiptOf(scope, hollow);
    assert.equal(again.status, "kept");
    assert.deepEqual(again.leftOut, first.leftOut);
    assert.deepEqual(snapshotTree(scope), before);
  });

  test("an adopted tree (the tarball and import path) loses its empty directories in staging", async () => {
    const { plain, hollow } = pair();
    const adopted = tempDir("oats-scope-");
    const copied = tempDir("oats-scope-");
    const receipt = await adoptTree(adopted, { kind: "capture", key: "cap", source: hollow });
    const reference = await receiptOf(copied, plain);
    assert.deepEqual(receipt.leftOut, { emptyDirectories: EMPTY.length, paths: EMPTY });
    assert.deepEqual(snapshotTree(receipt.dir), snapshotTree(reference.dir));
  });

  test("a tarball whose entries include empty directories is stored without them", async () => {
    const { plain, hollow } = pair();
    const file = join(tempDir("oats-tarc-"), "package.tgz");
    await tarCreate({ gzip: true, cwd: hollow, prefix: "package/", file, portable: true }, readdirSync(hollow).sort());
    const scope = tempDir("oats-scope-");
    const receipt = await retainTarball(scope, file, { kind: "capture", key: "cap" });
    const reference = await receiptOf(tempDir("oats-scope-"), plain);
    assert.deepEqual(receipt.integrity, reference.integrity);
    assert.deepEqual(snapshotTree(receipt.dir), snapshotTree(reference.dir));
    assert.deepEqual(receipt.leftOut?.paths, EMPTY);
  });

  test("a capability retained at its lock's legacy digest leaves out an empty directory of its payload", async () => {
    const source = fixtureCopy();
    mkdirSync(join(source, "empty"));
    const scope = tempDir("oats-scope-");
    const receipt = await retainCapabilityArtifact(scope, source, "demo.hello", fixtureLock());
    const reference = await retainCapabilityArtifact(
      tempDir("oats-scope-"),
      FIXTURE_PAYLOAD,
      "demo.hello",
      fixtureLock(),
    );
    assert.deepEqual(receipt.leftOut, { emptyDirectories: 1, paths: ["empty"] });
    assert.deepEqual(snapshotTree(receipt.dir), snapshotTree(reference.dir));
  });

  test("an exported and imported revision is the same tree on the far host", async () => {
    const { hollow } = pair();
    const here = tempDir("oats-scope-");
    const there = tempDir("oats-scope-");
    const receipt = await receiptOf(here, hollow);
    const bundle = join(tempDir("oats-bundle-"), "b.tar");
    const ref = { kind: "capture", key: "cap", integrity: `${TREE_EXEC}:${receipt.integrity.value}` } as const;
    await exportBundle(here, [ref], bundle);
    await importBundle(there, bundle);
    const far = join(there, receipt.dir.slice(here.length));
    assert.deepEqual(snapshotTree(far), snapshotTree(receipt.dir));
  });

  test("the receipt names at most LEFT_OUT_PATHS paths and counts every one; the CLI says both", () => {
    const source = makeTree({ "keep.txt": "x\n" });
    for (let i = 0; i < LEFT_OUT_PATHS + 5; i++) mkdirSync(join(source, `e${String(i).padStart(2, "0")}`));
    const scope = tempDir("oats-scope-");
    const json = runJson(["retain", source, "--scope", scope, "--kind", "capture", "--id", "cap"]);
    assert.equal(json.status, 0, json.stderr);
    const left = json.envelope.result!["leftOut"];
    assert.equal(left.emptyDirectories, LEFT_OUT_PATHS + 5);
    assert.equal(left.paths.length, LEFT_OUT_PATHS);
    assert.equal(left.paths[0], "e00");
    const human = runOats(["retain", source, "--scope", scope, "--kind", "capture", "--id", "cap"]);
    assert.equal(human.status, 0, human.stderr);
    assert.match(human.stdout, /left out {2}25 empty directories \(outside tree identity, not stored\)/);
    assert.match(human.stdout, /^ {4}e00\/$/m);
    assert.match(human.stdout, /\.\.\. and 5 more/);
    assert.deepEqual(readdirSync(json.envelope.result!["dir"]), ["keep.txt"]);
  });

  test("a file in an otherwise empty directory keeps it; a symlink does too", async () => {
    const source = makeTree({ "x/y/z.txt": "z\n" });
    mkdirSync(join(source, "x/empty"));
    mkdirSync(join(source, "l"));
    writeFileSync(join(source, "target.txt"), "t\n");
    symlinkSync("../target.txt", join(source, "l/link"));
    const receipt = await receiptOf(tempDir("oats-scope-"), source);
    assert.deepEqual(receipt.leftOut, { emptyDirectories: 1, paths: ["x/empty"] });
    assert.deepEqual(readdirSync(join(receipt.dir, "x")), ["y"]);
    assert.deepEqual(readdirSync(join(receipt.dir, "l")), ["link"]);
  });

  test("a dispatch's run copy holds no empty directory, even from a revision stored with one", async () => {
    const scope = tempDir("oats-scope-");
    const receipt = await receiptOf(scope, makeTree(FILES));
    mkdirSync(join(receipt.dir, "d/e"));
    mkdirSync(join(receipt.dir, "hollow/inside"), { recursive: true });
    const copy = await copyVerifiedTree(scope, { kind: "capture", key: "cap", integrity: receipt.integrity });
    try {
      assert.deepEqual(readdirSync(copy.root).sort(), ["bin", "d", "top.txt"]);
      assert.deepEqual(readdirSync(join(copy.root, "d")), ["file.txt"]);
    } finally {
      await removeRunCopy(copy);
    }
  });
});
