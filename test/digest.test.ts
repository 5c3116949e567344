/**
 * Digest formats (contract section 2): the published vectors, then trees of
 * our own checked against an independent reference implementation written
 * here, then the walk's refusals, a real concurrent writer, canonical JSON and
 * integrity parsing.
 */
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import {
  chmodSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { OatsError } from "../src/core/errors.js";
import {
  PACKAGE_PAYLOAD_EXEC,
  TREE_EXEC,
  TREE_FORMATS,
  TREE_LEGACY,
  bytesDigest,
  canonicalJson,
  canonicalJsonBytes,
  digestTree,
  jsonDigest,
  listRetained,
  parseIntegrity,
  retainTree,
  type IntegrityInput,
  type TreeFormat,
} from "../src/retention/index.js";
import { makeVectorTree, snapshotTree, tempDir } from "./helpers.js";
import { assertRefusal, contractKind, refusal } from "./support/refusals.js";

// ---------------------------------------------------------------------------
// Refusal assertions (test/support/refusals.ts): kinds as contract section 6 spells them.

async function rejectsWith(
  promise: Promise<unknown>,
  code: string,
  details: Record<string, unknown> = {},
): Promise<void> {
  await assert.rejects(promise, refusal(code, details, contractKind));
}

function throwsWith(fn: () => unknown, code: string, details: Record<string, unknown> = {}): void {
  assert.throws(fn, refusal(code, details, contractKind));
}

// ---------------------------------------------------------------------------
// Reference implementation: contract section 2 read literally. Whole files,
// synchronous calls, no shared code with src/.

const collator = new Intl.Collator("en-US");
const u64 = (n: number): Buffer => {
  const out = Buffer.alloc(8);
  out.writeBigUInt64BE(BigInt(n));
  return out;
};

interface RefLeaf {
  path: string;
  absolute: string;
}

/** Legacy: depth-first pre-order, siblings sorted by the en-US collator. */
function refLegacy(root: string): string {
  const hash = createHash("sha256");
  const visit = (dir: string, rel: string): void => {
    const names = readdirSync(dir);
    names.sort((a, b) => {
      const order = collator.compare(a, b);
      // The contract is silent on names the collator deems equal; trees here avoid them.
      if (order === 0 && a !== b) throw new Error(`reference: collation tie between ${a} and ${b}`);
      return order;
    });
    for (const name of names) {
      const absolute = join(dir, name);
      const path = rel === "" ? name : `${rel}/${name}`;
      const stats = lstatSync(absolute);
      if (stats.isDirectory()) visit(absolute, path);
      else if (stats.isSymbolicLink())
        hash.update(
          Buffer.concat([
            Buffer.from(path),
            Buffer.from("\0symlink\0"),
            Buffer.from(readlinkSync(absolute)),
            Buffer.from("\0"),
          ]),
        );
      else if (stats.isFile())
        hash.update(
          Buffer.concat([Buffer.from(path), Buffer.from("\0file\0"), readFileSync(absolute), Buffer.from("\0")]),
        );
      else throw new Error(`reference: special file ${path}`);
    }
  };
  visit(root, "");
  return `sha256-${hash.digest("hex")}`;
}

/** Every file and symlink; `skip(name, isRoot)` drops an entry and everything below it. */
function refLeaves(root: string, skip: (name: string, atRoot: boolean) => boolean): RefLeaf[] {
  const out: RefLeaf[] = [];
  const visit = (dir: string, rel: string): void => {
    for (const name of readdirSync(dir)) {
      if (skip(name, rel === "")) continue;
      const absolute = join(dir, name);
      const path = rel === "" ? name : `${rel}/${name}`;
      if (lstatSync(absolute).isDirectory()) visit(absolute, path);
      else out.push({ path, absolute });
    }
  };
  visit(root, "");
  return out;
}

function refExecLike(format: string, leaves: RefLeaf[]): string {
  const hash = createHash("sha256");
  hash.update(Buffer.from(`${format}\0`));
  const sorted = [...leaves].sort((a, b) => Buffer.compare(Buffer.from(a.path), Buffer.from(b.path)));
  for (const leaf of sorted) {
    const path = Buffer.from(leaf.path);
    const stats = lstatSync(leaf.absolute);
    if (stats.isSymbolicLink()) {
      const target = Buffer.from(readlinkSync(leaf.absolute));
      hash.update(Buffer.concat([Buffer.from("S"), u64(path.length), path, u64(target.length), target]));
    } else if (stats.isFile()) {
      const content = readFileSync(leaf.absolute);
      const exec = stats.mode & 0o100 ? 1 : 0;
      hash.update(
        Buffer.concat([Buffer.from("F"), u64(path.length), path, Buffer.from([exec]), u64(content.length), content]),
      );
    } else throw new Error(`reference: special file ${leaf.path}`);
  }
  return `sha256-${hash.digest("hex")}`;
}

function refDigests(root: string): Record<TreeFormat, string> {
  return {
    [TREE_LEGACY]: refLegacy(root),
    [TREE_EXEC]: refExecLike(
      TREE_EXEC,
      refLeaves(root, () => false),
    ),
    [PACKAGE_PAYLOAD_EXEC]: refExecLike(
      PACKAGE_PAYLOAD_EXEC,
      refLeaves(root, (name, atRoot) => name === "node_modules" || (atRoot && name === "oats-lock.json")),
    ),
  } as Record<TreeFormat, string>;
}

async function allDigests(dir: string) {
  return digestTree(dir, [...TREE_FORMATS]);
}

async function assertMatchesReference(dir: string): Promise<Record<TreeFormat, string>> {
  const expected = refDigests(dir);
  assert.deepEqual(await allDigests(dir), expected);
  // Each format asked for alone gives the same answer as asked for together.
  for (const format of TREE_FORMATS) assert.deepEqual(await digestTree(dir, [format]), { [format]: expected[format] });
  return expected;
}

/** Write a file, creating its parents, with an explicit mode. */
function put(root: string, path: string, content: string | Buffer = `${path}\n`, mode = 0o644): void {
  const absolute = join(root, path);
  mkdirSync(join(absolute, ".."), { recursive: true });
  writeFileSync(absolute, content);
  chmodSync(absolute, mode);
}

function link(root: string, path: string, target: string): void {
  const absolute = join(root, path);
  mkdirSync(join(absolute, ".."), { recursive: true });
  symlinkSync(target, absolute);
}

// ---------------------------------------------------------------------------

const VECTOR = {
  plain: {
    [TREE_LEGACY]: "sha256-11069eff8ab56c6e67ad72ac7d88a77764601caedb91c39739cf6ac05afedb50",
    [TREE_EXEC]: "sha256-d9cbed1fc235b8c4d7a37df9f882cbce8156ecd5e1c706260414385e3bcf6422",
    [PACKAGE_PAYLOAD_EXEC]: "sha256-93864b677ebca4950bd756da73c81cb62060bbfcce5f50e294ba1369c0979185",
  },
  exec: {
    [TREE_LEGACY]: "sha256-11069eff8ab56c6e67ad72ac7d88a77764601caedb91c39739cf6ac05afedb50",
    [TREE_EXEC]: "sha256-8bb6e6c01df8995c89bbe5afab1413693bcbd170567386d2fac6b4b383dee6d1",
    [PACKAGE_PAYLOAD_EXEC]: "sha256-96d15d85cf07313fc0c7ddc317779897ce66b18c2a1f3143d45eb1ca68ba795b",
  },
};

describe("vectors (vectors/README.md)", () => {
  for (const variant of ["plain", "exec"] as const) {
    test(`tree T, bin/run.mjs ${variant === "exec" ? "0755" : "0644"}, all three formats`, async () => {
      const dir = makeVectorTree(join(tempDir(), "t"), variant === "exec");
      assert.deepEqual(await allDigests(dir), VECTOR[variant]);
      // The reference implementation agrees with the vectors, so it can be trusted for the trees below.
      assert.deepEqual(refDigests(dir), VECTOR[variant]);
      rmSync(join(dir, "empty-dir"), { recursive: true });
      assert.deepEqual(await allDigests(dir), VECTOR[variant], "removing the empty directory changes nothing");
    });
  }

  test("digestTree defaults to oats.tree-exec.v1", async () => {
    const dir = makeVectorTree(join(tempDir(), "t"));
    assert.deepEqual(await digestTree(dir), { [TREE_EXEC]: VECTOR.plain[TREE_EXEC] });
  });

  test("canonical JSON vector", () => {
    const value = { b: 1, a: [true, null, "é\n"], A: { z: -0, y: 1.5 }, ä: "x", Z: [] };
    const expected = '{"A":{"y":1.5,"z":0},"Z":[],"a":[true,null,"é\\n"],"b":1,"ä":"x"}\n';
    assert.equal(canonicalJson(value), expected);
    assert.deepEqual(canonicalJsonBytes(value), Buffer.from(expected, "utf8"));
    assert.equal(jsonDigest(value), "sha256-0addcae5a30c31ca65479d6dd21891fa391958fbab5b1086f3557f965b23d2d9");
    assert.equal(
      bytesDigest(Buffer.from(expected, "utf8")),
      "sha256-0addcae5a30c31ca65479d6dd21891fa391958fbab5b1086f3557f965b23d2d9",
    );
  });
});

describe("own trees against the reference implementation", () => {
  test("non-ASCII names and names whose collation and byte order differ", async () => {
    const dir = join(tempDir(), "names");
    for (const name of [
      "B",
      "a-b",
      "a-c",
      "_x",
      "Z",
      "z",
      "é.txt",
      "f.txt",
      "e.txt",
      "😀",
      "Ä",
      "10",
      "9",
      ".hidden",
      "A.md",
      "a.md",
    ])
      put(dir, name);
    put(dir, "a/b");
    put(dir, "日本/語.md");
    put(dir, "日本/a.md");
    put(dir, "é/x");
    link(dir, "zz-link", "日本/語.md");
    link(dir, "😀-link", "é.txt");
    mkdirSync(join(dir, "empty/deeper"), { recursive: true });

    // The tree is only a test of ordering if the two orders really differ.
    const collated = refLeaves(dir, () => false).map((leaf) => leaf.path);
    const byBytes = [...collated].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
    const preorder: string[] = [];
    const visit = (d: string, rel: string) => {
      for (const name of readdirSync(d).sort(collator.compare)) {
        const path = rel ? `${rel}/${name}` : name;
        if (lstatSync(join(d, name)).isDirectory()) visit(join(d, name), path);
        else preorder.push(path);
      }
    };
    visit(dir, "");
    assert.notDeepEqual(preorder, byBytes);
    assert.ok(
      preorder.indexOf("a/b") < preorder.indexOf("a-c") && byBytes.indexOf("a-c") < byBytes.indexOf("a/b"),
      "a/b vs a-c differ between orders",
    );

    const digests = await assertMatchesReference(dir);
    rmSync(join(dir, "empty"), { recursive: true });
    assert.deepEqual(await allDigests(dir), digests, "empty directories are invisible");
  });

  test("renaming one file to a name that sorts elsewhere changes every format", async () => {
    const one = join(tempDir(), "one");
    const two = join(tempDir(), "two");
    put(one, "a", "same\n");
    put(one, "b", "other\n");
    put(two, "b", "same\n");
    put(two, "a", "other\n");
    const [d1, d2] = [await assertMatchesReference(one), await assertMatchesReference(two)];
    for (const format of TREE_FORMATS) assert.notEqual(d1[format], d2[format], format);
  });

  test("names the collator deems equal (NFC vs NFD) still give one digest", async () => {
    const dir = join(tempDir(), "nf");
    put(dir, "\u00e9", "precomposed\n");
    put(dir, "e\u0301", "decomposed\n");
    assert.equal(collator.compare("\u00e9", "e\u0301"), 0);
    // Library's tie-break is the byte order; the reference sorts ties the same way here.
    const hash = createHash("sha256");
    for (const name of ["e\u0301", "\u00e9"].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))) {
      hash.update(Buffer.concat([Buffer.from(`${name}\0file\0`), readFileSync(join(dir, name)), Buffer.from("\0")]));
    }
    assert.deepEqual(await digestTree(dir, [TREE_LEGACY]), { [TREE_LEGACY]: `sha256-${hash.digest("hex")}` });
  });

  test("node_modules at any depth: skipped by package-payload, included by tree-exec", async () => {
    const dir = join(tempDir(), "pkg");
    put(dir, "index.js");
    put(dir, "node_modules/dep/index.js");
    put(dir, "lib/node_modules/dep/deep/x.js");
    put(dir, "a/b/c/node_modules/y.js");
    put(dir, "node_modules_not/kept.js");
    put(dir, "xnode_modules");
    put(dir, "lib/util.js");
    link(dir, "lib/dep-link", "node_modules/dep/deep/x.js"); // a symlink INTO node_modules is kept
    link(dir, "dep-main", "node_modules/dep/index.js");
    put(dir, "oats-lock.json", "{}\n"); // root: skipped by payload
    put(dir, "sub/oats-lock.json", "{}\n"); // nested: kept
    put(dir, "empty.txt", "");
    const digests = await assertMatchesReference(dir);

    // Changing only what the payload skips changes tree-exec and legacy but not the payload digest.
    writeFileSync(join(dir, "lib/node_modules/dep/deep/x.js"), "changed\n");
    writeFileSync(join(dir, "oats-lock.json"), '{"changed":true}\n');
    const after = await assertMatchesReference(dir);
    assert.equal(after[PACKAGE_PAYLOAD_EXEC], digests[PACKAGE_PAYLOAD_EXEC]);
    assert.notEqual(after[TREE_EXEC], digests[TREE_EXEC]);
    assert.notEqual(after[TREE_LEGACY], digests[TREE_LEGACY]);

    // Removing the skipped entries entirely gives the same payload digest again.
    rmSync(join(dir, "node_modules"), { recursive: true });
    rmSync(join(dir, "lib/node_modules"), { recursive: true });
    rmSync(join(dir, "a/b/c/node_modules"), { recursive: true });
    rmSync(join(dir, "oats-lock.json"));
    assert.equal((await digestTree(dir, [PACKAGE_PAYLOAD_EXEC]))[PACKAGE_PAYLOAD_EXEC], digests[PACKAGE_PAYLOAD_EXEC]);

    // But the nested oats-lock.json and the symlinks into node_modules are part of it.
    writeFileSync(join(dir, "sub/oats-lock.json"), '{"changed":true}\n');
    const nested = await assertMatchesReference(dir);
    assert.notEqual(nested[PACKAGE_PAYLOAD_EXEC], digests[PACKAGE_PAYLOAD_EXEC]);
    unlinkSync(join(dir, "lib/dep-link"));
    symlinkSync("node_modules/dep/other.js", join(dir, "lib/dep-link"));
    const relinked = await assertMatchesReference(dir);
    assert.notEqual(relinked[PACKAGE_PAYLOAD_EXEC], nested[PACKAGE_PAYLOAD_EXEC]);
  });

  test("an empty file is a record of its own", async () => {
    const dir = join(tempDir(), "empty-file");
    put(dir, "a.txt", "a\n");
    const without = await assertMatchesReference(dir);
    put(dir, "empty", "");
    const withEmpty = await assertMatchesReference(dir);
    for (const format of TREE_FORMATS) assert.notEqual(withEmpty[format], without[format], format);
    const only = join(tempDir(), "only-empty");
    put(only, "e", "");
    await assertMatchesReference(only);
  });

  test(
    "many small files whose record heads fill the hash's gathering buffer " +
      "many times over, ASCII and not, executable and not",
    async () => {
      // Small records are gathered into 64 KiB before they reach SHA-256 (tree.ts), and ASCII heads are written there
      // directly (exec.ts): every boundary case of that buffer is met here.
      const dir = join(tempDir(), "many");
      for (let i = 0; i < 300; i++) {
        const name =
          i % 7 === 0
            ? `dir-${i % 5}/é-${i}.txt`
            : i % 11 === 0
              ? `dir-${i % 5}/日本-${i}`
              : `dir-${i % 5}/${"n".repeat(i % 97)}-${i}.js`;
        put(dir, name, Buffer.alloc(200 + ((i * 37) % 1400), i), i % 3 === 0 ? 0o755 : 0o644);
      }
      // Long names and tiny contents: the buffer fills up in the middle of a record head, again and again.
      for (let i = 0; i < 900; i++)
        put(
          dir,
          `heads/${String(i).padStart(4, "0")}-${"h".repeat(140 + ((i * 13) % 100))}${i % 9 === 0 ? "-ü" : ""}`,
          "x".repeat(i % 20),
          i % 2 ? 0o755 : 0o644,
        );
      put(dir, `long/${"x".repeat(250)}/${"y".repeat(250)}.txt`, "deep\n", 0o755);
      await assertMatchesReference(dir);
    },
  );

  test("an empty tree", async () => {
    const dir = join(tempDir(), "nothing");
    mkdirSync(join(dir, "a/b"), { recursive: true });
    const digests = await assertMatchesReference(dir);
    assert.equal(digests[TREE_LEGACY], bytesDigest(Buffer.alloc(0)));
    assert.equal(digests[TREE_EXEC], bytesDigest(Buffer.from(`${TREE_EXEC}\0`)));
  });

  test("the owner-execute bit changes exec and payload digests, never legacy", async () => {
    const dir = join(tempDir(), "modes");
    put(dir, "run.sh", "#!/bin/sh\n", 0o644);
    put(dir, "data", "d\n", 0o644);
    const plain = await assertMatchesReference(dir);
    chmodSync(join(dir, "run.sh"), 0o744);
    const exec = await assertMatchesReference(dir);
    assert.equal(exec[TREE_LEGACY], plain[TREE_LEGACY]);
    assert.notEqual(exec[TREE_EXEC], plain[TREE_EXEC]);
    assert.notEqual(exec[PACKAGE_PAYLOAD_EXEC], plain[PACKAGE_PAYLOAD_EXEC]);
    // Only the owner bit: group and other execute are outside identity (0654 == 0644, 0755 == 0744).
    chmodSync(join(dir, "run.sh"), 0o655);
    assert.deepEqual(await allDigests(dir), plain, "group/other exec bits are ignored");
    chmodSync(join(dir, "run.sh"), 0o755);
    assert.deepEqual(await allDigests(dir), exec);
  });

  test("other mode bits change nothing", async () => {
    const dir = join(tempDir(), "other-modes");
    put(dir, "secret", "s\n", 0o640);
    put(dir, "sub/x", "x\n", 0o644);
    const before = await assertMatchesReference(dir);
    chmodSync(join(dir, "secret"), 0o600);
    assert.deepEqual(await allDigests(dir), before);
    chmodSync(join(dir, "secret"), 0o444);
    chmodSync(join(dir, "sub"), 0o700);
    assert.deepEqual(await allDigests(dir), before);
    chmodSync(join(dir, "secret"), 0o1644); // sticky
    assert.deepEqual(await allDigests(dir), before);
  });

  test("large files across the small-file (256 KiB) and chunk (1 MiB) thresholds", async () => {
    const KiB = 1024;
    const MiB = 1024 * KiB;
    const dir = join(tempDir(), "large");
    // Byte order = legacy order here (lowercase ASCII), so one pass reads them
    // in this sequence: large files are followed by files of every size class,
    // so the prefetch of the next head runs for small, medium and large files.
    const sizes: [string, number][] = [
      ["a-large.bin", 3 * MiB + 123],
      ["b-medium.bin", 300 * KiB],
      ["c-at-small-limit.bin", 256 * KiB],
      ["d-just-over-small.bin", 256 * KiB + 1],
      ["e-one-chunk.bin", MiB],
      ["f-chunk-plus-one.bin", MiB + 1],
      ["g-small.txt", 17],
      ["h-two-chunks.bin", 2 * MiB],
      ["i-large.bin", 1536 * KiB],
      ["j-large.bin", 5 * MiB - 1],
      ["k-empty", 0],
    ];
    for (const [name, size] of sizes) put(dir, `big/${name}`, randomBytes(size));
    chmodSync(join(dir, "big/h-two-chunks.bin"), 0o755);
    link(dir, "big/l-link", "a-large.bin");
    put(dir, "m-after.txt", "after\n");
    const digests = await assertMatchesReference(dir);

    // One byte changed deep in a later chunk of a large file is seen.
    const path = join(dir, "big/a-large.bin");
    const bytes = readFileSync(path);
    bytes[2 * MiB + 5] = bytes[2 * MiB + 5]! ^ 1;
    writeFileSync(path, bytes);
    const changed = await assertMatchesReference(dir);
    for (const format of TREE_FORMATS) assert.notEqual(changed[format], digests[format], format);

    // And a retained copy of it is byte-for-byte the same tree, read-only (the shared file layer: 0444, 0555).
    const scope = tempDir("oats-scope-");
    const receipt = await retainTree(scope, { kind: "capture", key: "large", source: dir });
    assert.equal(receipt.integrity.value, changed[TREE_EXEC]);
    assert.deepEqual(refDigests(receipt.dir), changed);
    const readOnly = (rows: string[]): string[] =>
      rows.map((row) =>
        row.replace(/^([DF] \S+) ([0-7]+)/, (_, head, mode) => `${head} ${(parseInt(mode, 8) & 0o555).toString(8)}`),
      );
    assert.deepEqual(snapshotTree(receipt.dir), readOnly(snapshotTree(dir)));
  });
});

