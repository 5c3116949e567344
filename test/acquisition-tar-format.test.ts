/**
 * The tar header encoder (src/acquisition/tar-format.ts) and the writer on
 * top of it: byte for byte what node-tar's Header and Pax wrote for the same
 * entries (the writer before it; bundle and fleet layer digests rest on
 * those bytes), and read back by real GNU tar and by our own extractor.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  closeSync,
  createReadStream,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { Header, Pax } from "tar";
import { exportBundle } from "../src/acquisition/bundle.js";
import { extractTar } from "../src/acquisition/extract.js";
import {
  BLOCK_SIZE,
  checksum,
  entryHeaderBytes,
  paxRecord,
  splitPath,
  type TarEntryHeader,
} from "../src/acquisition/tar-format.js";
import { TarWriter } from "../src/acquisition/tar-writer.js";
import { retainTree } from "../src/retention/index.js";
import { snapshotTree, tempDir } from "./helpers.js";

/** What node-tar 7 wrote for an entry, as the writer called it before tar-format.ts. */
function nodeTarHeader(entry: TarEntryHeader): Buffer {
  const header = new Header({ uid: 0, gid: 0, uname: "", gname: "", mtime: new Date(0), ...entry });
  const blocks: Buffer[] = [];
  if (header.encode())
    blocks.push(
      new Pax({ path: entry.path, ...(entry.linkpath !== undefined ? { linkpath: entry.linkpath } : {}) }).encode(),
    );
  blocks.push(header.block!);
  return Buffer.concat(blocks);
}

/** A small deterministic generator (mulberry32), so a failure names a reproducible case. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const CHARACTERS = ["a", "b", "Z", "0", "-", "_", ".", " ", "=", "é", "ß", "中", "文", "😀", "\u{1f4e6}"];
const SIZES = [0, 1, 511, 512, 513, 4096, 0o77777777777, 0o77777777777 + 1, 2 ** 40];
const MODES = [0o644, 0o755, 0o777];

function segment(next: () => number, length: number): string {
  let text = "";
  while (text.length < length) text += CHARACTERS[Math.floor(next() * CHARACTERS.length)]!;
  return text === "." || text === ".." ? "x" : text;
}

function randomEntry(next: () => number): TarEntryHeader {
  const count = 1 + Math.floor(next() * 6);
  const segments = Array.from({ length: count }, () =>
    segment(next, 1 + Math.floor(next() * (next() < 0.3 ? 120 : 30))),
  );
  const path = segments.join("/");
  const kind = next();
  if (kind < 0.2) return { path: `${path}/`, type: "Directory", mode: 0o755, size: 0 };
  if (kind < 0.4)
    return { path, type: "SymbolicLink", mode: 0o777, size: 0, linkpath: segment(next, 1 + Math.floor(next() * 130)) };
  return { path, type: "File", mode: MODES[Math.floor(next() * 2)]!, size: SIZES[Math.floor(next() * SIZES.length)]! };
}

/** Paths at every boundary of the name (100 bytes) and prefix (155 bytes) fields. */
function boundaryEntries(): TarEntryHeader[] {
  const entries: TarEntryHeader[] = [];
  for (let length = 95; length <= 106; length++) {
    entries.push({ path: "n".repeat(length), type: "File", mode: 0o644, size: 1 });
    entries.push({ path: `${"d".repeat(length)}/`, type: "Directory", mode: 0o755, size: 0 });
    entries.push({ path: `${"é".repeat(length >> 1)}${length % 2 ? "x" : ""}`, type: "File", mode: 0o644, size: 1 });
    entries.push({ path: "link", type: "SymbolicLink", mode: 0o777, size: 0, linkpath: "t".repeat(length) });
  }
  for (let prefix = 150; prefix <= 158; prefix++) {
    for (let name = 97; name <= 102; name++) {
      entries.push({ path: `${"p".repeat(prefix)}/${"n".repeat(name)}`, type: "File", mode: 0o755, size: 7 });
      entries.push({
        path: `${"p".repeat(40)}/${"q".repeat(prefix - 41)}/${"n".repeat(name)}/`,
        type: "Directory",
        mode: 0o755,
        size: 0,
      });
    }
  }
  entries.push({ path: `${"p".repeat(200)}/${"q".repeat(200)}`, type: "File", mode: 0o644, size: 0 });
  entries.push({ path: "./", type: "Directory", mode: 0o755, size: 0 });
  return entries;
}

