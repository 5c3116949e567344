import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, renameSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { OatsError } from "../src/errors.js";
import { digestTree } from "../src/index.js";
import { killLaneWorker, laneStats, LANE_MIN_FILES, lanesReady, setLaneMode, setLaneTestHook } from "../src/retention/digest/lanes.js";
import { setReadHook } from "../src/retention/digest/read-hook.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { digestListing } from "../src/retention/digest/tree.js";
import { acquireWorker, releaseWorker } from "../src/retention/parallel/pool.js";
import { tempDir } from "./helpers.js";

/**
 * A tree of many small files is read on two lanes (src/retention/digest/lanes.ts):
 * a worker thread makes the system calls for part of the files and the calling
 * thread hashes every byte in order. The digest must be the serial one; every
 * refusal the serial read gives for a leaf changed after the walk must still be
 * given, for the same leaf; a worker that dies or a pass that is aborted must
 * not leave a wrong digest or a hung read behind.
 */

const EXEC = "oats.tree-exec.v1";
const FORMATS = ["oats.tree-legacy.v0", EXEC, "oats.package-payload-exec.v1"] as const;

afterEach(() => {
  setLaneMode("auto");
  setReadHook(null);
});

/** Two lanes from the start: the worker is up (under tsx a new one takes long to load). */
async function lanesOn(): Promise<void> {
  setLaneMode("always");
  await lanesReady();
}

/** Busy-waits on the calling thread's own reads, so that the worker reads most of the tree ahead of it. */
function slowCaller(us: number): void {
  setReadHook(() => {
    const until = performance.now() + us / 1000;
    while (performance.now() < until);
  });
}

/** ~3,000 leaves: small files of many sizes, empty ones, executables, symlinks, files larger than a slot or the small-file limit, node_modules. */
function laneTree(files = 3000): string {
  const root = tempDir("oats-lanes-");
  for (let d = 0; d < 12; d++) mkdirSync(join(root, `d${d}`, "node_modules", "p"), { recursive: true });
  for (let i = 0; i < files; i++) {
    const d = i % 12;
    const where = i % 5 === 0 ? join(`d${d}`, "node_modules", "p") : `d${d}`;
    const path = join(root, where, `f${String(i).padStart(5, "0")}.txt`);
    writeFileSync(path, i % 97 === 0 ? "" : `${i}:${"abcdefgh".repeat(i % 300)}\n`);
    if (i % 7 === 0) chmodSync(path, 0o755);
  }
  writeFileSync(join(root, "d3", "big-300k.bin"), Buffer.alloc(300 << 10, 3)); // over the small-file limit: the calling thread's
  writeFileSync(join(root, "d5", "f01000.txu"), Buffer.alloc(200 << 10, 5)); // small, but fills most of a slot
  writeFileSync(join(root, "d5", "f01000.txv"), Buffer.alloc(200 << 10, 6));
  writeFileSync(join(root, "d5", "f01000.txw"), Buffer.alloc(200 << 10, 7)); // no longer fits with the two before it
  symlinkSync("f00001.txt", join(root, "d1", "link-a"));
  symlinkSync("../d2", join(root, "d7", "link-dir"));
  return root;
}

/** oats.tree-exec.v1 written out from the contract, independent of src/: records sorted by the UTF-8 bytes of the path. */
function referenceExec(root: string): string {
  const leaves: { path: Buffer; record: Buffer[] }[] = [];
  const visit = (dir: string, rel: string): void => {
    for (const name of readdirSync(dir)) {
      const path = rel ? `${rel}/${name}` : name;
      const stats = lstatSync(join(dir, name));
      if (stats.isDirectory()) visit(join(dir, name), path);
      else {
        const pathBytes = Buffer.from(path);
        const u64 = (n: number) => {
          const b = Buffer.alloc(8);
          b.writeBigUInt64BE(BigInt(n));
          return b;
        };
        if (stats.isSymbolicLink()) {
          const target = Buffer.from(readlinkSync(join(dir, name)));
          leaves.push({ path: pathBytes, record: [Buffer.from("S"), u64(pathBytes.length), pathBytes, u64(target.length), target] });
        } else {
          const content = readFileSync(join(dir, name));
          leaves.push({ path: pathBytes, record: [Buffer.from("F"), u64(pathBytes.length), pathBytes, Buffer.from([stats.mode & 0o100 ? 1 : 0]), u64(content.length), content] });
        }
      }
    }
  };
  visit(root, "");
  leaves.sort((a, b) => Buffer.compare(a.path, b.path));
  const hash = createHash("sha256").update(`${EXEC}\0`);
  for (const leaf of leaves) for (const piece of leaf.record) hash.update(piece);
  return `sha256-${hash.digest("hex")}`;
}