// ---------------------------------------------------------------------------

describe("refusals of the walk", () => {
  test("a FIFO is invalid-artifact (and the walk does not hang on it)", async () => {
    const dir = join(tempDir(), "fifo");
    put(dir, "a.txt");
    mkdirSync(join(dir, "sub"));
    execFileSync("mkfifo", [join(dir, "sub/pipe")]);
    for (const format of TREE_FORMATS)
      await rejectsWith(digestTree(dir, [format]), "invalid-artifact", {
        path: "sub/pipe",
        reason: "special-file",
        type: "FIFO",
      });
  });

  test("a socket is invalid-artifact", async () => {
    const dir = join(tempDir(), "sock");
    put(dir, "a.txt");
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(join(dir, "s.sock"), resolve));
    try {
      await rejectsWith(digestTree(dir), "invalid-artifact", { path: "s.sock", reason: "special-file" });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test("a non-UTF-8 file name is invalid-artifact, non-utf8-name", async () => {
    const dir = join(tempDir(), "latin");
    put(dir, "ok.txt");
    mkdirSync(join(dir, "sub"));
    const bad = Buffer.concat([Buffer.from(`${dir}/sub/`), Buffer.from([0xff, 0xfe])]);
    writeFileSync(bad, "x");
    try {
      for (const format of TREE_FORMATS)
        await rejectsWith(digestTree(dir, [format]), "invalid-artifact", { reason: "non-utf8-name" });
      // A directory with that name is refused as well.
      unlinkSync(bad);
      mkdirSync(bad);
      writeFileSync(Buffer.concat([bad, Buffer.from("/inner")]), "x");
      await rejectsWith(digestTree(dir), "invalid-artifact", { reason: "non-utf8-name" });
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
    // A real U+FFFD in a name is valid UTF-8 and is hashed like any other name.
    put(dir, "sub/\uFFFD.txt");
    await assertMatchesReference(dir);
  });

  test("a symlink whose target is not UTF-8 is invalid-artifact, non-utf8-name", async () => {
    const dir = join(tempDir(), "latin-link");
    put(dir, "ok.txt");
    symlinkSync(Buffer.from([0x61, 0xc3, 0x28]), join(dir, "bad-link"));
    for (const format of TREE_FORMATS)
      await rejectsWith(digestTree(dir, [format]), "invalid-artifact", { reason: "non-utf8-name" });
  });

  test("a missing directory and a file are refused", async () => {
    const base = tempDir();
    await rejectsWith(digestTree(join(base, "missing")), "artifact-not-found");
    writeFileSync(join(base, "file"), "x");
    await rejectsWith(digestTree(join(base, "file")), "invalid-artifact");
  });
});

// ---------------------------------------------------------------------------

/**
 * Start a child process that writes into `file` without pause until killed,
 * and resolve once it has written for the first time.
 */
async function startWriter(file: string, mode: "overwrite" | "append"): Promise<ChildProcess> {
  const script = `
    const fs = require("node:fs");
    const path = process.argv[1];
    const mode = process.argv[2];
    const fd = fs.openSync(path, mode === "append" ? "a" : "r+");
    const size = fs.fstatSync(fd).size;
    const buffer = Buffer.alloc(4096);
    let i = 0;
    const step = () => {
      buffer.fill(i & 0xff);
      if (mode === "append") fs.writeSync(fd, buffer);
      else fs.writeSync(fd, buffer, 0, buffer.length, (i * 7919 * 4096) % (size - 4096));
      i++;
    };
    step();
    process.stdout.write("ready\\n");
    for (;;) step();
  `;
  const child = spawn(process.execPath, ["-e", script, file, mode], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`writer exited early with ${code}`)));
    child.stdout!.once("data", () => resolve());
  });
  return child;
}

