import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import {
  appendFileSync,
  closeSync,
  constants,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { digestTree, retainTree } from "../src/index.js";
import { SMALL_FILE_SIZE, readLeavesInOrder } from "../src/engine/file-reader.js";
import {
  CHANGED,
  META_FIELDS,
  NOT_REGULAR,
  TOO_LARGE,
  nativeReads,
  nativeReadsAvailable,
  nativeReadsStatus,
  setNativeReads,
} from "../src/engine/native-reads.js";
import { setReadHook } from "../src/engine/read-hook.js";
import { PER_FILE_FSYNC_LIMIT } from "../src/retention/store/staging-writer.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { REPO, addonSkip, tempDir } from "./helpers.js";
import { refusedAsChanged } from "./support/refusals.js";

/**
 * The small-file reads in C (native/read-small.c) against real files: the
 * same bytes and digests as the JavaScript reads, every refusal, names that
 * could leave the directory, a descriptor per name, the second thread's part
 * and the restart after a full buffer. test/change-detection.test.ts runs its changes through
 * both ways as well.
 */

afterEach(() => {
  setNativeReads(true);
  setReadHook(null);
});

const KiB = 1 << 10;

function addon() {
  const native = nativeReads();
  assert.ok(native, "the native reads are not built (npm run build compiles native/read-small.c with cc)");
  return native;
}

/** The descriptor of one directory for each of `names` (readSmallFiles takes one per name). */
function inOne(fd: number, names: string[]): [Int32Array, string[]] {
  return [new Int32Array(names.length).fill(fd), names];
}

function openDirectory(path: string): number {
  return openSync(path, constants.O_RDONLY | constants.O_DIRECTORY);
}

function entries(meta: Float64Array, count: number) {
  return Array.from({ length: count }, (_, at) => {
    const field = at * META_FIELDS;
    return { status: meta[field]!, second: meta[field + 1]!, size: meta[field + 2]!, mode: meta[field + 3]! };
  });
}

function openDescriptors(): number {
  return readdirSync("/proc/self/fd").length;
}

/** Whether the build's compiler ($CC, else cc) runs here. */
const compilerRuns = spawnSync(process.env["CC"] || "cc", ["--version"], { stdio: "ignore" }).status === 0;

test("Given a C compiler here, When the library loads, Then the native reads " +
  "npm run build compiled are there (CI has one; without it only the JavaScript reads run)", {
  skip:
    process.platform !== "linux"
      ? "not Linux: the addon makes Linux system calls and is built only there"
      : process.env["OATS_NATIVE_READS"] === "0"
        ? "OATS_NATIVE_READS=0: the suite runs without the addon"
        : !compilerRuns && "no C compiler here (cc): npm run build could not compile the addon",
}, () => {
  assert.equal(
    nativeReadsAvailable(),
    true,
    `dist/native/oats.node did not load (${JSON.stringify(nativeReadsStatus())}): did the compile fail?`,
  );
});

test("Given this build, When its dynamic section is read, Then the addon is " +
  "marked never to be unloaded (its detached threads may outlive a call or " +
  "a worker by a moment)", { skip: addonSkip() }, () => {
  const dynamic = execFileSync("readelf", ["-d", join(REPO, "dist", "native", "oats.node")], { encoding: "utf8" });
  assert.match(dynamic, /FLAGS_1[^\n]*NODELETE/, dynamic);
});

test("Given files of one directory, When read in one call, Then each file's " +
  "bytes, size and mode are reported in order", { skip: addonSkip() }, () => {
  const dir = tempDir("oats-native-");
  const contents = ["", "a", "hello\n", "x".repeat(5000)];
  contents.forEach((content, at) => {
    writeFileSync(join(dir, `f${at}`), content, { mode: at === 2 ? 0o755 : 0o644 });
  });
  const fd = openDirectory(dir);
  try {
    const buffer = Buffer.alloc(1 << 20);
    const meta = new Float64Array(16 * META_FIELDS);
    const count = addon().readSmallFiles(...inOne(fd, ["f0", "f1", "f2", "f3"]), buffer, SMALL_FILE_SIZE, meta, true);
    assert.equal(count, 4);
    const got = entries(meta, count);
    got.forEach((entry, at) => {
      assert.equal(entry.status, 0);
      assert.equal(entry.size, contents[at]!.length);
      assert.equal(buffer.subarray(entry.second, entry.second + entry.size).toString(), contents[at]);
    });
    assert.equal(got[2]!.mode, 0o755);
    assert.equal(got[1]!.mode, 0o644);
  } finally {
    closeSync(fd);
  }
});

test("Given 128 files, When read with a second thread and then by one, Then " +
  "every byte lands at its file's offset, in order, and the second thread " +
  "took part", { skip: addonSkip() }, () => {
  const dir = tempDir("oats-native-");
  const names = Array.from({ length: 128 }, (_, at) => `n${String(at).padStart(3, "0")}`);
  names.forEach((name, at) => {
    writeFileSync(join(dir, name), Buffer.alloc(100 + at * 37, at + 1));
  });
  const fd = openDirectory(dir);
  try {
    const buffer = Buffer.alloc(1 << 20);
    const meta = new Float64Array(128 * META_FIELDS);
    // Each thread takes the next name and the room its file needs: a file the helper read lies out of the running
    // order.
    let helped = false;
    for (let round = 0; round < 100 && !helped; round++) {
      const count = addon().readSmallFiles(...inOne(fd, names), buffer, SMALL_FILE_SIZE, meta, true);
      assert.equal(count, 128);
      const got = entries(meta, count);
      got.forEach((entry, at) => {
        assert.equal(entry.status, 0);
        assert.deepEqual(buffer.subarray(entry.second, entry.second + entry.size), readFileSync(join(dir, names[at]!)));
      });
      helped = got.some((entry, at) => entry.second !== (at === 0 ? 0 : got[at - 1]!.second + got[at - 1]!.size));
    }
    assert.ok(helped, "in 100 calls of 128 files the second thread never read one");
    // Without `split` one thread reads them all, each file right after the one before.
    assert.equal(addon().readSmallFiles(...inOne(fd, names), buffer, SMALL_FILE_SIZE, meta, false), 128);
    const alone = entries(meta, 128);
    alone.forEach((entry, at) => {
      assert.equal(entry.second, at === 0 ? 0 : alone[at - 1]!.second + alone[at - 1]!.size);
      assert.deepEqual(buffer.subarray(entry.second, entry.second + entry.size), readFileSync(join(dir, names[at]!)));
    });
  } finally {
    closeSync(fd);
  }
});

test("Given files of several directories, When read in one call with a " +
  "descriptor per name, Then each is read inside its own directory", { skip: addonSkip() }, () => {
  const dirs = [tempDir("oats-native-"), tempDir("oats-native-"), tempDir("oats-native-")];
  // The same name in every directory, with different bytes: a file read in the wrong directory shows.
  dirs.forEach((dir, at) => {
    writeFileSync(join(dir, "same"), `directory ${at}\n`);
  });
  const fds = dirs.map(openDirectory);
  try {
    const order = [2, 0, 1, 1, 2];
    const buffer = Buffer.alloc(1 << 20);
    const meta = new Float64Array(8 * META_FIELDS);
    const count = addon().readSmallFiles(
      Int32Array.from(order.map((at) => fds[at]!)),
      order.map(() => "same"),
      buffer,
      SMALL_FILE_SIZE,
      meta,
      false,
    );
    assert.equal(count, order.length);
    assert.deepEqual(
      entries(meta, count).map((entry) => buffer.subarray(entry.second, entry.second + entry.size).toString()),
      order.map((at) => `directory ${at}\n`),
    );
    const native = addon();
    assert.throws(
      () => native.readSmallFiles(Int32Array.from([fds[0]!]), ["same", "same"], buffer, SMALL_FILE_SIZE, meta, false),
      TypeError,
      "fewer descriptors than names",
    );
    assert.throws(
      () =>
        native.readSmallFiles(Int32Array.from([fds[0]!, -1]), ["same", "same"], buffer, SMALL_FILE_SIZE, meta, false),
      TypeError,
      "a negative descriptor",
    );
    assert.throws(
      () =>
        native.readSmallFiles(
          Float64Array.from([fds[0]!]) as unknown as Int32Array,
          ["same"],
          buffer,
          SMALL_FILE_SIZE,
          meta,
          false,
        ),
      TypeError,
      "not an Int32Array",
    );
  } finally {
    fds.forEach((fd) => {
      closeSync(fd);
    });
  }
});

test("Given files that fill the buffer, When read with and without a second " +
  "thread, Then only what was read in order counts and the next call goes " +
  "on from there", { skip: addonSkip() }, () => {
  const dir = tempDir("oats-native-");
  // 200 KiB each: five fill 1 MiB, and 70 names are enough for a second thread.
  const names = Array.from({ length: 70 }, (_, at) => `m${String(at).padStart(2, "0")}`);
  names.forEach((name, at) => {
    writeFileSync(join(dir, name), Buffer.alloc(200 * KiB, at + 1));
  });
  const fd = openDirectory(dir);
  try {
    const buffer = Buffer.alloc(1 << 20);
    const meta = new Float64Array(128 * META_FIELDS);
    const native = addon();
    for (const split of [true, false]) {
      let from = 0;
      const seen: number[] = [];
      while (from < names.length) {
        const count = native.readSmallFiles(...inOne(fd, names.slice(from)), buffer, SMALL_FILE_SIZE, meta, split);
        // Alone, exactly five fit; with two threads taking room as they go, the file after a taken one may be the one
        // that found none.
        if (split) assert.ok(count >= 1 && count <= 5, `from ${from}: ${count}`);
        else assert.equal(count, Math.min(5, names.length - from), `from ${from}`);
        const got = entries(meta, count);
        for (const entry of got) {
          assert.equal(entry.status, 0);
          seen.push(buffer[entry.second]!);
        }
        // No two files share a byte of the buffer.
        const spans = got
          .map((entry) => [entry.second, entry.second + entry.size] as const)
          .sort((a, b) => a[0] - b[0]);
        spans.forEach((span, at) => {
          assert.ok(at === 0 || spans[at - 1]![1] <= span[0], "overlapping files");
        });
        from += count;
      }
      assert.deepEqual(
        seen,
        names.map((_, at) => at + 1),
        `split ${split}`,
      );
    }
  } finally {
    closeSync(fd);
  }
});

test("Given names that could leave the directory, When read, Then each is " +
  "refused before any open (EINVAL, ENAMETOOLONG)", { skip: addonSkip() }, () => {
  const parent = tempDir("oats-native-");
  mkdirSync(join(parent, "inner"));
  writeFileSync(join(parent, "secret"), "outside");
  const fd = openDirectory(join(parent, "inner"));
  try {
    const meta = new Float64Array(4 * META_FIELDS);
    for (const [name, errno] of [
      ["..", 22],
      [".", 22],
      ["", 22],
      ["../secret", 22],
      ["a\0b", 22],
      ["x".repeat(256), 36],
    ] as const) {
      const count = addon().readSmallFiles(...inOne(fd, [name]), Buffer.alloc(1 << 20), SMALL_FILE_SIZE, meta, true);
      assert.equal(count, 1, name);
      assert.equal(meta[0], errno, JSON.stringify(name));
    }
  } finally {
    closeSync(fd);
  }
});

test("Given a symlink, a FIFO, a missing name and a large file, When read, " +
  "Then each stops the call with its status", { skip: addonSkip() }, () => {
  const dir = tempDir("oats-native-");
  writeFileSync(join(dir, "ok"), "fine");
  writeFileSync(join(dir, "target"), "t");
  symlinkSync("target", join(dir, "link"));
  execFileSync("mkfifo", [join(dir, "fifo")]);
  writeFileSync(join(dir, "large"), Buffer.alloc(SMALL_FILE_SIZE + 1));
  const fd = openDirectory(dir);
  try {
    const meta = new Float64Array(8 * META_FIELDS);
    const cases = [
      ["link", 40],
      ["fifo", NOT_REGULAR],
      ["gone", 2],
      ["large", TOO_LARGE],
    ] as const;
    for (const [name, status] of cases) {
      const count = addon().readSmallFiles(
        ...inOne(fd, ["ok", name, "ok"]),
        Buffer.alloc(1 << 20),
        SMALL_FILE_SIZE,
        meta,
        true,
      );
      assert.equal(count, 2, name);
      assert.equal(meta[0], 0);
      assert.equal(meta[META_FIELDS], status, name);
    }
  } finally {
    closeSync(fd);
  }
});

test("Given a hook that changes the file between read and fstat, When read, " +
  "Then the change is reported; a hook that throws propagates and leaks no " +
  "descriptor", { skip: addonSkip() }, () => {
  const dir = tempDir("oats-native-");
  writeFileSync(join(dir, "a"), "alpha");
  writeFileSync(join(dir, "b"), "beta");
  const fd = openDirectory(dir);
  try {
    const meta = new Float64Array(8 * META_FIELDS);
    const called: number[] = [];
    const count = addon().readSmallFiles(
      ...inOne(fd, ["a", "b"]),
      Buffer.alloc(1 << 20),
      SMALL_FILE_SIZE,
      meta,
      true,
      (at) => {
        called.push(at);
        if (at === 1) appendFileSync(join(dir, "b"), "!");
      },
    );
    assert.deepEqual(called, [0, 1]);
    assert.equal(count, 2);
    assert.equal(meta[META_FIELDS], CHANGED);
    assert.equal(meta[META_FIELDS + 1], 2, "size");

    const before = openDescriptors();
    assert.throws(
      () =>
        addon().readSmallFiles(...inOne(fd, ["a"]), Buffer.alloc(1 << 20), SMALL_FILE_SIZE, meta, true, () => {
          throw new Error("hook failed");
        }),
      /hook failed/,
    );
    assert.equal(openDescriptors(), before);
  } finally {
    closeSync(fd);
  }
});

test("Given arguments of the wrong kind, When called, Then it throws a TypeError and reads nothing", {
  skip: addonSkip(),
}, () => {
  const native = addon();
  const meta = new Float64Array(4 * META_FIELDS);
  assert.throws(
    () => native.readSmallFiles(3 as unknown as Int32Array, ["a"], Buffer.alloc(16), 16, meta, true),
    TypeError,
  );
  assert.throws(() => native.readSmallFiles(Int32Array.of(-1), ["a"], Buffer.alloc(16), 16, meta, true), TypeError);
  assert.throws(
    () => native.readSmallFiles(Int32Array.of(0), "a" as unknown as string[], Buffer.alloc(16), 16, meta, true),
    TypeError,
  );
  assert.throws(
    () =>
      native.readSmallFiles(
        Int32Array.of(0),
        ["a"],
        Buffer.alloc(16),
        16,
        new Float32Array(4) as unknown as Float64Array,
        true,
      ),
    TypeError,
  );
  assert.throws(
    () => native.readSmallFiles(Int32Array.of(0), [1 as unknown as string], Buffer.alloc(16), 16, meta, true),
    TypeError,
  );
  assert.throws(
    () => native.readSmallFiles(Int32Array.of(0), ["a"], Buffer.alloc(16), 16, meta, 1 as unknown as boolean),
    TypeError,
  );
});

test(
  "Given a tree of many small files, symlinks and files around the size " +
    "limits, When digested both ways, Then the digests are equal and no " +
    "descriptor is left open",
  async () => {
    const root = tempDir("oats-native-tree-");
    for (let dir = 0; dir < 5; dir++) {
      mkdirSync(join(root, `d${dir}`, "deeper"), { recursive: true });
      for (let at = 0; at < 60; at++)
        writeFileSync(
          join(root, `d${dir}`, `f${String(at).padStart(2, "0")}`),
          Buffer.alloc((at * 977 + dir * 13) % 9000, at),
        );
      symlinkSync("f01", join(root, `d${dir}`, "f30-link"));
      for (const size of [0, SMALL_FILE_SIZE - 1, SMALL_FILE_SIZE, SMALL_FILE_SIZE + 1, 3 * (1 << 20) + 5])
        writeFileSync(join(root, `d${dir}`, "deeper", `s${size}`), Buffer.alloc(size, size % 251));
    }
    for (let at = 0; at < 12; at++) writeFileSync(join(root, `half-${at}`), Buffer.alloc(200 * KiB + at, at));
    const before = openDescriptors();
    setNativeReads(true);
    const native = await digestTree(root, ["oats.tree-exec.v1", "oats.tree-legacy.v0"]);
    setNativeReads(false);
    const javascript = await digestTree(root, ["oats.tree-exec.v1", "oats.tree-legacy.v0"]);
    assert.deepEqual(native, javascript);
    assert.equal(openDescriptors(), before);
  },
);

test(
  "Given a file listed and then removed, When read both ways, Then each " +
    "refuses it as changed while reading, naming ENOENT, after the files " +
    "before it",
  async () => {
    for (const native of [true, false]) {
      setNativeReads(native);
      const root = tempDir("oats-native-gone-");
      for (let at = 0; at < 20; at++) writeFileSync(join(root, `f${String(at).padStart(2, "0")}`), `file ${at}`);
      const listing = await walkTree(root);
      unlinkSync(join(root, "f12"));
      const seen: string[] = [];
      const consumer = {
        whole: (entry: { path: string }) => void seen.push(entry.path),
        start() {},
        chunk() {},
        end() {},
        symlink() {},
      };
      const error = await refusedAsChanged(readLeavesInOrder(listing.leaves, consumer), "f12");
      assert.equal(error.details.errno, "ENOENT", native ? "native" : "JavaScript");
      assert.equal(seen.length, 12);
    }
  },
);

test(
  "Given a consumer that answers some files with a promise (a writer with " +
    "creates in flight), When a tree is read both ways, Then every file is " +
    "read once and handed over once, in order, with its bytes",
  async () => {
    const root = tempDir("oats-native-pending-");
    const expected = new Map<string, Buffer>();
    for (let dir = 0; dir < 3; dir++) {
      for (let at = 0; at < 150; at++) {
        const path = `d${dir}/f${String(at).padStart(3, "0")}`;
        // One file over the small-file limit in each directory: a run's last status, left to the general path.
        const bytes =
          at === 77
            ? Buffer.alloc(SMALL_FILE_SIZE + 3, dir + 1)
            : Buffer.from(`${path} ${"x".repeat((at * 37) % 3000)}`);
        mkdirSync(join(root, `d${dir}`), { recursive: true });
        writeFileSync(join(root, path), bytes);
        expected.set(path, bytes);
      }
    }
    const listing = await walkTree(root);
    for (const native of [true, false]) {
      setNativeReads(native);
      const reads = new Map<string, number>();
      setReadHook((path) => void reads.set(path, (reads.get(path) ?? 0) + 1));
      const handed: [string, Buffer][] = [];
      let current: { path: string; parts: Buffer[] } | null = null;
      let calls = 0;
      const later = () => new Promise<void>((resolve) => setImmediate(resolve));
      const consumer = {
        whole(entry: { path: string }, _info: unknown, data: Buffer) {
          handed.push([entry.path, Buffer.from(data)]);
          return ++calls % 3 === 0 ? later() : undefined;
        },
        start(entry: { path: string }) {
          current = { path: entry.path, parts: [] };
        },
        chunk(data: Buffer) {
          current!.parts.push(Buffer.from(data));
          return later();
        },
        end() {
          handed.push([current!.path, Buffer.concat(current!.parts)]);
        },
        symlink() {},
      };
      try {
        await readLeavesInOrder(listing.leaves, consumer);
      } finally {
        setReadHook(null);
      }
      const how = native ? "native" : "JavaScript";
      assert.deepEqual(
        handed.map(([path]) => path),
        [...expected.keys()],
        how,
      );
      for (const [path, bytes] of handed) assert.ok(bytes.equals(expected.get(path)!), `${how}: ${path}`);
      const again = [...reads].filter(([, count]) => count > 1);
      assert.deepEqual(again, [], `${how}: files read more than once`);
    }
  },
);

test(
  "Given a consumer that answers with promises, When a file in the middle " +
    "of a run was removed, Then it is refused both ways after exactly the " +
    "files before it",
  async () => {
    const root = tempDir("oats-native-pending-gone-");
    for (let at = 0; at < 120; at++) writeFileSync(join(root, `f${String(at).padStart(3, "0")}`), `file ${at}`);
    const listing = await walkTree(root);
    unlinkSync(join(root, "f090"));
    for (const native of [true, false]) {
      setNativeReads(native);
      const seen: string[] = [];
      const consumer = {
        whole: (entry: { path: string }) => (
          seen.push(entry.path), new Promise<void>((resolve) => setImmediate(resolve))
        ),
        start() {},
        chunk() {},
        end() {},
        symlink() {},
      };
      const error = await refusedAsChanged(readLeavesInOrder(listing.leaves, consumer), "f090");
      assert.equal(error.details.errno, "ENOENT", native ? "native" : "JavaScript");
      assert.equal(seen.length, 90, native ? "native" : "JavaScript");
    }
  },
);

test(
  "Given a tree under the per-file fsync limit, When retained both ways, " +
    "Then each file is read exactly twice: from the source as it is copied " +
    "(its fsyncs in flight never make the reads start over), then from the " +
    "staged copy",
  async () => {
    const source = tempDir("oats-native-perfile-");
    const files = Math.min(400, PER_FILE_FSYNC_LIMIT);
    for (let at = 0; at < files; at++) {
      mkdirSync(join(source, `d${at % 4}`), { recursive: true });
      writeFileSync(join(source, `d${at % 4}`, `f${String(at).padStart(3, "0")}`), `file ${at} `.repeat((at % 40) + 1));
    }
    for (const native of [true, false]) {
      setNativeReads(native);
      const scope = tempDir("oats-native-perfile-scope-");
      const reads = new Map<string, number>();
      setReadHook((path) => void reads.set(path, (reads.get(path) ?? 0) + 1));
      try {
        await retainTree(scope, { kind: "capability", key: "perfile", source });
      } finally {
        setReadHook(null);
      }
      const how = native ? "native" : "JavaScript";
      assert.equal(reads.size, files, how);
      assert.deepEqual(
        [...reads].filter(([, count]) => count !== 2),
        [],
        `${how}: files not read exactly twice`,
      );
    }
  },
);
