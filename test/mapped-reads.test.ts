/**
 * Large files hashed from a mapping of the page cache (native/hash-mapped.c,
 * src/retention/digest/mapped-reads.ts): the addon's SHA-256 streams give
 * Node's digests, a pass beside a worker lane takes the rest of a large file
 * that way with the same digest as every other read, and a file that shrinks
 * under its mapping is a refusal, not a crash, while a SIGBUS that is not
 * ours still ends the process.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, chownSync, closeSync, openSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { digestTree } from "../src/index.js";
import { largeFilesReadInline, largeFilesReadMapped } from "../src/retention/digest/file-reader.js";
import { nativeReads, nativeReadsAvailable, setNativeReads, type NativeAddon } from "../src/retention/digest/native-reads.js";
import { faultError } from "../src/retention/digest/mapped-reads.js";
import { acquireWorker, releaseWorker } from "../src/retention/parallel/pool.js";
import { patterned, refusedAsChanged, tempDir, treeOfFiles } from "./helpers.js";

const EFAULT = 14;
const MiB = 1 << 20;

function addon(): NativeAddon {
  assert.ok(nativeReadsAvailable(), "the addon is built (npm run build)");
  const native = nativeReads();
  assert.ok(native !== null);
  return native;
}

function stream(native: NativeAddon) {
  const hash = native.createHash();
  assert.ok(hash !== null, "this node exports its OpenSSL's EVP functions");
  return hash;
}

/** The digest of a tree with every core free to copy (no lane held): the ring or the overlapped read, never a mapping. */
const besideALane = async <T>(body: () => Promise<T>): Promise<T> => {
  const worker = acquireWorker();
  try {
    return await body();
  } finally {
    await releaseWorker(worker);
  }
};

test("the addon's SHA-256 streams give the digests of node:crypto, fed in any pieces, and a stream is done once digested", () => {
  const native = addon();
  const data = patterned(3 * MiB + 17, 7);
  for (const cuts of [[], [0], [1, 64, 65, 4096], [MiB, 2 * MiB + 3]]) {
    const hash = stream(native);
    let from = 0;
    for (const cut of [...cuts, data.length]) {
      native.hashUpdate(hash, data.subarray(from, cut));
      from = cut;
    }
    assert.ok(native.hashDigest(hash).equals(createHash("sha256").update(data).digest()), `cut at ${cuts.join(",")}`);
    assert.throws(() => native.hashDigest(hash), /done/);
    assert.throws(() => native.hashUpdate(hash, data), /done/);
  }
});

test("hashMapped feeds exactly the bytes of the range asked for, from any offset, to every stream given", () => {
  const native = addon();
  const file = join(tempDir("oats-mapped-"), "data.bin");
  const data = patterned(5 * MiB + 1234, 11);
  writeFileSync(file, data);
  const fd = openSync(file, "r");
  try {
    const mapping = native.mapFile(fd, data.length, true);
    assert.notEqual(typeof mapping, "number");
    if (typeof mapping === "number") return;
    for (const [position, length] of [[0, data.length], [4096, MiB], [1000, 3 * MiB + 5], [data.length - 1, 1]] as const) {
      const first = stream(native);
      const second = stream(native);
      native.hashUpdate(second, Buffer.from("prefix"));
      assert.equal(native.hashMapped([first, second], mapping, position, length), 0);
      const expected = data.subarray(position, position + length);
      assert.ok(native.hashDigest(first).equals(createHash("sha256").update(expected).digest()), `${position}+${length}`);
      assert.ok(native.hashDigest(second).equals(createHash("sha256").update("prefix").update(expected).digest()), `${position}+${length}, second stream`);
    }
    assert.throws(() => native.hashMapped([stream(native)], mapping, data.length - 10, 11), RangeError);
    // A handle of the other kind is refused, never read as the one expected.
    assert.throws(() => native.hashMapped([mapping as never], mapping, 0, 1), /not a hash/);
    assert.throws(() => native.hashMapped([stream(native)], stream(native) as never, 0, 1), /not a mapping/);
    assert.throws(() => native.hashUpdate(mapping as never, data), /not a hash/);
    native.unmapFile(mapping);
    assert.throws(() => native.hashMapped([stream(native)], mapping, 0, 1), RangeError, "unmapped: refused, never a read of freed memory");
  } finally {
    closeSync(fd);
  }
});