function refusal(error: unknown): Record<string, unknown> {
  assert.ok(error instanceof OatsError, String(error));
  return { code: error.code, ...error.details };
}

async function outcome(promise: Promise<unknown>): Promise<unknown> {
  try {
    return { digests: await promise };
  } catch (error) {
    return { refused: refusal(error) };
  }
}

test("two lanes give the serial digest in every format, and the worker really read part of the tree", async () => {
  const root = laneTree();
  setLaneMode("never");
  const serial = await digestTree(root, [...FORMATS]);
  assert.equal(serial[EXEC], referenceExec(root));
  await lanesOn();
  const before = laneStats();
  assert.deepEqual(await digestTree(root, [...FORMATS]), serial);
  slowCaller(50);
  assert.deepEqual(await digestTree(root, [...FORMATS]), serial);
  const after = laneStats();
  assert.ok(after.passes >= before.passes + 2, "every pass without a sink took two lanes");
  assert.ok(after.fromWorker - before.fromWorker > 1000, `the worker read ${after.fromWorker - before.fromWorker} leaves`);
});

test("auto takes two lanes only from LANE_MIN_FILES files on, and not while a pool worker is held", async (t) => {
  if (availableParallelism() < 2) return t.skip("one core: auto never takes a second lane here");
  const small = laneTree(LANE_MIN_FILES - 200);
  const large = laneTree(LANE_MIN_FILES + 100);
  let before = laneStats().passes;
  await digestTree(small);
  assert.equal(laneStats().passes, before, "a small tree stays on one thread");
  await digestTree(large);
  assert.equal(laneStats().passes, before + 1, "a large one takes two lanes");
  const worker = acquireWorker();
  try {
    before = laneStats().passes;
    await digestTree(large);
    assert.equal(laneStats().passes, before, "the other core is the pool's");
  } finally {
    await releaseWorker(worker);
  }
});

test("a leaf swapped after the walk, where the worker reads, is refused exactly as the serial read refuses it", async (t) => {
  const cases: { name: string; swap: (root: string, path: string) => void }[] = [
    {
      name: "a FIFO",
      swap: (root, path) => {
        unlinkSync(join(root, path));
        execFileSync("mkfifo", [join(root, path)]);
      },
    },
    {
      name: "a symlink to a file outside",
      swap: (root, path) => {
        const outside = join(tempDir("oats-lanes-outside-"), "secret");
        writeFileSync(outside, "not part of the tree\n");
        unlinkSync(join(root, path));
        symlinkSync(outside, join(root, path));
      },
    },
    {
      name: "a directory above it replaced by a symlink to a look-alike",
      swap: (root, path) => {
        const dir = join(root, path.split("/")[0]!);
        const lookAlike = join(tempDir("oats-lanes-alike-"), "d");
        execFileSync("cp", ["-a", dir, lookAlike]);
        renameSync(dir, `${dir}.moved`);
        symlinkSync(lookAlike, dir);
      },
    },
    {
      name: "a directory above it replaced by a copy (other inode)",
      swap: (root, path) => {
        const dir = join(root, path.split("/")[0]!);
        execFileSync("cp", ["-a", dir, `${dir}.copy`]);
        renameSync(dir, `${dir}.moved`);
        renameSync(`${dir}.copy`, dir);
      },
    },
  ];
  try {
    execFileSync("mkfifo", [join(tempDir(), "probe")]);
  } catch (error) {
    return t.skip(`mkfifo is not available here: ${String(error)}`);
  }
  for (const { name, swap } of cases) {
    const results: unknown[] = [];
    for (const mode of ["never", "always"] as const) {
      const root = laneTree();
      const listing = await walkTree(root);
      const files = listing.leaves.filter((leaf) => leaf.type === "file");
      // Late in the order: by then the worker is ahead of the slowed calling thread.
      const target = files[files.length - 40]!.path;
      swap(root, target);
      setLaneMode(mode);
      if (mode === "always") {
        await lanesOn();
        slowCaller(50);
      }
      const before = laneStats().fromWorker;
      results.push(await outcome(digestListing(listing, [EXEC])));
      setReadHook(null);
      if (mode === "always") assert.ok(laneStats().fromWorker > before, `${name}: the worker took part`);
    }
    const [serial, lanes] = results as [{ refused?: Record<string, unknown> }, unknown];
    assert.ok(serial.refused, `${name}: the serial read refuses (${JSON.stringify(serial)})`);
    assert.equal(serial.refused["code"], "invalid-artifact", name);
    assert.deepEqual(lanes, serial, `${name}: two lanes refuse the same way`);
  }
});

