/**
 * Stores made before the shared file layer (every revision a full copy, with
 * the source's writable modes) keep working: they verify, fsck says which
 * revisions are not yet shared, and `oats dedupe --apply` converts them, a
 * verified revision at a time, a file at a time.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { chmodSync, lstatSync, mkdirSync, readdirSync, writeFileSync, type Stats } from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { dedupe, fsckScope, retainTree, verifyTree, type ArtifactReceipt } from "../src/index.js";
import { setFaultHook } from "../src/retention/store/faults.js";
import { runOats, snapshotTree, tempDir } from "./helpers.js";

afterEach(() => setFaultHook(null));

const KEY = "b".repeat(64);

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

/** Give a revision the modes a store made before the layer had: the source's, owner-writable. */
function legacyModes(dir: string): void {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const stats = lstatSync(path);
    if (stats.isDirectory()) legacyModes(path);
    else if (stats.isFile()) chmodSync(path, (stats.mode & 0o100) !== 0 ? 0o755 : 0o644);
  }
  chmodSync(dir, 0o755);
}

/** Retain as a store made before the layer would have: full copies (no link is made), writable modes. */
async function legacyRetain(scope: string, source: string): Promise<ArtifactReceipt> {
  setFaultHook((step) => {
    if (step === "link") throw Object.assign(new Error("no links before the layer"), { code: "EPERM" });
  });
  try {
    const receipt = await retainTree(scope, { kind: "source", key: KEY, source });
    legacyModes(receipt.dir);
    return receipt;
  } finally {
    setFaultHook(null);
  }
}

function source(): string {
  const dir = tempDir("oats-dedupe-src-");
  mkdirSync(join(dir, "lib"));
  mkdirSync(join(dir, "bin"));
  for (let i = 0; i < 20; i++) writeFileSync(join(dir, "lib", `m${i}.js`), `module ${i}\n`);
  writeFileSync(join(dir, "bin/run"), "#!/bin/sh\n", { mode: 0o755 });
  return dir;
}

function inodes(dirs: readonly string[]): number {
  const seen = new Set<number>();
  for (const dir of dirs) for (const stats of regularFiles(dir).values()) seen.add(stats.ino);
  return seen.size;
}

test(
  "a legacy store of 50 near-identical revisions verifies, fsck names it " + "unshared, and dedupe shares it",
  async () => {
    const scope = tempDir();
    const tree = source();
    const receipts: ArtifactReceipt[] = [];
    for (let n = 0; n < 50; n++) {
      writeFileSync(join(tree, "version.txt"), `version ${n}\n`);
      receipts.push(await legacyRetain(scope, tree));
    }
    const dirs = receipts.map((receipt) => receipt.dir);
    assert.equal(inodes(dirs), 50 * 22, "full copies: one inode per path");
    for (const receipt of receipts.slice(0, 3))
      await verifyTree(scope, { kind: "source", key: KEY, integrity: receipt.integrity });

    const before = await fsckScope(scope);
    assert.equal(before.ok, true, JSON.stringify(before.worst));
    const notices = before.classes.files.filter((finding) => finding.kind === "notice");
    assert.equal(notices.length, 50);
    assert.match(notices[0]!.message, /22 files are not yet shared; `oats dedupe --apply`/);

    const snapshot = snapshotTree(scope);
    const dry = await dedupe(scope);
    assert.equal(dry.dryRun, true);
    assert.equal(dry.revisions.length, 50);
    assert.equal(dry.files, 50 * 22);
    assert.deepEqual(snapshotTree(scope), snapshot, "a dry run changes nothing");

    const applied = await dedupe(scope, { apply: true });
    assert.equal(applied.dryRun, false);
    assert.equal(applied.revisions.length, 50);
    assert.deepEqual(
      {
        linked: applied.revisions[0]!.linked,
        stored: applied.revisions[0]!.stored,
        copied: applied.revisions[0]!.copied,
      },
      { linked: 0, stored: 22, copied: 0 },
    );
    assert.deepEqual(
      { linked: applied.revisions[1]!.linked, stored: applied.revisions[1]!.stored },
      { linked: 21, stored: 1 },
    );
    // 21 shared files and 50 versions.
    assert.equal(inodes(dirs), 21 + 50);
    assert.equal(lstatSync(join(dirs[9]!, "lib/m3.js")).nlink, 51);
    for (const dir of dirs) {
      assert.equal(lstatSync(dir).mode & 0o7777, 0o555);
      assert.equal(lstatSync(join(dir, "lib")).mode & 0o7777, 0o555);
      assert.equal(lstatSync(join(dir, "bin/run")).mode & 0o7777, 0o555);
      assert.equal(lstatSync(join(dir, "lib/m0.js")).mode & 0o7777, 0o444);
    }
    for (const receipt of receipts) await verifyTree(scope, { kind: "source", key: KEY, integrity: receipt.integrity });
    const after = await fsckScope(scope);
    assert.equal(after.ok, true, JSON.stringify(after.worst));
    assert.deepEqual(after.classes.files, []);
    // Nothing left to do.
    const again = await dedupe(scope, { apply: true });
    assert.equal(again.revisions.length, 0);
    assert.equal(again.shared, 50);
  },
);