describe("tar headers: byte for byte as node-tar wrote them", () => {
  test(
    "Given boundary paths and link texts around the 100-byte name and " +
      "155-byte prefix fields When encoded Then each header equals node-tar's",
    () => {
      for (const entry of boundaryEntries())
        assert.deepEqual(entryHeaderBytes(entry), nodeTarHeader(entry), JSON.stringify(entry));
    },
  );

  test(
    "Given 4000 generated entries (unicode, long segments, directories, " +
      "symlinks, sizes past the octal maximum) When encoded Then each header " +
      "equals node-tar's",
    () => {
      const next = random(13);
      for (let index = 0; index < 4000; index++) {
        const entry = randomEntry(next);
        assert.deepEqual(entryHeaderBytes(entry), nodeTarHeader(entry), `case ${index}: ${JSON.stringify(entry)}`);
      }
    },
  );

  test(
    "Given every header block written When its checksum field is read Then " +
      "it is the sum of the block's bytes with that field as spaces",
    () => {
      const next = random(7);
      for (let index = 0; index < 500; index++) {
        const bytes = entryHeaderBytes(randomEntry(next));
        // The ustar block is the last one; a pax header's own block is the first.
        for (const at of new Set([0, bytes.length - BLOCK_SIZE])) {
          const block = bytes.subarray(at, at + BLOCK_SIZE);
          let sum = 0;
          for (let byte = 0; byte < BLOCK_SIZE; byte++) sum += byte >= 148 && byte < 156 ? 0x20 : block[byte]!;
          assert.equal(Number.parseInt(block.subarray(148, 154).toString("latin1"), 8), sum);
          assert.equal(checksum(block), sum);
        }
      }
    },
  );

  test(
    "Given values whose record crosses 9/10, 99/100 and 999/1000 bytes When " +
      "a pax record is made Then its length prefix counts exactly its own bytes",
    () => {
      for (let length = 0; length <= 1100; length++) {
        const record = paxRecord("path", "v".repeat(length));
        const declared = Number.parseInt(record, 10);
        assert.equal(declared, Buffer.byteLength(record), `value of ${length} bytes: ${record.slice(0, 12)}`);
        assert.ok(record.startsWith(`${declared} path=`) && record.endsWith("\n"));
      }
      assert.equal(paxRecord("path", "é"), "11 path=é\n");
    },
  );

  test(
    "Given paths of 100 bytes or more When split Then the prefix is the " + "longest that fits and the name the rest",
    () => {
      assert.deepEqual(splitPath("short/name"), { name: "short/name", prefix: "", fits: true });
      const long = `${"a".repeat(60)}/${"b".repeat(60)}/c`;
      assert.deepEqual(splitPath(long), { name: "c", prefix: `${"a".repeat(60)}/${"b".repeat(60)}`, fits: true });
      assert.deepEqual(splitPath(`${"a".repeat(150)}/${"b".repeat(10)}/c`), {
        name: `${"b".repeat(10)}/c`,
        prefix: "a".repeat(150),
        fits: true,
      });
      assert.deepEqual(
        splitPath(`${"a".repeat(60)}/${"b".repeat(60)}/`),
        { name: "b".repeat(60), prefix: "a".repeat(60), fits: true },
        "a split directory loses its slash",
      );
      assert.deepEqual(splitPath(`${"a".repeat(60)}/${"b".repeat(120)}`), {
        name: "b".repeat(99),
        prefix: "a".repeat(60),
        fits: false,
      });
      assert.deepEqual(splitPath(`${"a".repeat(160)}/b`), { name: "a".repeat(99), prefix: "", fits: false });
      assert.deepEqual(splitPath("n".repeat(100)), { name: "n".repeat(100), prefix: ".", fits: true });
      assert.deepEqual(splitPath("n".repeat(120)), { name: "n".repeat(99), prefix: ".", fits: false });
    },
  );
});

// ---------------------------------------------------------------- read back by GNU tar and by our extractor

interface Expected {
  readonly path: string;
  readonly type: "file" | "directory" | "symlink";
  readonly mode?: number;
  readonly body?: Buffer;
  readonly target?: string;
}

/** Entries that need every form: plain, split at the prefix, pax for length, pax for unicode, empty, a block exactly
 * full. */
