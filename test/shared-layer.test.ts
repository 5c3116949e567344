/**
 * The shared file layer (docs/design/retention.md, "The shared file layer"):
 * each distinct (content, exec bit) is held once under
 * `.agents/files/sha256/`, read-only, and every revision's regular file is a
 * hard link to it; a held file is verified before it is linked, a damaged
 * one never is; where a link cannot be made the file stays a private copy
 * and the receipt says why.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  chmodSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  type Stats,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { retainTree, verifyTree } from "../src/index.js";
import { setFaultHook } from "../src/retention/store/faults.js";
import { copyVerifiedTree, removeRunCopy } from "../src/captures/run-copy.js";
import { tempDir } from "./helpers.js";

afterEach(() => setFaultHook(null));

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

function heldPath(scope: string, content: Buffer | string, exec = false): string {
  const hex = sha256(content);
  return join(scope, ".agents/files/sha256", hex.slice(0, 2), `${hex.slice(2)}${exec ? ".x" : ""}`);
}

/** Every held file of the layer. */
function heldFiles(scope: string): string[] {
  const root = join(scope, ".agents/files/sha256");
  const out: string[] = [];
  for (const prefix of readdirSync(root).sort())
    for (const name of readdirSync(join(root, prefix)).sort()) out.push(join(root, prefix, name));
  return out;
}

/** Every regular file under `dir`, relative path to stats. */
function regularFiles(dir: string, rel = ""): Map<string, Stats> {
  const out = new Map<string, Stats>();
  for (const name of readdirSync(join(dir, rel))) {
    const path = rel ? `${rel}/${name}` : name;
    const stats = lstatSync(join(dir, path));
    if (stats.isDirectory()) for (const [p, s] of regularFiles(dir, path)) out.set(p, s);
    else if (stats.isFile()) out.set(path, stats);
  }
  return out;
}

function tree(files: Record<string, string>, executable: string[] = []): string {
  const dir = tempDir("oats-shared-src-");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), text, { mode: executable.includes(path) ? 0o755 : 0o644 });
  }
  return dir;
}

const KEY = "a".repeat(64);

test("50 near-identical revisions share their files: one inode per distinct content", async () => {
  const scope = tempDir();
  const files: Record<string, string> = {};
  for (let i = 0; i < 40; i++) files[`lib/m${i}.js`] = `module ${i}\n`.repeat(20);
  files["bin/run"] = "#!/bin/sh\necho run\n";
  const source = tree(files, ["bin/run"]);
  const dirs: string[] = [];
  for (let n = 0; n < 50; n++) {
    writeFileSync(join(source, "version.txt"), `version ${n}\n`);
    const receipt = await retainTree(scope, { kind: "source", key: KEY, source });
    assert.equal(receipt.status, "retained");
    assert.deepEqual(
      receipt.files,
      n === 0 ? { linked: 0, stored: 42, copied: 0 } : { linked: 41, stored: 1, copied: 0 },
    );
    dirs.push(receipt.dir);
  }
  const inodes = new Set<number>();
  let paths = 0;
  for (const dir of dirs)
    for (const stats of regularFiles(dir).values()) {
      inodes.add(stats.ino);
      paths += 1;
    }
  assert.equal(paths, 50 * 42);
  // 41 shared files and 50 versions: 91 inodes hold 2,100 paths.
  assert.equal(inodes.size, 41 + 50);
  assert.equal(heldFiles(scope).length, 91);
  const shared = lstatSync(join(dirs[0]!, "lib/m0.js"));
  assert.equal(shared.nlink, 51, "the held file and one link per revision");
  assert.equal(lstatSync(heldPath(scope, files["lib/m0.js"]!)).ino, shared.ino);
  assert.equal(lstatSync(heldPath(scope, files["bin/run"]!, true)).ino, lstatSync(join(dirs[7]!, "bin/run")).ino);
  for (const dir of dirs.slice(0, 3))
    await verifyTree(scope, { kind: "source", key: KEY, integrity: `oats.tree-exec.v1:${dir.slice(-71)}` });
});

test("held files and revisions are read-only: files 0444, executables 0555, " + "directories 0555", async () => {
  const scope = tempDir();
  const source = tree({ "a.txt": "a\n", "sub/deep/run.sh": "#!/bin/sh\n" }, ["sub/deep/run.sh"]);
  chmodSync(join(source, "a.txt"), 0o600);
  chmodSync(join(source, "sub"), 0o700);
  const receipt = await retainTree(scope, { kind: "capture", key: "modes", source });
  const mode = (path: string) => lstatSync(path).mode & 0o7777;
  assert.equal(mode(join(receipt.dir, "a.txt")), 0o444);
  assert.equal(mode(join(receipt.dir, "sub/deep/run.sh")), 0o555);
  for (const dir of [receipt.dir, join(receipt.dir, "sub"), join(receipt.dir, "sub/deep")])
    assert.equal(mode(dir), 0o555);
  assert.equal(mode(heldPath(scope, "a\n")), 0o444);
  assert.equal(mode(heldPath(scope, "#!/bin/sh\n", true)), 0o555);
  // The source is untouched.
  assert.equal(mode(join(source, "a.txt")), 0o600);
  assert.equal(lstatSync(join(source, "a.txt")).nlink, 1);
});