async function stopWriter(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.removeAllListeners("exit");
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
}

/** Run `attempt` against a concurrently modified file until it is refused; a few retries absorb an unlucky schedule. */
async function refusedUnderConcurrentWrite(
  file: string,
  mode: "overwrite" | "append",
  attempt: () => Promise<unknown>,
): Promise<OatsError> {
  let lastOutcome = "";
  for (let round = 0; round < 5; round++) {
    const writer = await startWriter(file, mode);
    try {
      await attempt();
      lastOutcome = "accepted";
    } catch (error) {
      if (error instanceof OatsError && error.code === "invalid-artifact") return error;
      throw error;
    } finally {
      await stopWriter(writer);
    }
  }
  assert.fail(`a file written during the read was ${lastOutcome} in 5 rounds`);
}

describe("a file that changes while it is read", () => {
  const SIZE = 64 << 20;

  for (const mode of ["overwrite", "append"] as const) {
    test(`is refused, never hashed half-old (${mode})`, async () => {
      const dir = join(tempDir(), "racy");
      put(dir, "a-small.txt");
      put(dir, "big.bin", Buffer.alloc(SIZE, 0x5a));
      put(dir, "z-small.txt");
      const error = await refusedUnderConcurrentWrite(join(dir, "big.bin"), mode, () =>
        digestTree(dir, [...TREE_FORMATS]),
      );
      assertRefusal(error, "invalid-artifact", { path: "big.bin", reason: "changed-while-reading" }, contractKind);
      assert.ok(
        ["size", "mtime", "ctime", "short read"].includes(String(error.details.changed)),
        `changed: ${String(error.details.changed)}`,
      );
      if (mode === "overwrite") assert.notEqual(error.details.changed, "size");
    });
  }

  test("retainTree refuses it and leaves no staging and no revision", async () => {
    const dir = join(tempDir(), "racy-retain");
    put(dir, "big.bin", Buffer.alloc(SIZE, 0x33));
    const scope = tempDir("oats-scope-");
    const error = await refusedUnderConcurrentWrite(join(dir, "big.bin"), "overwrite", () =>
      retainTree(scope, { kind: "capture", key: "racy", source: dir }),
    );
    assertRefusal(error, "invalid-artifact", { path: "big.bin", reason: "changed-while-reading" }, contractKind);
    assert.deepEqual(listRetained(scope), []);
    assert.deepEqual(
      snapshotTree(scope).filter((row) => row.includes(".staging-") || row.includes("sha256-")),
      [],
    );
  });
});