function awkwardEntries(): Expected[] {
  const deep = `deep/${"d".repeat(70)}/${"e".repeat(70)}`;
  return [
    { path: "top", type: "directory" },
    { path: "top/plain.txt", type: "file", mode: 0o644, body: Buffer.from("plain\n") },
    { path: "top/empty", type: "file", mode: 0o644, body: Buffer.alloc(0) },
    { path: "top/run.sh", type: "file", mode: 0o755, body: Buffer.from("#!/bin/sh\necho run\n") },
    { path: "top/full-block", type: "file", mode: 0o644, body: Buffer.alloc(512, 0x61) },
    { path: "top/over-block", type: "file", mode: 0o644, body: Buffer.alloc(513, 0x62) },
    { path: "top/deep", type: "directory" },
    { path: `top/${deep.split("/").slice(0, 2).join("/")}`, type: "directory" },
    { path: `top/${deep}`, type: "directory" },
    {
      path: `top/${deep}/file-at-depth`,
      type: "file",
      mode: 0o755,
      body: Buffer.from("split between prefix and name\n"),
    },
    { path: `top/${"n".repeat(180)}`, type: "file", mode: 0o644, body: Buffer.from("a segment over 100 bytes\n") },
    { path: "top/héllo wörld.txt", type: "file", mode: 0o644, body: Buffer.from("unicode name\n") },
    { path: "top/中文", type: "directory" },
    { path: "top/中文/文件-😀", type: "file", mode: 0o755, body: Buffer.from("four-byte characters\n") },
    { path: "top/link", type: "symlink", target: "plain.txt" },
    { path: "top/long-link", type: "symlink", target: `${deep}/file-at-depth` },
    { path: "top/unicode-link", type: "symlink", target: "中文/文件-😀" },
  ];
}

function writeArchive(path: string, entries: readonly Expected[]): void {
  const fd = openSync(path, "w");
  try {
    const tar = new TarWriter(fd);
    for (const entry of entries) {
      if (entry.type === "directory") tar.directory(entry.path);
      else if (entry.type === "symlink") tar.symlink(entry.path, entry.target!);
      else {
        tar.file(entry.path, entry.mode === 0o755, entry.body!.length);
        tar.write(entry.body!);
        tar.pad(entry.body!.length);
      }
    }
    tar.end();
  } finally {
    closeSync(fd);
  }
}

function assertExtracted(root: string, entries: readonly Expected[]): void {
  for (const entry of entries) {
    const at = join(root, entry.path);
    const stats = lstatSync(at);
    if (entry.type === "directory") assert.ok(stats.isDirectory(), `${entry.path} is a directory`);
    else if (entry.type === "symlink") {
      assert.ok(stats.isSymbolicLink(), `${entry.path} is a symlink`);
      assert.equal(readlinkSync(at), entry.target);
    } else {
      assert.ok(stats.isFile(), `${entry.path} is a file`);
      assert.deepEqual(readFileSync(at), entry.body, `${entry.path} content`);
      assert.equal(stats.mode & 0o777, entry.mode, `${entry.path} mode`);
    }
  }
}

function gnuTar(args: string[]): string {
  const result = spawnSync("tar", args, { encoding: "utf8" });
  assert.equal(result.status, 0, `tar ${args.join(" ")}: ${result.stderr}`);
  assert.equal(result.stderr, "", "GNU tar reads it without a warning");
  return result.stdout;
}