test("a file that changes between the worker's read and its check is not hashed from the worker's bytes", async () => {
  // The calling thread may take the file over when the worker is not scheduled in time (a loaded machine): then again.
  let hooked = 0;
  for (let attempt = 0; attempt < 6 && hooked === 0; attempt++) {
    const root = laneTree();
    const listing = await walkTree(root);
    const files = listing.leaves.filter((leaf) => leaf.type === "file");
    const target = files[files.length - 100]!.path;
    await lanesOn();
    slowCaller(100);
    // In the worker, right after it read the file: one byte appended, for real.
    setLaneTestHook({ appendAfterRead: target });
    const result = await outcome(digestListing(listing, [EXEC]));
    setLaneTestHook(null);
    setReadHook(null);
    if (readFileSync(join(root, target)).at(-1) === 0x2b) hooked += 1;
    // Whoever read it last, the digest is of the tree as it is now, never of the bytes the worker read before the change.
    assert.deepEqual(result, { digests: { [EXEC]: referenceExec(root) } });
  }
  assert.equal(hooked, 1, "the worker read the file and its hook ran");
});

test("a worker that dies mid-tree leaves its leaves to the calling thread: the digest is still the serial one", async () => {
  const root = laneTree();
  setLaneMode("never");
  const serial = await digestTree(root);
  await lanesOn();
  let reads = 0;
  let readsAtKill = 0;
  let killed: Promise<number> | undefined;
  const start = laneStats().fromWorker;
  setReadHook(() => {
    reads += 1;
    const until = performance.now() + 0.05;
    while (performance.now() < until);
    if (!killed && laneStats().fromWorker - start >= 256) {
      readsAtKill = reads;
      killed = killLaneWorker();
    }
  });
  const before = laneStats();
  assert.deepEqual(await digestTree(root), serial);
  setReadHook(null);
  assert.ok(killed, "the worker was running when it was killed");
  await killed;
  const after = laneStats();
  assert.ok(after.fromWorker > before.fromWorker, "it had read some leaves first");
  assert.ok(reads - readsAtKill > 1500, `the calling thread read the rest itself (${reads - readsAtKill} reads after the kill)`);
  // The next pass gets a new worker.
  await lanesReady();
  assert.deepEqual(await digestTree(root), serial);
  assert.ok(laneStats().fromWorker > after.fromWorker);
});

test("an aborted pass stops both lanes, and the next pass is right", async () => {
  const root = laneTree();
  setLaneMode("never");
  const serial = await digestTree(root);
  await lanesOn();
  const controller = new AbortController();
  let reads = 0;
  setReadHook(() => {
    if (++reads === 200) controller.abort();
  });
  await assert.rejects(digestTree(root, [EXEC], { signal: controller.signal }), (error: unknown) => {
    assert.ok(error instanceof OatsError, String(error));
    assert.equal(error.details["reason"], "interrupted");
    return true;
  });
  setReadHook(null);
  const before = laneStats();
  assert.deepEqual(await digestTree(root), serial);
  assert.ok(laneStats().passes === before.passes + 1);
});