// ---------------------------------------------------------------------------

describe("canonical JSON (oats.json.v1)", () => {
  test("key order is by UTF-8 bytes, not UTF-16 code units", () => {
    // U+E000 is EE 80 80 in UTF-8 and sorts before U+1F600 (F0 9F 98 80);
    // in UTF-16 U+1F600 is D83D DE00 and would sort first.
    const value = { "\u{1F600}": 2, "\uE000": 1 };
    assert.ok("\u{1F600}" < "\uE000", "UTF-16 order is the other way round");
    assert.equal(canonicalJson(value), '{"\uE000":1,"\u{1F600}":2}\n');
    assert.equal(canonicalJson({ b: 0, a: 0, B: 0, é: 0, e: 0 }), '{"B":0,"a":0,"b":0,"e":0,"é":0}\n');
  });

  test("-0 is written 0, nested too; exactly one trailing LF, no whitespace", () => {
    assert.equal(canonicalJson(-0), "0\n");
    assert.equal(canonicalJson({ a: [-0, { b: -0 }], c: " x " }), '{"a":[0,{"b":0}],"c":" x "}\n');
    assert.equal(jsonDigest({ z: -0 }), jsonDigest({ z: 0 }));
    assert.equal(canonicalJson([]), "[]\n");
    assert.equal(canonicalJson({}), "{}\n");
    assert.equal(canonicalJson("\u{1F600}"), '"\u{1F600}"\n', "a proper surrogate pair is fine");
  });

  test("a shared (non-cyclic) object is not a cycle", () => {
    const shared = { x: 1 };
    assert.equal(canonicalJson({ a: shared, b: [shared, shared] }), '{"a":{"x":1},"b":[{"x":1},{"x":1}]}\n');
  });

  test("an object without a prototype is plain", () => {
    const bare = Object.assign(Object.create(null) as Record<string, unknown>, { b: 1, a: 2 });
    assert.equal(canonicalJson(bare), '{"a":2,"b":1}\n');
  });

  const refusals: [string, () => unknown][] = [
    ["NaN", () => ({ a: NaN })],
    ["Infinity", () => [Infinity]],
    ["-Infinity", () => -Infinity],
    ["lone high surrogate", () => ({ a: "x\ud800y" })],
    ["lone low surrogate", () => ["\udc00"]],
    ["lone surrogate in a key", () => ({ "\ud800": 1 })],
    [
      "cycle through an object",
      () => {
        const a: Record<string, unknown> = { n: 1 };
        a.self = { back: a };
        return a;
      },
    ],
    [
      "cycle through an array",
      () => {
        const a: unknown[] = [];
        a.push([a]);
        return a;
      },
    ],
    ["Date", () => ({ when: new Date(0) })],
    ["Map", () => new Map([["a", 1]])],
    ["Set", () => [new Set([1])]],
    [
      "class instance",
      () => ({
        x: new (class Point {
          x = 1;
        })(),
      }),
    ],
    ["boxed number", () => ({ n: new Number(1) })],
    ["undefined", () => ({ a: undefined })],
    ["function", () => ({ f: () => 1 })],
    ["bigint", () => ({ n: 1n })],
    ["symbol", () => [Symbol("s")]],
    // biome-ignore lint/suspicious/noSparseArray: a hole is the input under test
    ["sparse array (a hole is not a JSON value)", () => [1, , 3]],
  ];
  for (const [name, make] of refusals) {
    test(`refuses ${name}`, () => {
      const value = make();
      throwsWith(() => canonicalJson(value), "invalid-input");
      throwsWith(() => jsonDigest(value), "invalid-input");
    });
  }

  test("the refusal names where in the value it happened", () => {
    throwsWith(() => canonicalJson({ a: [1, { "b/c": NaN }] }), "invalid-input", { pointer: "/a/1/b~1c" });
  });
});