describe("the writer's archives, read back", () => {
  test(
    "Given long, split, unicode and pax names, empty files, full blocks, " +
      "modes and symlinks When GNU tar lists and extracts the archive Then " +
      "every entry is there as written",
    () => {
      const dir = tempDir("oats-tar-format-");
      const archive = join(dir, "awkward.tar");
      const entries = awkwardEntries();
      writeArchive(archive, entries);
      assert.equal(readFileSync(archive).length % BLOCK_SIZE, 0);

      const listing = gnuTar(["--list", "--verbose", "--numeric-owner", "--quoting-style=literal", "--file", archive])
        .trimEnd()
        .split("\n");
      assert.equal(listing.length, entries.length);
      entries.forEach((entry, index) => {
        const line = listing[index]!;
        const kind = entry.type === "directory" ? "d" : entry.type === "symlink" ? "l" : "-";
        const mode =
          entry.type === "directory"
            ? "rwxr-xr-x"
            : entry.type === "symlink"
              ? "rwxrwxrwx"
              : entry.mode === 0o755
                ? "rwxr-xr-x"
                : "rw-r--r--";
        assert.ok(line.startsWith(`${kind}${mode} 0/0 `), `${entry.path}: ${line}`);
        // A directory's name keeps its trailing slash unless it was split between the prefix and name fields (still
        // typeflag 5).
        const name =
          entry.type === "directory" && Buffer.byteLength(`${entry.path}/`) < 100 ? `${entry.path}/` : entry.path;
        assert.ok(line.includes(` 1970-01-01 00:00 ${name}`), `${entry.path}: ${line}`);
        if (entry.type === "symlink") assert.ok(line.endsWith(` -> ${entry.target}`), line);
      });

      const out = join(dir, "gnu");
      mkdirSync(out);
      gnuTar(["--extract", "--file", archive, "--directory", out]);
      assertExtracted(out, entries);
    },
  );

  test("Given the same archive When our extractor reads it Then every entry is there as written", async () => {
    const dir = tempDir("oats-tar-format-");
    const archive = join(dir, "awkward.tar");
    const entries = awkwardEntries();
    writeArchive(archive, entries);
    const out = join(dir, "ours");
    mkdirSync(out);
    await extractTar(createReadStream(archive), out, { origin: archive, prefix: null });
    assertExtracted(out, entries);
  });
});

// ---------------------------------------------------------------- a whole bundle, pinned

/** A retained tree whose bundle exercises every header form; its bundle digest was measured with node-tar's encoder. */
function awkwardTree(): string {
  const root = join(tempDir("oats-tar-format-src-"), "tree");
  const deep = join(root, "deep", "d".repeat(70), "e".repeat(70));
  mkdirSync(deep, { recursive: true });
  mkdirSync(join(root, "bin"));
  mkdirSync(join(root, "中文"));
  writeFileSync(join(root, "plain.txt"), "plain\n");
  writeFileSync(join(root, "empty"), "");
  writeFileSync(join(root, "bin", "run"), "#!/bin/sh\necho run\n");
  chmodSync(join(root, "bin", "run"), 0o755);
  writeFileSync(join(root, "full-block"), Buffer.alloc(512, 0x61));
  writeFileSync(join(root, "over-block"), Buffer.alloc(513, 0x62));
  writeFileSync(join(deep, "file"), "deep\n");
  writeFileSync(join(root, "n".repeat(180)), "long segment\n");
  writeFileSync(join(root, "héllo wörld.txt"), "unicode\n");
  writeFileSync(join(root, "中文", "文件-😀"), "four-byte characters\n");
  symlinkSync("plain.txt", join(root, "link"));
  symlinkSync(`deep/${"d".repeat(70)}/${"e".repeat(70)}/file`, join(root, "long-link"));
  symlinkSync("中文/文件-😀", join(root, "unicode-link"));
  return root;
}

const AWKWARD_BUNDLE_SHA256 = "0a6e96531fb883e6db7297ba7dbb7eade89806ef680ff89fe1c0f3de1104be23";

describe("a whole bundle", () => {
  test(
    "Given a tree with every header form When it is exported Then the " +
      "bundle's bytes are those node-tar's encoder wrote, and GNU tar extracts " +
      "the tree as it was",
    async () => {
      const scope = tempDir("oats-tar-format-scope-");
      const source = awkwardTree();
      const receipt = await retainTree(scope, { kind: "capture", key: "awkward", source });
      const out = join(tempDir("oats-tar-format-out-"), "bundle.tar");
      await exportBundle(
        scope,
        [{ kind: "capture", key: "awkward", integrity: `${receipt.integrity.format}:${receipt.integrity.value}` }],
        out,
      );
      assert.equal(createHash("sha256").update(readFileSync(out)).digest("hex"), AWKWARD_BUNDLE_SHA256);

      const extracted = tempDir("oats-tar-format-gnu-");
      gnuTar(["--extract", "--file", out, "--directory", extracted]);
      assert.deepEqual(
        snapshotTree(join(extracted, `artifacts/capture/awkward/${receipt.integrity.value.slice("sha256-".length)}`)),
        snapshotTree(source),
      );
    },
  );
});
