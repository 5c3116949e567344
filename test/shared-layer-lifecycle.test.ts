/**
 * The shared file layer in the lifecycle: gc removes the held files no
 * revision links and keeps the others; fsck hashes each held file once and
 * reads each revision's structure, and reports a damaged held file once, a
 * writable store entry, and a path that no longer links its held file.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  symlinkSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { cleanupStaging, fsckScope, gc, retainTree, verifyTree } from "../src/index.js";
import { hostTag } from "../src/retention/store/layout.js";
import { tempDir } from "./helpers.js";

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

function heldPath(scope: string, content: string, exec = false): string {
  const hex = sha256(content);
  return join(scope, ".agents/files/sha256", hex.slice(0, 2), `${hex.slice(2)}${exec ? ".x" : ""}`);
}

function tree(files: Record<string, string>): string {
  const dir = tempDir("oats-shared-src-");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, ".."), { recursive: true });
    writeFileSync(join(dir, path), text);
  }
  return dir;
}

const OLD = new Date(Date.now() - 48 * 3600 * 1000);

test("gc removes the held files no revision links, and keeps those another " + "revision still links", async () => {
  const scope = tempDir();
  const a = await retainTree(scope, {
    kind: "capture",
    key: "a",
    source: tree({ "x.txt": "shared\n", "y.txt": "a only\n" }),
  });
  const b = await retainTree(scope, {
    kind: "capture",
    key: "b",
    source: tree({ "x.txt": "shared\n", "z.txt": "b only\n" }),
  });
  // `a` is old and unreachable; `b` is young (kept by the grace period).
  utimesSync(a.dir, OLD, OLD);
  // A held file nothing has ever linked (a publication that failed after storing it).
  const stray = heldPath(scope, "stray\n");
  mkdirSync(dirname(stray), { recursive: true });
  writeFileSync(stray, "stray\n", { mode: 0o444 });

  const dry = await gc(scope, { graceMs: 3600 * 1000 });
  assert.deepEqual(
    dry.collect.map((item) => item.path),
    [a.dir],
  );
  assert.deepEqual(dry.heldFiles.files.map((file) => file.path).sort(), [heldPath(scope, "a only\n"), stray].sort());
  assert.equal(dry.heldFiles.bytes, "a only\n".length + "stray\n".length);
  assert.ok(existsSync(heldPath(scope, "a only\n")), "a dry run removes nothing");

  const done = await gc(scope, { graceMs: 3600 * 1000, delete: true });
  assert.equal(done.deleted, true);
  assert.deepEqual(done.heldFiles.files.map((file) => file.path).sort(), [heldPath(scope, "a only\n"), stray].sort());
  assert.equal(existsSync(a.dir), false);
  assert.equal(existsSync(heldPath(scope, "a only\n")), false);
  assert.equal(existsSync(stray), false);
  // Still linked by `b`: kept, and `b` is whole.
  assert.equal(lstatSync(heldPath(scope, "shared\n")).nlink, 2);
  assert.equal(lstatSync(heldPath(scope, "b only\n")).nlink, 2);
  await verifyTree(scope, { kind: "capture", key: "b", integrity: b.integrity });

  // Once `b` goes too, so does everything it shared.
  utimesSync(b.dir, OLD, OLD);
  const last = await gc(scope, { graceMs: 0, delete: true });
  assert.deepEqual(
    last.heldFiles.files.map((file) => file.path).sort(),
    [heldPath(scope, "b only\n"), heldPath(scope, "shared\n")].sort(),
  );
  assert.equal(existsSync(heldPath(scope, "shared\n")), false);
});

test("fsck reports a damaged held file once, however many revisions link it", async () => {
  const scope = tempDir();
  for (const key of ["a", "b", "c"])
    await retainTree(scope, { kind: "capture", key, source: tree({ "x.txt": "shared\n", [`${key}.txt`]: key }) });
  const clean = await fsckScope(scope);
  assert.equal(clean.ok, true, JSON.stringify(clean.worst));
  assert.equal(clean.counts.heldFiles, 4);
  assert.deepEqual(clean.classes.files, []);

  const held = heldPath(scope, "shared\n");
  writeFileSync(held, "rotten\n"); // root ignores the 0444 mode
  const report = await fsckScope(scope);
  const damaged = report.classes.files.filter((finding) => finding.details["reason"] === "damaged-held-file");
  assert.equal(damaged.length, 1);
  assert.equal(damaged[0]!.path, held);
  assert.equal(damaged[0]!.kind, "mismatch");
  assert.equal(report.exitCode, 5);
  // Every revision that links it fails its own verification.
  assert.equal(report.classes.revisions.filter((finding) => finding.code === "integrity-mismatch").length, 3);
});

test(
  "fsck reports a writable held file, revision file and revision " + "directory (never a symlink's own mode)",
  async () => {
    const scope = tempDir();
    const source = tree({ "sub/x.txt": "x\n", "y.txt": "y\n" });
    symlinkSync("sub/x.txt", join(source, "link"));
    const a = await retainTree(scope, { kind: "capture", key: "a", source });
    assert.equal((await fsckScope(scope)).ok, true, "a symlink's 0777 is not a writable entry");
    chmodSync(join(a.dir, "sub/x.txt"), 0o644); // the same inode as the held file
    chmodSync(join(a.dir, "sub"), 0o755);
    const report = await fsckScope(scope);
    const writable = report.classes.files
      .filter((finding) => finding.details["reason"] === "writable")
      .map((finding) => finding.path)
      .sort();
    assert.deepEqual(writable, [join(a.dir, "sub"), join(a.dir, "sub/x.txt"), heldPath(scope, "x\n")].sort());
    assert.equal(report.ok, false);
    assert.equal(report.classes.revisions.length, 0, "the bytes are intact");
  },
);

test("fsck reports a path that no longer links its held file, though its " + "bytes are intact", async () => {
  const scope = tempDir();
  const a = await retainTree(scope, { kind: "capture", key: "a", source: tree({ "x.txt": "x\n", "y.txt": "y\n" }) });
  const path = join(a.dir, "x.txt");
  const bytes = readFileSync(path);
  chmodSync(a.dir, 0o755);
  unlinkSync(path);
  writeFileSync(path, bytes, { mode: 0o444 });
  chmodSync(a.dir, 0o555);
  const report = await fsckScope(scope);
  const broken = report.classes.files.filter((finding) => finding.details["reason"] === "broken-link");
  assert.equal(broken.length, 1);
  assert.deepEqual(broken[0]!.details["path"], "x.txt");
  assert.equal(broken[0]!.details["held"], heldPath(scope, "x\n"));
  assert.equal(report.classes.revisions.length, 0, "the revision still verifies");
  assert.equal(report.ok, false);
});

test(
  "a replacement staged in the layer by a crashed publisher is staging: fsck names it, " + "cleanup removes it",
  async () => {
    const scope = tempDir();
    await retainTree(scope, { kind: "capture", key: "a", source: tree({ "x.txt": "x\n" }) });
    const held = heldPath(scope, "x\n");
    const crashed = join(dirname(held), `.staging-${hostTag()}-999999999-${"ab".repeat(6)}`);
    writeFileSync(crashed, "x\n", { mode: 0o444 });
    const report = await fsckScope(scope);
    assert.ok(report.classes.staging.some((finding) => finding.path === crashed));
    assert.equal(report.ok, true, "staging is a notice");
    const cleaned = await cleanupStaging(scope);
    assert.deepEqual(cleaned.removed, [crashed]);
    assert.equal(existsSync(crashed), false);
    assert.equal(existsSync(held), true, "the held file stays");
  },
);
