import assert from "node:assert/strict";
import { chmodSync, mkdirSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { retainTree, verifyTree } from "../src/index.js";
import { ManifestBuilder, manifestPath } from "../src/retention/store/manifest.js";
import { digestListing } from "../src/retention/digest/tree.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { canonicalJsonBytes } from "../src/core/canonical-json.js";
import type { ArtifactRefInput } from "../src/retention/index.js";
import { fixtureCopy, runOats, tempDir } from "./helpers.js";
import { expectRefusal } from "./support/refusals.js";

/**
 * A damaged revision is refused on its digest alone; the manifest written
 * beside it at publication only lets the refusal name the first path that
 * differs.
 */

async function retained() {
  const scope = tempDir();
  const receipt = await retainTree(scope, { kind: "capture", key: "nightly", source: fixtureCopy() });
  return { scope, receipt };
}

/** The integrity-mismatch with which verification refuses a damaged revision. */
const mismatchOf = (scope: string, receipt: ArtifactRefInput) =>
  expectRefusal(verifyTree(scope, receipt), "integrity-mismatch");

const damages: [string, (dir: string) => void, { path: string; change: string }][] = [
  [
    "a byte changed",
    (dir) => writeFileSync(join(dir, "skills/greeting.md"), "# Greeting\n\nSay hellO before anything else.\n"),
    { path: "skills/greeting.md", change: "content" },
  ],
  ["a file added", (dir) => writeFileSync(join(dir, "bin/extra.mjs"), "x"), { path: "bin/extra.mjs", change: "added" }],
  ["a file removed", (dir) => unlinkSync(join(dir, "package.json")), { path: "package.json", change: "removed" }],
  [
    "an exec bit flipped",
    (dir) => chmodSync(join(dir, "bin/hello.mjs"), 0o644),
    { path: "bin/hello.mjs", change: "exec-bit" },
  ],
  [
    "a symlink retargeted",
    (dir) => {
      unlinkSync(join(dir, "current.mjs"));
      symlinkSync("./bin/hello.mjs", join(dir, "current.mjs"));
    },
    { path: "current.mjs", change: "symlink-target" },
  ],
  [
    "a symlink replaced by a file",
    (dir) => {
      unlinkSync(join(dir, "current.mjs"));
      writeFileSync(join(dir, "current.mjs"), "x");
    },
    { path: "current.mjs", change: "type" },
  ],
];

for (const [what, damage, expected] of damages) {
  test(
    `Given a retained revision with ${what}, When it is verified, Then the ` + `refusal names the first differing path`,
    async () => {
      const { scope, receipt } = await retained();
      damage(receipt.dir);
      const error = await mismatchOf(scope, receipt);
      assert.deepEqual(error.details.firstDifference, expected);
      assert.match(
        error.message,
        new RegExp(`first difference: ${expected.path.replace(".", "\\.")}, ${expected.change}`),
      );
      assert.equal(error.details.expected, receipt.integrity.value);
      assert.notEqual(error.details.actual, receipt.integrity.value);
    },
  );
}

test(
  "Given a damaged revision without its manifest, When it is verified, " + "Then it is still refused, without a path",
  async () => {
    const { scope, receipt } = await retained();
    writeFileSync(join(receipt.dir, "skills/greeting.md"), "tampered");
    rmSync(manifestPath(receipt.dir));
    const error = await mismatchOf(scope, receipt);
    assert.equal(error.details.firstDifference, undefined);
  },
);

test("Given a malformed manifest, When a damaged revision is verified, Then it is refused without a path", async () => {
  const { scope, receipt } = await retained();
  writeFileSync(join(receipt.dir, "skills/greeting.md"), "tampered");
  writeFileSync(manifestPath(receipt.dir), "{not json");
  const error = await mismatchOf(scope, receipt);
  assert.equal(error.details.firstDifference, undefined);
});

test(
  "Given a manifest rewritten to match a damaged tree, When it is " +
    "verified, Then the digest still decides: refused",
  async () => {
    const { scope, receipt } = await retained();
    writeFileSync(join(receipt.dir, "skills/greeting.md"), "tampered");
    const rows = new ManifestBuilder();
    await digestListing(await walkTree(receipt.dir), [], { sink: rows, sinkOrder: "bytes" });
    writeFileSync(manifestPath(receipt.dir), canonicalJsonBytes({ schemaVersion: 1, rows: rows.rows }));
    const error = await mismatchOf(scope, receipt);
    assert.equal(error.details.firstDifference, undefined);
  },
);

test(
  "Given an intact revision, When it is verified, Then its manifest lists " + "every leaf with content digests",
  async () => {
    const { scope, receipt } = await retained();
    assert.equal((await verifyTree(scope, receipt)).status, "verified");
    const rows = new ManifestBuilder();
    await digestListing(await walkTree(receipt.dir), [], { sink: rows, sinkOrder: "bytes" });
    assert.deepEqual(
      JSON.parse((await import("node:fs")).readFileSync(manifestPath(receipt.dir), "utf8")).rows,
      rows.rows,
    );
    assert.ok(rows.rows.some((row) => row.type === "symlink" && row.path === "current.mjs"));
  },
);

test("every differing path is named: 20 listed in order, all counted; verify and fsck print them", async () => {
  const scope = tempDir();
  const source = join(tempDir(), "tree");
  mkdirSync(source);
  for (let i = 0; i < 30; i++) writeFileSync(join(source, `f${String(i).padStart(2, "0")}.txt`), `file ${i}\n`);
  const receipt = await retainTree(scope, { kind: "capture", key: "many", source });
  // 25 files changed and one removed: 26 differing paths.
  for (let i = 0; i < 25; i++) {
    const file = join(receipt.dir, `f${String(i).padStart(2, "0")}.txt`);
    chmodSync(file, 0o644);
    writeFileSync(file, `changed ${i}\n`);
  }
  unlinkSync(join(receipt.dir, "f29.txt"));
  const refusal = await mismatchOf(scope, receipt);
  assert.equal(refusal.details["differenceCount"], 26);
  const listed = refusal.details["differences"] as { path: string; change: string }[];
  assert.equal(listed.length, 20);
  assert.deepEqual(listed[0], { path: "f00.txt", change: "content" });
  assert.deepEqual(listed[19], { path: "f19.txt", change: "content" });
  assert.match(refusal.message, /first difference: f00\.txt, content; and 25 more paths\)/);

  const ref = ["many", "--kind", "capture", "--integrity", `${receipt.integrity.format}:${receipt.integrity.value}`];
  const verified = runOats(["--scope", scope, "verify", ...ref]);
  assert.equal(verified.status, 5, verified.stderr);
  assert.match(verified.stderr, /\n {2}content {8}f00\.txt\n/);
  assert.match(verified.stderr, /\n {2}content {8}f19\.txt\n/);
  assert.match(verified.stderr, /\n {2}\.\.\. and 6 more differing paths not listed\n/);
  const checked = runOats(["--scope", scope, "fsck"]);
  assert.equal(checked.status, 5, checked.stderr);
  assert.match(checked.stdout, /DAMAGED {2}capture many .*\n {4}content {8}f00\.txt\n/);
  assert.match(checked.stdout, /\n {4}\.\.\. and 6 more differing paths not listed\n/);
});