test("a file shorter than its mapping: -EFAULT from mapFile when faulted in, and from hashMapped (a SIGBUS caught) when not; the process lives on", () => {
  const native = addon();
  const file = join(tempDir("oats-mapped-short-"), "data.bin");
  const data = patterned(8 * MiB, 13);
  writeFileSync(file, data);
  const fd = openSync(file, "r");
  try {
    truncateSync(file, MiB + 100);
    assert.equal(native.mapFile(fd, data.length, true), -EFAULT);
    const mapping = native.mapFile(fd, data.length, false);
    assert.notEqual(typeof mapping, "number");
    if (typeof mapping === "number") return;
    const whole = stream(native);
    assert.equal(native.hashMapped([whole], mapping, 0, MiB), 0, "the part still there is read");
    assert.ok(native.hashDigest(whole).equals(createHash("sha256").update(data.subarray(0, MiB)).digest()));
    assert.equal(native.hashMapped([stream(native)], mapping, 4 * MiB, MiB), -EFAULT, "past the end: the fault is caught");
    assert.equal(native.hashMapped([stream(native)], mapping, 0, 3 * MiB), -EFAULT, "across the end");
    // Caught again and again: the handler stays, and the signal is not left blocked.
    assert.equal(native.hashMapped([stream(native)], mapping, 2 * MiB, 4096), -EFAULT);
    native.unmapFile(mapping);
  } finally {
    closeSync(fd);
  }
});

test("a SIGBUS that is not a mapped hash's still ends the process, as if the handler were not there", () => {
  addon();
  const file = join(tempDir("oats-mapped-signal-"), "data.bin");
  writeFileSync(file, patterned(64 * 1024, 17));
  // The handler is installed by the first mapFile; then a SIGBUS from outside any hashMapped.
  const script = `
    const native = require(${JSON.stringify(join(process.cwd(), "dist", "native", "oats.node"))});
    const fd = require("node:fs").openSync(${JSON.stringify(file)}, "r");
    const mapping = native.mapFile(fd, 65536, true);
    if (typeof mapping === "number") process.exit(3);
    process.kill(process.pid, "SIGBUS");
    setTimeout(() => process.exit(0), 2000);
  `;
  const child = spawnSync(process.execPath, ["-e", script], { encoding: "utf8", timeout: 30_000 });
  assert.equal(child.status, null, `exit ${child.status}: ${child.stderr}`);
  assert.equal(child.signal, "SIGBUS");
});

test("once the application handles SIGBUS itself (process.on), no file is mapped (-ENOSYS): a fault could not be caught; the reader reads instead", () => {
  addon();
  const file = join(tempDir("oats-mapped-taken-"), "data.bin");
  writeFileSync(file, patterned(64 * 1024, 37));
  const script = `
    const native = require(${JSON.stringify(join(process.cwd(), "dist", "native", "oats.node"))});
    const fd = require("node:fs").openSync(${JSON.stringify(file)}, "r");
    const before = native.mapFile(fd, 65536, true);
    process.on("SIGBUS", () => {});
    const after = native.mapFile(fd, 65536, true);
    console.log(JSON.stringify([typeof before, after]));
  `;
  const child = spawnSync(process.execPath, ["-e", script], { encoding: "utf8", timeout: 30_000 });
  assert.equal(child.status, 0, child.stderr);
  assert.deepEqual(JSON.parse(child.stdout), ["object", -38]);
});

test("a pass in an application that took SIGBUS for itself after the addon's first mapping reads its large files instead of mapping them, to the same digest", async () => {
  addon();
  const root = await treeOfFiles("oats-mapped-fallback-", { "a.bin": patterned(6 * MiB + 3, 43), "small.txt": Buffer.from("small\n") });
  const src = (path: string) => JSON.stringify(new URL(`../src/${path}`, import.meta.url).href);
  // A handler installed before the addon's is the one the addon hands other signals to (ours stays in front): mapping goes on.
  const script = `
    const { digestTree } = await import(${src("index.ts")});
    const { largeFilesReadInline, largeFilesReadMapped } = await import(${src("retention/digest/file-reader.ts")});
    const { acquireWorker, releaseWorker } = await import(${src("retention/parallel/pool.ts")});
    const worker = acquireWorker();
    try {
      const before = await digestTree(${JSON.stringify(root)});
      const mappedBefore = largeFilesReadMapped();
      process.on("SIGBUS", () => {});
      const digests = await digestTree(${JSON.stringify(root)});
      console.log(JSON.stringify({ same: JSON.stringify(before) === JSON.stringify(digests), digests, mappedBefore, mapped: largeFilesReadMapped(), inline: largeFilesReadInline() }));
    } finally {
      await releaseWorker(worker);
    }`;
  const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000, killSignal: "SIGKILL" });
  assert.equal(child.status, 0, child.stderr);
  const seen = JSON.parse(child.stdout) as unknown;
  assert.deepEqual(seen, { same: true, digests: await digestTree(root), mappedBefore: 1, mapped: 1, inline: 1 });
});