test(
  "a damaged held file is never linked: it is reported, and replaced " + "atomically by the verified source bytes",
  async () => {
    const scope = tempDir();
    const first = await retainTree(scope, { kind: "capture", key: "one", source: tree({ "x.txt": "shared\n" }) });
    const held = heldPath(scope, "shared\n");
    const damagedIno = lstatSync(held).ino;
    chmodSync(held, 0o644);
    writeFileSync(held, "rotten\n");
    const second = await retainTree(scope, {
      kind: "capture",
      key: "two",
      source: tree({ "x.txt": "shared\n", "y.txt": "other\n" }),
    });
    assert.deepEqual(second.files, {
      linked: 0,
      stored: 2,
      copied: 0,
      damaged: [{ held, expected: sha256("shared\n"), actual: sha256("rotten\n") }],
    });
    const stored = lstatSync(join(second.dir, "x.txt"));
    assert.notEqual(stored.ino, damagedIno, "the damaged file was not linked");
    assert.equal(lstatSync(held).ino, stored.ino, "the held name now has the verified bytes");
    assert.equal(lstatSync(held).mode & 0o7777, 0o444);
    assert.equal(readFileSync(held, "utf8"), "shared\n");
    await verifyTree(scope, { kind: "capture", key: "two", integrity: second.integrity });
    // The first revision still links the damaged inode: it is damaged, and verification says so.
    assert.equal(lstatSync(join(first.dir, "x.txt")).ino, damagedIno);
    await assert.rejects(verifyTree(scope, { kind: "capture", key: "one", integrity: first.integrity }), {
      code: "integrity-mismatch",
    });
    // No staging name is left in the layer.
    assert.ok(heldFiles(scope).every((path) => !path.includes(".staging-")));
  },
);

test(
  "a held file at its link-count limit (EMLINK, real) leaves the file a " + "private copy, and the receipt says so",
  async () => {
    const scope = tempDir();
    const first = await retainTree(scope, { kind: "capture", key: "one", source: tree({ "x.txt": "busy\n" }) });
    const held = heldPath(scope, "busy\n");
    // ext4 allows 65,000 links to an inode; take the rest.
    const spare = join(scope, "spare-links");
    mkdirSync(spare);
    try {
      for (let i = lstatSync(held).nlink; ; i++) linkSync(held, join(spare, `l${i}`));
    } catch (error) {
      assert.equal((error as NodeJS.ErrnoException).code, "EMLINK", "the filesystem has a link limit");
    }
    const second = await retainTree(scope, {
      kind: "capture",
      key: "two",
      source: tree({ "x.txt": "busy\n", "y.txt": "free\n" }),
    });
    assert.deepEqual(second.files, { linked: 0, stored: 1, copied: 1, fallback: "EMLINK" });
    const copy = lstatSync(join(second.dir, "x.txt"));
    assert.notEqual(copy.ino, lstatSync(held).ino);
    assert.equal(copy.nlink, 1);
    assert.equal(copy.mode & 0o7777, 0o444, "a private copy is read-only too");
    assert.equal(lstatSync(join(first.dir, "x.txt")).ino, lstatSync(held).ino);
    await verifyTree(scope, { kind: "capture", key: "two", integrity: second.integrity });
    rmSync(spare, { recursive: true, force: true });
  },
);

test(
  "a layer on another filesystem (EXDEV, injected) leaves every file a " + "private copy, and the receipt says so",
  async () => {
    const scope = tempDir();
    setFaultHook((step) => {
      if (step === "link") throw Object.assign(new Error("cross-device link"), { code: "EXDEV" });
    });
    const receipt = await retainTree(scope, {
      kind: "capture",
      key: "xdev",
      source: tree({ "a.txt": "a\n", "b.txt": "b\n", "c.txt": "a\n" }),
    });
    setFaultHook(null);
    assert.deepEqual(receipt.files, { linked: 0, stored: 0, copied: 3, fallback: "EXDEV" });
    for (const stats of regularFiles(receipt.dir).values()) {
      assert.equal(stats.nlink, 1);
      assert.equal(stats.mode & 0o7777, 0o444);
    }
    assert.deepEqual(heldFiles(scope), []);
    assert.equal(
      readdirSync(join(receipt.dir)).some((name) => name.startsWith(".staging-")),
      false,
    );
    await verifyTree(scope, { kind: "capture", key: "xdev", integrity: receipt.integrity });
  },
);

test("a run copy of a shared revision is a private, writable copy: never a link into the layer", async () => {
  const scope = tempDir();
  const source = tree({ "bin/run": "#!/bin/sh\n", "data/a.txt": "a\n" }, ["bin/run"]);
  const receipt = await retainTree(scope, { kind: "capture", key: "runnable", source });
  const copy = await copyVerifiedTree(realpathSync(scope), {
    kind: "capture",
    key: "runnable",
    integrity: `${receipt.integrity.format}:${receipt.integrity.value}`,
  });
  try {
    const files = regularFiles(join(copy.dir, "tree"));
    assert.deepEqual([...files.keys()].sort(), ["bin/run", "data/a.txt"]);
    for (const [path, stats] of files) {
      assert.equal(stats.nlink, 1, `${path} is not a link`);
      assert.notEqual(stats.ino, lstatSync(join(receipt.dir, path)).ino);
    }
    // The modes a copy had before the layer: owner write back, group and other never.
    assert.equal(files.get("bin/run")!.mode & 0o7777, 0o755);
    assert.equal(files.get("data/a.txt")!.mode & 0o7777, 0o644);
    assert.equal(lstatSync(join(copy.dir, "tree/data")).mode & 0o7777, 0o755);
    // The store is untouched: still read-only, still one link per revision plus the held file.
    assert.equal(lstatSync(join(receipt.dir, "data/a.txt")).nlink, 2);
    assert.equal(lstatSync(join(receipt.dir, "data/a.txt")).mode & 0o7777, 0o444);
  } finally {
    await removeRunCopy(copy);
  }
});
