/**
 * The read-back of a staged revision made of links to held files
 * (docs/design/retention.md, "The shared file layer", Publication): a file
 * linked from a held file verified in this publication is checked by
 * structure (same inode, size, mtime, read-only mode), not read again; a
 * file the pass wrote is hashed again. Anything that does not hold sends the
 * staged tree to the full read-back, whose hash is the verdict.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { retainTree, verifyTree } from "../src/index.js";
import { canonicalJsonBytes } from "../src/core/canonical-json.js";
import type { ProgressEvent } from "../src/retention/digest/progress.js";
import { digestListing } from "../src/retention/digest/tree.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { setFaultHook } from "../src/retention/store/faults.js";
import { ManifestBuilder, manifestPath } from "../src/retention/store/manifest.js";
import { tempDir } from "./helpers.js";

afterEach(() => setFaultHook(null));

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

function heldPath(scope: string, content: string, exec = false): string {
  const hex = sha256(content);
  return join(scope, ".agents/files/sha256", hex.slice(0, 2), `${hex.slice(2)}${exec ? ".x" : ""}`);
}

/** A source of many files sharing nothing, one executable, one symlink; `changed` differs in one file. */
function source(changed = false): string {
  const dir = tempDir("oats-read-back-src-");
  mkdirSync(join(dir, "sub"));
  for (let i = 0; i < 40; i++) writeFileSync(join(dir, "sub", `f${i}.txt`), `file ${i}\n`);
  writeFileSync(join(dir, "x.txt"), "shared\n");
  writeFileSync(join(dir, "run.sh"), "#!/bin/sh\n", { mode: 0o755 });
  writeFileSync(join(dir, "changing.txt"), changed ? "after\n" : "before\n");
  symlinkSync("sub/f1.txt", join(dir, "link"));
  return dir;
}

async function rowsOf(dir: string): Promise<ManifestBuilder["rows"]> {
  const builder = new ManifestBuilder();
  await digestListing(await walkTree(dir), [], { sink: builder, sinkOrder: "bytes" });
  return builder.rows;
}

/** The read-back's refusal: the staged tree does not hash to what the pass measured over the source. */
function stagedCopyDiffers(error: unknown): true {
  const refusal = error as { code?: string; details?: Record<string, unknown> };
  assert.equal(refusal.code, "integrity-mismatch", String(error));
  assert.equal(refusal.details?.["step"], "verify-staged");
  assert.equal(refusal.details?.["reason"], "staged-copy-differs");
  return true;
}

/** Run `act` once, the first time the publication reaches its read-back (the staging directory is its detail). */
function atReadBack(act: (staging: string) => void): void {
  let done = false;
  setFaultHook((step, staging) => {
    if (step !== "verify-staged" || done) return;
    done = true;
    act(staging);
  });
}

test(
  "a one-file change is read back by structure: no linked file is read again, the written one is, and the " +
    "manifest is the canonical document of the revision",
  async () => {
    const scope = tempDir();
    await retainTree(scope, { kind: "capture", key: "c", source: source() });
    const events: ProgressEvent[] = [];
    const second = await retainTree(
      scope,
      { kind: "capture", key: "c", source: source(true) },
      { onProgress: (event) => events.push(event) },
    );
    assert.equal(second.status, "retained");
    assert.deepEqual(second.files, { linked: 42, stored: 1, copied: 0 });
    const verify = events.filter((event) => event.phase === "verify");
    assert.ok(verify.length > 0, "the read-back is announced");
    assert.ok(
      verify.every((event) => event.bytes === 0),
      `no byte of the staged tree was read through the digest: ${JSON.stringify(verify)}`,
    );
    const rows = await rowsOf(second.dir);
    assert.ok(readFileSync(manifestPath(second.dir)).equals(canonicalJsonBytes({ schemaVersion: 1, rows })));
    await verifyTree(scope, { kind: "capture", key: "c", integrity: second.integrity });
  },
);

test(
  "a held file written after it was verified, before the read-back, is found: the staged tree is read in full " +
    "and refused, and nothing is published",
  async () => {
    const scope = tempDir();
    const first = await retainTree(scope, { kind: "capture", key: "c", source: source() });
    const held = heldPath(scope, "shared\n");
    atReadBack(() => {
      chmodSync(held, 0o644);
      writeFileSync(held, "sharex\n");
      chmodSync(held, 0o444);
    });
    await assert.rejects(retainTree(scope, { kind: "capture", key: "c", source: source(true) }), stagedCopyDiffers);
    const revisions = readdirSync(join(scope, ".agents/captures/artifacts/c/tree-exec-v1"));
    assert.deepEqual(
      revisions.filter((name) => !name.startsWith(".manifest-")),
      [first.dir.split("/").pop()],
      "only the first revision, and no staging, is left",
    );
  },
);

test(
  "a staged link replaced by another inode of the same size, mode and mtime is found: the staged tree is read " +
    "in full and refused",
  async () => {
    const scope = tempDir();
    await retainTree(scope, { kind: "capture", key: "c", source: source() });
    const held = heldPath(scope, "shared\n");
    // A whole-second mtime, so that the impostor can be given exactly the same one.
    utimesSync(held, 1_000_000_000, 1_000_000_000);
    atReadBack((staging) => {
      const impostor = join(staging, ".impostor");
      writeFileSync(impostor, "sharex\n", { mode: 0o444 });
      utimesSync(impostor, 1_000_000_000, 1_000_000_000);
      assert.equal(lstatSync(impostor).mtimeMs, lstatSync(held).mtimeMs);
      renameSync(impostor, join(staging, "x.txt"));
    });
    await assert.rejects(retainTree(scope, { kind: "capture", key: "c", source: source(true) }), stagedCopyDiffers);
  },
);

test("a file the pass wrote, changed before the read-back, is found and refused", async () => {
  const scope = tempDir();
  await retainTree(scope, { kind: "capture", key: "c", source: source() });
  atReadBack((staging) => {
    const path = join(staging, "changing.txt");
    chmodSync(path, 0o644);
    writeFileSync(path, "afteR\n");
    chmodSync(path, 0o444);
  });
  await assert.rejects(retainTree(scope, { kind: "capture", key: "c", source: source(true) }), stagedCopyDiffers);
});

test("a leaf added to the staged tree before the read-back is found and refused", async () => {
  const scope = tempDir();
  await retainTree(scope, { kind: "capture", key: "c", source: source() });
  atReadBack((staging) => writeFileSync(join(staging, "sub", "extra.txt"), "extra\n", { mode: 0o444 }));
  await assert.rejects(retainTree(scope, { kind: "capture", key: "c", source: source(true) }), stagedCopyDiffers);
});