test("beside a worker lane a large file's rest is hashed from a mapping, to the digest every other read gives", async () => {
  addon();
  const root = await treeOfFiles("oats-mapped-tree-", {
    "a.bin": patterned(6 * MiB + 3, 19),
    "b/c.bin": patterned(2 * MiB + 256 * 1024, 23),
    "small.txt": Buffer.from("small\n"),
    // Under MAPPED_MIN_REST past its head: read inline, a mapping would cost more than the copy.
    "d.bin": patterned(MiB, 29),
  });
  const alone = await digestTree(root, ["oats.tree-exec.v1", "oats.package-payload-exec.v1"]);
  const mappedBefore = largeFilesReadMapped();
  const inlineBefore = largeFilesReadInline();
  const beside = await besideALane(() => digestTree(root, ["oats.tree-exec.v1", "oats.package-payload-exec.v1"]));
  assert.equal(largeFilesReadMapped(), mappedBefore + 2, "a.bin and b/c.bin from their mappings");
  assert.equal(largeFilesReadInline(), inlineBefore + 1, "d.bin inline");
  assert.deepEqual(beside, alone);
  setNativeReads(false);
  try {
    const plain = await besideALane(() => digestTree(root, ["oats.tree-exec.v1", "oats.package-payload-exec.v1"]));
    assert.equal(largeFilesReadMapped(), mappedBefore + 2, "without the addon: read, never mapped");
    assert.deepEqual(plain, alone);
  } finally {
    setNativeReads(true);
  }
  assert.ok(readFileSync(join(root, "small.txt")).equals(Buffer.from("small\n")));
});

test("a file truncated while its mapping is hashed is refused as changed, and the process goes on", async () => {
  addon();
  const root = await treeOfFiles("oats-mapped-shrink-", { "big.bin": patterned(24 * MiB, 31) });
  let truncated = false;
  const mappedBefore = largeFilesReadMapped();
  await refusedAsChanged(
    besideALane(() =>
      digestTree(root, ["oats.tree-exec.v1"], {
        // Progress is told from inside the hashing, every 4 MiB: the file shrinks between two pieces of its mapping.
        onProgress: (event) => {
          if (!truncated && event.bytes >= 4 * MiB) {
            truncated = true;
            truncateSync(join(root, "big.bin"), 5 * MiB);
          }
        },
      }),
    ),
    "big.bin",
  );
  assert.ok(truncated);
  assert.equal(largeFilesReadMapped(), mappedBefore + 1, "the mapped read was the one refused");
});

const IS_ROOT = process.getuid?.() === 0;
const NOBODY = 65534;

test("another local user (nobody, for real) who owns a source file and truncates it while its mapping is hashed gets a refusal, not a crash", { skip: IS_ROOT ? false : "needs root to run the attacker as nobody" }, async () => {
  addon();
  const root = await treeOfFiles("oats-mapped-attacker-", { "theirs.bin": patterned(24 * MiB, 41) });
  const target = join(root, "theirs.bin");
  chmodSync(root, 0o755);
  chownSync(target, NOBODY, NOBODY);
  let attacked: ReturnType<typeof spawnSync> | null = null;
  const mappedBefore = largeFilesReadMapped();
  await refusedAsChanged(
    besideALane(() =>
      digestTree(root, ["oats.tree-exec.v1"], {
        onProgress: (event) => {
          if (attacked === null && event.bytes >= 4 * MiB) {
            attacked = spawnSync("truncate", ["-s", String(3 * MiB), target], { uid: NOBODY, gid: NOBODY, encoding: "utf8" });
          }
        },
      }),
    ),
    "theirs.bin",
  );
  assert.ok(attacked !== null);
  assert.equal((attacked as ReturnType<typeof spawnSync>).status, 0, String((attacked as ReturnType<typeof spawnSync>).stderr));
  assert.equal(largeFilesReadMapped(), mappedBefore + 1);
});

test("a fault in a mapping is a change when the file is now shorter, and otherwise the read error it stands for (EIO), never a change", () => {
  const shrank = faultError("a/big.bin", 8 * MiB, 5 * MiB);
  assert.equal(shrank.code, "invalid-artifact");
  assert.equal(shrank.details.reason, "changed-while-reading");
  const failed = faultError("a/big.bin", 8 * MiB, 8 * MiB);
  assert.equal(failed.code, "internal-error");
  assert.equal(failed.details.errno, "EIO");
  assert.equal(failed.details.path, "a/big.bin");
});
