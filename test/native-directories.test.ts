import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import {
  closeSync,
  constants,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterEach, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { digestTree } from "../src/index.js";
import { nativeReads, setNativeReads } from "../src/engine/native-reads.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { REPO, tempDir, addonSkip } from "./helpers.js";

/**
 * The walk's directory calls in C (native/directories.c,
 * src/engine/native-directories.ts): the same listing, digests
 * and refusals as the calls from JavaScript, names that could leave the
 * directory refused before any call, every errno carried out, and no
 * descriptor closed by anyone but its opener (Node warns in a worker
 * thread when it closes what it did not open). test/walk-race.test.ts runs
 * its swaps both ways too.
 */

afterEach(() => setNativeReads(true));

const ERRNO = { ENOENT: 2, EBADF: 9, ENOTDIR: 20, EINVAL: 22, ENAMETOOLONG: 36 };

function addon() {
  const native = nativeReads();
  assert.ok(native, "dist/native/oats.node did not load");
  return native;
}

/** Names whose order differs between UTF-16 and UTF-8, a directory that is a prefix of its siblings, symlinks, an
 * empty directory. */
function mixedTree(): string {
  const root = tempDir("oats-native-dirs-");
  for (const dir of ["a", "a/b", "a-b", "ä", "emoji-😀", "empty", "deep/er/still"])
    mkdirSync(join(root, dir), { recursive: true });
  const files = [
    "a/x",
    "a/b/y",
    "a-b/z",
    "a.b",
    "ä/file",
    "emoji-😀/ﬀ",
    "\uE000",
    "😀",
    "deep/er/still/leaf",
    "top.txt",
  ];
  files.forEach((file, at) => {
    writeFileSync(join(root, file), `${file}\n${"w".repeat(at * 97)}`);
  });
  symlinkSync("a/x", join(root, "link-to-a-x"));
  symlinkSync("../../top.txt", join(root, "deep/er/up"));
  return root;
}

function listingOf(listing: Awaited<ReturnType<typeof walkTree>>) {
  return {
    leaves: listing.leaves.map((leaf) => [leaf.type, leaf.path, leaf.type === "symlink" ? leaf.target : ""]),
    directories: listing.directories.map((directory) => [directory.path, directory.dev, directory.ino, directory.mode]),
  };
}

test(
  "Given a tree of mixed names, symlinks and an empty directory, When " +
    "walked and digested both ways, Then the listings and every format's " +
    "digest are equal",
  async () => {
    const root = mixedTree();
    const formats = ["oats.tree-exec.v1", "oats.tree-legacy.v0", "oats.package-payload-exec.v1"] as const;
    const native = { listing: listingOf(await walkTree(root)), digests: await digestTree(root, formats) };
    setNativeReads(false);
    const fromJavaScript = { listing: listingOf(await walkTree(root)), digests: await digestTree(root, formats) };
    assert.deepEqual(native, fromJavaScript);
    assert.ok(native.listing.leaves.some(([, path]) => path === "emoji-😀/ﬀ"));
  },
);

test(
  "Given a FIFO, a socket or a name that is not UTF-8, When walked both " + "ways, Then each is the same refusal",
  async (t) => {
    const cases: { name: string; make: (dir: string) => void; reason: string }[] = [
      { name: "FIFO", make: (dir) => execFileSync("mkfifo", [join(dir, "pipe")]), reason: "special-file" },
      {
        name: "non-UTF-8 name",
        make: (dir) => writeFileSync(Buffer.concat([Buffer.from(`${dir}/bad-`), Buffer.from([0xff, 0xfe])]), "x"),
        reason: "non-utf8-name",
      },
    ];
    if (spawnSync("python3", ["-c", "pass"]).status === 0) {
      cases.push({
        name: "socket",
        make: (dir) =>
          execFileSync("python3", [
            "-c",
            "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])",
            join(dir, "sock"),
          ]),
        reason: "special-file",
      });
    } else {
      t.diagnostic("python3 is not here to make a socket; the socket case is left out");
    }
    for (const { name, make, reason } of cases) {
      const root = tempDir("oats-native-refuse-");
      mkdirSync(join(root, "sub"));
      writeFileSync(join(root, "sub", "ok"), "ok\n");
      make(join(root, "sub"));
      const refusals = [];
      for (const native of [true, false]) {
        setNativeReads(native);
        const error = await walkTree(root).then(
          () => null,
          (caught: unknown) => caught,
        );
        assert.ok(error instanceof OatsError, `${name}, native ${native}: ${String(error)}`);
        refusals.push({ code: error.code, reason: error.details.reason, type: error.details.type });
      }
      assert.deepEqual(refusals[0], refusals[1], name);
      assert.equal(refusals[0]!.reason, reason, name);
    }
  },
);

test("Given names that could leave the directory, a symlink, a file and a " +
  "missing name, When opened as a child directory, Then each is refused " +
  "with its errno and nothing is opened", { skip: addonSkip() }, () => {
  const root = tempDir("oats-native-open-");
  mkdirSync(join(root, "child"));
  writeFileSync(join(root, "file"), "x");
  symlinkSync("child", join(root, "link"));
  const fd = openSync(root, constants.O_RDONLY | constants.O_DIRECTORY);
  const descriptors = readdirSync("/proc/self/fd").length;
  const stat = new Float64Array(4);
  try {
    const native = addon();
    const cases: [string, number, number][] = [
      ["", ERRNO.EINVAL, 1],
      [".", ERRNO.EINVAL, 1],
      ["..", ERRNO.EINVAL, 1],
      ["child/..", ERRNO.EINVAL, 1],
      ["x".repeat(256), ERRNO.ENAMETOOLONG, 1],
      ["link", ERRNO.ENOTDIR, 1], // O_DIRECTORY | O_NOFOLLOW on a symlink
      ["file", ERRNO.ENOTDIR, 1],
      ["missing", ERRNO.ENOENT, 1],
    ];
    for (const [name, errno, step] of cases) {
      stat.fill(0);
      assert.equal(native.openDirectoryAt(fd, name, stat), -errno, JSON.stringify(name).slice(0, 40));
      assert.equal(stat[3], step);
    }
    assert.equal(readdirSync("/proc/self/fd").length, descriptors, "nothing was left open");
    const child = native.openDirectoryAt(fd, "child", stat);
    assert.ok(child >= 0);
    const expected = statSync(join(root, "child"));
    assert.deepEqual([...stat.subarray(0, 3)], [expected.dev, expected.ino, expected.mode]);
    assert.equal(native.closeDirectory(child), 0);
    assert.equal(readdirSync("/proc/self/fd").length, descriptors, "closeDirectory closed it");
    assert.equal(native.closeDirectory(child), -ERRNO.EBADF);
    assert.equal(native.listDirectory(child), -ERRNO.EBADF);
    assert.throws(() => native.openDirectoryAt(-1, "child", stat), TypeError);
    assert.throws(() => native.openDirectoryAt(fd, "child", new Float64Array(3)), TypeError);
    assert.throws(() => native.listDirectory("3" as never), TypeError);
  } finally {
    closeSync(fd);
  }
});

test("Given a directory listed natively, When listed, Then every entry but . " +
  "and .. comes with its type, from the start of the directory", { skip: addonSkip() }, () => {
  const root = mixedTree();
  const fd = openSync(root, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    const native = addon();
    for (let round = 0; round < 2; round++) {
      const listed = native.listDirectory(fd);
      assert.ok(typeof listed === "object");
      const names = listed.names.toString("utf8").split("\0").slice(0, -1);
      const byName = Object.fromEntries(names.map((name, at) => [name, listed.types[at]]));
      const expected = readdirSync(root, { withFileTypes: true });
      assert.equal(
        names.length,
        expected.length,
        `round ${round}: the same entries as readdir, listed again from the start`,
      );
      for (const entry of expected)
        assert.equal(byName[entry.name], entry.isDirectory() ? 4 : entry.isSymbolicLink() ? 10 : 8, entry.name);
      // Each entry's d_ino is its st_ino (fsck's layer walk takes a link to a held file by it: revision-walk.ts).
      assert.equal(listed.inodes.length, names.length);
      for (const [at, name] of names.entries())
        assert.equal(listed.inodes[at], lstatSync(join(root, name)).ino, `${name}: d_ino`);
    }
  } finally {
    closeSync(fd);
  }
});

test(
  "Given a digest in a worker thread, When its directories are opened " +
    "natively, Then Node is never asked to close one (no warning)",
  () => {
    const root = mixedTree();
    const script = `
    const { Worker } = require("node:worker_threads");
    const worker = new Worker(${JSON.stringify(
      `import(${JSON.stringify(`${REPO}/dist/index.js`)}).then((m) => ` +
        `m.digestTree(${JSON.stringify(root)})).then((d) => ` +
        `require("node:worker_threads").parentPort.postMessage(d))`,
    )}, { eval: true });
    worker.on("message", (digests) => { console.log(JSON.stringify(digests)); worker.terminate(); });
  `;
    const run = spawnSync(process.execPath, ["-e", script], { encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /oats\.tree-exec\.v1/);
    assert.equal(run.stderr, "", "no warning");
  },
);
