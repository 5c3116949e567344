/** The manifest a retain writes, now encoded as the staged copy is read back, is byte for byte the canonical document
 * of its rows. */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { retainTree } from "../src/index.js";
import { canonicalJson, canonicalJsonBytes } from "../src/core/canonical-json.js";
import { digestListing } from "../src/retention/digest/tree.js";
import type { SymlinkEntry } from "../src/engine/index.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { ManifestRecorder, encodeManifestRow } from "../src/retention/store/manifest-encoding.js";
import { ManifestBuilder, manifestPath } from "../src/retention/store/manifest.js";
import { tempDir } from "./helpers.js";

/** Rows enough to fill several of the recorder's 64 KiB chunks, with names that need escapes and multi-byte UTF-8. */
function awkwardTree(): string {
  const root = tempDir("oats-manifest-src-");
  for (let d = 0; d < 6; d++) mkdirSync(join(root, `dir-${d}-é`));
  for (let i = 0; i < 1500; i++) {
    const path = join(
      root,
      `dir-${i % 6}-é`,
      `f-${String(i).padStart(4, "0")}-"q"\\-\u2028-\u{1F600}-${"n".repeat(i % 40)}.txt`,
    );
    writeFileSync(path, i % 50 === 0 ? "" : `content ${i}\n`);
    if (i % 7 === 0) chmodSync(path, 0o755);
  }
  const first = `f-0001-"q"\\-\u2028-\u{1F600}-${"n".repeat(1)}.txt`;
  symlinkSync(`../dir-1-é/${first}`, join(root, "dir-0-é", "link-\t-é"));
  symlinkSync(`dir-1-é/${first}`, join(root, "z-link"));
  return root;
}

async function rowsOf(dir: string): Promise<ManifestBuilder["rows"]> {
  const builder = new ManifestBuilder();
  await digestListing(await walkTree(dir), [], { sink: builder, sinkOrder: "bytes" });
  return builder.rows;
}

test(
  "Given a retained tree of 1,500 awkward names, When its manifest is " +
    "read, Then it is exactly canonicalJsonBytes({ schemaVersion: 1, rows }) " +
    "of the revision",
  async () => {
    const scope = tempDir();
    const receipt = await retainTree(scope, { kind: "capture", key: "awkward", source: awkwardTree() });
    assert.equal(receipt.status, "retained");
    const written = readFileSync(manifestPath(receipt.dir));
    const rows = await rowsOf(receipt.dir);
    assert.equal(rows.length, 1502);
    assert.ok(written.length > 3 * (64 << 10), "the document spans several chunks");
    assert.ok(written.equals(canonicalJsonBytes({ schemaVersion: 1, rows })));
  },
);

test("Given an empty tree, When it is retained, Then its manifest is the document with no rows", async () => {
  const scope = tempDir();
  const receipt = await retainTree(scope, { kind: "capture", key: "empty", source: tempDir("oats-manifest-empty-") });
  assert.equal(readFileSync(manifestPath(receipt.dir), "utf8"), '{"rows":[],"schemaVersion":1}\n');
});

test("Given a row longer than a chunk, When the recorder encodes it between others, Then no byte is lost", () => {
  const recorder = new ManifestRecorder();
  const link = (path: string, target: string) =>
    ({ type: "symlink", name: path, path, absolute: `/x/${path}`, target }) as unknown as SymlinkEntry;
  const rows = [
    { path: "a", type: "symlink" as const, target: "short" },
    { path: "b", type: "symlink" as const, target: "é".repeat(40_000) },
    { path: "c", type: "symlink" as const, target: "t".repeat(70_000) },
    { path: "d", type: "symlink" as const, target: "end" },
  ];
  for (const row of rows) recorder.symlink(link(row.path, row.target));
  assert.ok(recorder.bytes().equals(canonicalJsonBytes({ schemaVersion: 1, rows })));
});

test(
  "Given files 0755 and 0644 and a symlink, When a retain writes its " +
    "manifest, Then each row says what the file is, measured independently " +
    "(size, exec bit, SHA-256, link target)",
  async () => {
    const { createHash } = await import("node:crypto");
    const source = tempDir("oats-manifest-rows-");
    writeFileSync(join(source, "run.sh"), "#!/bin/sh\necho hi\n");
    chmodSync(join(source, "run.sh"), 0o755);
    writeFileSync(join(source, "data.txt"), "plain data\n");
    chmodSync(join(source, "data.txt"), 0o654); // group and other exec bits do not make a file executable here
    symlinkSync("data.txt", join(source, "link"));
    const receipt = await retainTree(tempDir(), { kind: "capture", key: "rows", source });
    const manifest = JSON.parse(readFileSync(manifestPath(receipt.dir), "utf8")) as { rows: unknown[] };
    const sha = (text: string) => createHash("sha256").update(text).digest("hex");
    assert.deepEqual(manifest.rows, [
      { exec: false, path: "data.txt", sha256: sha("plain data\n"), size: 11, type: "file" },
      { path: "link", target: "data.txt", type: "symlink" },
      { exec: true, path: "run.sh", sha256: sha("#!/bin/sh\necho hi\n"), size: 18, type: "file" },
    ]);
  },
);

test(
  "Given rows with escapes, multi-byte names and both exec bits, When each is encoded, Then it is canonicalJson's " +
    "text, and a lone surrogate is refused as canonicalJson refuses it",
  () => {
    const rows = [
      { path: 'a/"q"\\-\u2028-\u{1F600}-\t.txt', type: "file", exec: true, size: 0, sha256: "0".repeat(64) },
      { path: "é/ß", type: "file", exec: false, size: 123456789, sha256: "f".repeat(64) },
      { path: "l\u007f\u0001", type: "symlink", target: '../\u{10FFFF}"\\/x' },
    ] as const;
    for (const row of rows) assert.equal(`${encodeManifestRow(row)}\n`, canonicalJson(row));
    assert.throws(() => encodeManifestRow({ path: "bad-\ud800", type: "file", exec: false, size: 1, sha256: "0" }), {
      code: "invalid-input",
    });
    assert.throws(() => encodeManifestRow({ path: "x", type: "symlink", target: "\udc00" }), { code: "invalid-input" });
  },
);
