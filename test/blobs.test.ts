import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { BLOBS_DIR, blobPath, putBlob, readBlob } from "../src/retention/store/blobs.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

const CONFIG = Buffer.from("schemaVersion: 1\nfallback: confidential\n");
const sha = (bytes: Uint8Array) => `sha256-${createHash("sha256").update(bytes).digest("hex")}`;

describe("blobs: pinned configuration bytes (oats.bytes.v1)", () => {
  test("Given config bytes, When put and read back, Then the digest is their sha256 and the bytes round-trip", () => {
    const scope = tempDir();
    const put = putBlob(scope, CONFIG);
    assert.equal(put.digest, sha(CONFIG));
    assert.equal(put.status, "written");
    assert.equal(put.path, blobPath(scope, put.digest));
    assert.ok(put.path.endsWith(join(".agents", "blobs", put.digest)));
    assert.deepEqual(readFileSync(put.path), CONFIG);
    assert.equal(readFileSync(join(scope, ...BLOBS_DIR, ".gitignore"), "utf8"), "*\n");
    assert.deepEqual(readBlob(scope, put.digest), CONFIG);
    assert.deepEqual(readBlob(scope, `oats.bytes.v1:${put.digest}`), CONFIG);
    // Nothing but the blob and the managed .gitignore: no staging leftovers.
    assert.deepEqual(
      snapshotTree(join(scope, ...BLOBS_DIR)).map((row) => row.split(" ")[1]),
      [".gitignore", put.digest],
    );
  });

  test("Given empty bytes, When put, Then they are a blob like any other", () => {
    const scope = tempDir();
    const put = putBlob(scope, new Uint8Array(0));
    assert.equal(put.digest, sha(Buffer.alloc(0)));
    assert.equal(readBlob(scope, put.digest).length, 0);
  });

  test("Given a blob already pinned, When the same bytes are put again, Then it is kept and unchanged", () => {
    const scope = tempDir();
    const first = putBlob(scope, CONFIG);
    const before = snapshotTree(scope);
    const second = putBlob(scope, Buffer.from(CONFIG));
    assert.equal(second.status, "kept");
    assert.equal(second.digest, first.digest);
    assert.deepEqual(snapshotTree(scope), before);
  });

  test(
    "Given a damaged blob at the digest's name, When the right bytes are " +
      "put, Then integrity-mismatch and the damaged blob is left alone",
    () => {
      const scope = tempDir();
      const { path, digest } = putBlob(scope, CONFIG);
      chmodSync(path, 0o644);
      writeFileSync(path, "tampered\n");
      const before = snapshotTree(scope);
      assert.throws(
        () => putBlob(scope, CONFIG),
        refusal("integrity-mismatch", (error) => {
          assert.equal(error.details["expected"], digest);
          assert.equal(error.details["actual"], sha(Buffer.from("tampered\n")));
        }),
      );
      assert.deepEqual(snapshotTree(scope), before);
      assert.equal(readFileSync(path, "utf8"), "tampered\n");
    },
  );

  test(
    "Given a blob tampered after it was pinned, When read, Then " + "integrity-mismatch names expected and actual",
    () => {
      const scope = tempDir();
      const { path, digest } = putBlob(scope, CONFIG);
      writeFileSync(path, "fallback: public\n");
      assert.throws(
        () => readBlob(scope, digest),
        refusal("integrity-mismatch", (error) => {
          assert.equal(error.details["expected"], digest);
          assert.equal(error.details["actual"], sha(Buffer.from("fallback: public\n")));
        }),
      );
    },
  );

  test("Given no blob, When read, Then blob-not-found, with or without a blob store, and nothing is created", () => {
    const scope = tempDir();
    const digest = sha(CONFIG);
    assert.throws(() => readBlob(scope, digest), refusal("blob-not-found"));
    assert.deepEqual(snapshotTree(scope), []);
    putBlob(scope, Buffer.from("other"));
    assert.throws(() => readBlob(scope, digest), refusal("blob-not-found"));
  });

  test("Given malformed digests, When read or located, Then invalid-input and nothing is created", () => {
    const scope = tempDir();
    const hex = sha(CONFIG).slice("sha256-".length);
    for (const bad of [
      `sha256-${hex.slice(0, 12)}`,
      `sha256-${hex.toUpperCase()}`,
      `SHA256-${hex}`,
      hex,
      `sha512-${hex}`,
      `sha256-${hex}/../x`,
      "",
      42,
    ]) {
      assert.throws(() => readBlob(scope, bad as string), refusal("invalid-input"), String(bad));
      assert.throws(() => blobPath(scope, bad as string), refusal("invalid-input"), String(bad));
    }
    assert.deepEqual(snapshotTree(scope), []);
  });

  test(
    "Given a symlinked blob store, When put or read, Then " +
      "invalid-artifact-store and nothing is written through it",
    () => {
      const scope = tempDir();
      const elsewhere = tempDir();
      mkdirSync(join(scope, ".agents"));
      symlinkSync(elsewhere, join(scope, ...BLOBS_DIR));
      const before = snapshotTree(scope);
      assert.throws(() => putBlob(scope, CONFIG), refusal("invalid-artifact-store"));
      assert.throws(() => readBlob(scope, sha(CONFIG)), refusal("invalid-artifact-store"));
      assert.deepEqual(snapshotTree(scope), before);
      assert.deepEqual(snapshotTree(elsewhere), []);
    },
  );

  test("Given a symlinked .agents, When put, Then invalid-artifact-store before anything is created", () => {
    const scope = tempDir();
    const elsewhere = tempDir();
    symlinkSync(elsewhere, join(scope, ".agents"));
    assert.throws(() => putBlob(scope, CONFIG), refusal("invalid-artifact-store"));
    assert.deepEqual(snapshotTree(elsewhere), []);
  });

  test(
    "Given a symlink or a directory at a blob's path, When read or put, Then " +
      "invalid-artifact-store and it is left alone",
    () => {
      const scope = tempDir();
      putBlob(scope, Buffer.from("seed"));
      const target = join(tempDir(), "config.yaml");
      writeFileSync(target, CONFIG);
      const path = blobPath(scope, sha(CONFIG));
      symlinkSync(target, path);
      assert.throws(() => readBlob(scope, sha(CONFIG)), refusal("invalid-artifact-store"));
      const before = snapshotTree(scope);
      assert.throws(() => putBlob(scope, CONFIG), refusal("invalid-artifact-store"));
      assert.deepEqual(snapshotTree(scope), before);
      rmSync(path);
      mkdirSync(path);
      assert.throws(() => readBlob(scope, sha(CONFIG)), refusal("invalid-artifact-store"));
      assert.throws(() => putBlob(scope, CONFIG), refusal("invalid-artifact-store"));
    },
  );

  test("Given a blob larger than the read limit, When read, Then it is refused and not returned", () => {
    const scope = tempDir();
    const { digest } = putBlob(scope, CONFIG);
    assert.throws(() => readBlob(scope, digest, { limit: 4 }), refusal("invalid-artifact"));
    assert.deepEqual(readBlob(scope, digest, { limit: CONFIG.length }), CONFIG);
  });

  test(
    "Given a foreign .gitignore in the blob store, When put, Then " + "invalid-artifact-store and nothing is written",
    () => {
      const scope = tempDir();
      mkdirSync(join(scope, ...BLOBS_DIR), { recursive: true });
      writeFileSync(join(scope, ...BLOBS_DIR, ".gitignore"), "node_modules\n");
      const before = snapshotTree(scope);
      assert.throws(() => putBlob(scope, CONFIG), refusal("invalid-artifact-store"));
      assert.deepEqual(snapshotTree(scope), before);
      assert.equal(existsSync(blobPath(scope, sha(CONFIG))), false);
    },
  );

  test("Given input that is not bytes, When put, Then invalid-input and nothing is created", () => {
    const scope = tempDir();
    assert.throws(() => putBlob(scope, "text" as unknown as Uint8Array), refusal("invalid-input"));
    assert.deepEqual(snapshotTree(scope), []);
  });
});