describe("parseIntegrity", () => {
  const hex = "0123456789abcdef".repeat(4);

  test("text form, object form, bare sha256 (legacy)", () => {
    assert.deepEqual(parseIntegrity(`${TREE_EXEC}:sha256-${hex}`), { format: TREE_EXEC, value: `sha256-${hex}` });
    assert.deepEqual(parseIntegrity(`${PACKAGE_PAYLOAD_EXEC}:sha256-${hex}`), {
      format: PACKAGE_PAYLOAD_EXEC,
      value: `sha256-${hex}`,
    });
    assert.deepEqual(parseIntegrity(`oats.json.v1:sha256-${hex}`), { format: "oats.json.v1", value: `sha256-${hex}` });
    assert.deepEqual(parseIntegrity({ format: TREE_LEGACY, value: `sha256-${hex}` }), {
      format: TREE_LEGACY,
      value: `sha256-${hex}`,
    });
    assert.deepEqual(parseIntegrity(`sha256-${hex}`), { format: TREE_LEGACY, value: `sha256-${hex}` });
    assert.deepEqual(parseIntegrity(`${TREE_LEGACY}:sha256-${hex}`), parseIntegrity(`sha256-${hex}`));
  });

  const bad: [string, unknown][] = [
    ["abbreviated", `sha256-${hex.slice(0, 12)}`],
    ["abbreviated by one", `${TREE_EXEC}:sha256-${hex.slice(1)}`],
    ["too long", `sha256-${hex}0`],
    ["uppercase hex", `sha256-${hex.toUpperCase()}`],
    ["uppercase algorithm", `SHA256-${hex}`],
    ["unknown format", `oats.tree-exec.v2:sha256-${hex}`],
    ["unknown format (object)", { format: "oats.tree.v9", value: `sha256-${hex}` }],
    ["uppercase format", `OATS.TREE-EXEC.V1:sha256-${hex}`],
    ["other algorithm", `sha512-${hex}${hex}`],
    ["base64 SRI", "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="],
    ["trailing newline", `sha256-${hex}\n`],
    ["leading space", ` sha256-${hex}`],
    ["empty", ""],
    ["number", 42],
    ["null", null],
    ["object with extra key", { format: TREE_EXEC, value: `sha256-${hex}`, extra: 1 }],
    ["object without value", { format: TREE_EXEC }],
    ["object with bad value", { format: TREE_EXEC, value: `sha256-${hex.slice(2)}` }],
  ];
  for (const [name, input] of bad) {
    test(`refuses ${name}`, () =>
      throwsWith(() => parseIntegrity(input as IntegrityInput), "invalid-artifact-reference"));
  }
});