test(
  "dedupe leaves a damaged legacy revision as it is, and replaces a " + "damaged held file with verified bytes",
  async () => {
    const scope = tempDir();
    const tree = source();
    const good = await legacyRetain(scope, tree);
    writeFileSync(join(tree, "extra.txt"), "extra\n");
    const bad = await legacyRetain(scope, tree);
    writeFileSync(join(bad.dir, "lib/m1.js"), "tampered\n");
    // The layer holds a damaged copy of a file the good revision has.
    const hex = createHash("sha256").update("module 2\n").digest("hex");
    const held = join(scope, ".agents/files/sha256", hex.slice(0, 2), hex.slice(2));
    mkdirSync(join(held, ".."), { recursive: true });
    writeFileSync(held, "rotten\n", { mode: 0o444 });

    const report = await dedupe(scope, { apply: true });
    const byDir = new Map(report.revisions.map((revision) => [revision.dir, revision]));
    assert.equal(byDir.get(bad.dir)!.damaged?.code, "integrity-mismatch");
    assert.ok(
      [...regularFiles(bad.dir).values()].every((stats) => stats.nlink === 1),
      "the damaged one is untouched",
    );
    assert.equal(lstatSync(bad.dir).mode & 0o7777, 0o755);
    assert.deepEqual(
      { linked: byDir.get(good.dir)!.linked, stored: byDir.get(good.dir)!.stored },
      { linked: 0, stored: 21 },
    );
    assert.equal(lstatSync(held).ino, lstatSync(join(good.dir, "lib/m2.js")).ino, "the damaged held file was replaced");
    await verifyTree(scope, { kind: "source", key: KEY, integrity: good.integrity });
  },
);

test("oats dedupe: a dry run by default, --apply converts, both together " + "are a usage error", async () => {
  const scope = tempDir();
  const receipt = await legacyRetain(scope, source());
  const dry = runOats(["--json", "--scope", scope, "dedupe"]);
  assert.equal(dry.status, 0, dry.stderr);
  const envelope = JSON.parse(dry.stdout);
  assert.equal(envelope.command, "dedupe");
  assert.equal(envelope.result.dryRun, true);
  assert.equal(envelope.result.files, 21);
  assert.equal(regularFiles(receipt.dir).get("lib/m0.js")!.nlink, 1);
  const applied = runOats(["--json", "--scope", scope, "dedupe", "--apply"]);
  assert.equal(applied.status, 0, applied.stderr);
  assert.equal(JSON.parse(applied.stdout).result.revisions[0].stored, 21);
  assert.equal(regularFiles(receipt.dir).get("lib/m0.js")!.nlink, 2);
  const both = runOats(["--json", "--scope", scope, "dedupe", "--apply", "--dry-run"]);
  assert.equal(both.status, 2);
  assert.equal(JSON.parse(both.stdout).error.code, "usage");
});
