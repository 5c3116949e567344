/**
 * The addon's loader (src/engine/native-reads.ts). The package ships the
 * addon's sources, never the compiled file: it is built on the machine that
 * runs it (npm run build, or the install script), and a file that is not an
 * addon for this machine (corrupt, cut short, made for another architecture)
 * is refused before the dynamic loader sees it, or refused by it, with the
 * reason kept. Without the addon the library reads every file from
 * JavaScript: the CLI gives the same answers and prints nothing about it,
 * and `oats doctor` says why.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import {
  ADDON_FILE,
  NODE_API_VERSION,
  addonHeaderProblem,
  loadAddonFile,
  nativeReadsAvailable,
} from "../src/engine/native-reads.js";
import { FIXTURE_PAYLOAD, REPO, addonSkip, tempDir } from "./helpers.js";

const EXEC = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";

/** The first 64 bytes of an ELF file: class (1: 32-bit, 2: 64-bit), byte order (1: little, 2: big), type, machine. */
function elfHeader({ elfClass = 2, data = 1, type = 3, machine = 62 } = {}): Buffer {
  const header = Buffer.alloc(64);
  header.writeUInt32BE(0x7f454c46, 0);
  header[4] = elfClass;
  header[5] = data;
  header[6] = 1;
  const write16 = (value: number, at: number) =>
    data === 2 ? header.writeUInt16BE(value, at) : header.writeUInt16LE(value, at);
  write16(type, 16);
  write16(machine, 18);
  return header;
}

/** The addon this build made, with its e_machine (offset 18, little-endian here) set to arm64's, or x64's on arm64:
 * a real shared object, for another architecture. */
function otherArchitecture(addon: Buffer): Buffer {
  const copy = Buffer.from(addon);
  copy.writeUInt16LE(process.arch === "arm64" ? 62 : 183, 18);
  return copy;
}

test("NODE_API_VERSION is the NAPI_VERSION native/addon.h builds against", () => {
  const header = readFileSync(join(REPO, "native", "addon.h"), "utf8");
  assert.equal(Number(/^#define NAPI_VERSION (\d+)$/m.exec(header)?.[1]), NODE_API_VERSION);
  assert.ok(Number(process.versions.napi) >= NODE_API_VERSION, "every Node the package supports has it");
});

/** addonHeaderProblem of a file that is exactly `head`, for `arch`. */
const problem = (head: Buffer, arch: string) => addonHeaderProblem(head, head.length, arch);

test("an ELF header is checked against the architecture: class, byte order, type and machine, each by name", () => {
  assert.equal(problem(elfHeader(), "x64"), undefined);
  assert.equal(problem(elfHeader({ machine: 183 }), "arm64"), undefined);
  assert.equal(problem(elfHeader({ machine: 183 }), "x64"), "built for arm64, and this is x64");
  assert.equal(problem(elfHeader({ machine: 62 }), "arm64"), "built for x64, and this is arm64");
  assert.equal(problem(elfHeader({ elfClass: 1, machine: 3 }), "x64"), "built for ia32, and this is x64", "32-bit");
  assert.equal(problem(elfHeader({ data: 2, machine: 22 }), "x64"), "built for s390x, and this is x64", "big-endian");
  assert.equal(problem(elfHeader({ machine: 4242 }), "x64"), "built for ELF machine 4242 (64-bit), and this is x64");
  assert.equal(problem(elfHeader({ type: 2 }), "x64"), "not an ELF shared object", "an executable");
  const corrupt = "not an ELF file (corrupt or truncated)";
  assert.equal(problem(Buffer.from("MZ this is not ELF at all, not by any means, not in the least"), "x64"), corrupt);
  assert.equal(problem(elfHeader().subarray(0, 10), "x64"), corrupt);
  assert.equal(problem(elfHeader({ elfClass: 7 }), "x64"), corrupt);
  assert.equal(problem(elfHeader({ machine: 9999 }), "an-architecture-not-in-the-table"), undefined);
});

test(
  "a file shorter than its ELF headers say (section headers, program headers, a segment) " + "is refused as truncated",
  () => {
    const sections = elfHeader();
    sections.writeBigUInt64LE(4096n, 40); // e_shoff
    sections.writeUInt16LE(64, 58); // e_shentsize
    sections.writeUInt16LE(20, 60); // e_shnum
    assert.equal(addonHeaderProblem(sections, 4096 + 64 * 20, "x64"), undefined);
    assert.equal(
      addonHeaderProblem(sections, 4096 + 64 * 20 - 1, "x64"),
      `truncated: ${4096 + 64 * 20 - 1} bytes, and its headers describe more`,
    );
    const segment = Buffer.concat([elfHeader(), Buffer.alloc(56)]);
    segment.writeBigUInt64LE(64n, 32); // e_phoff
    segment.writeUInt16LE(56, 54); // e_phentsize
    segment.writeUInt16LE(1, 56); // e_phnum
    segment.writeBigUInt64LE(0n, 64 + 8); // p_offset
    segment.writeBigUInt64LE(10_000n, 64 + 32); // p_filesz
    assert.equal(addonHeaderProblem(segment, 10_000, "x64"), undefined);
    assert.equal(addonHeaderProblem(segment, 9_999, "x64"), "truncated: 9999 bytes, and its headers describe more");
    assert.equal(
      addonHeaderProblem(segment.subarray(0, 100), 100, "x64"),
      "truncated: 100 bytes, and its headers describe more",
    );
  },
);

test(
  "loadAddonFile: no file is `missing`, garbage and another architecture's " +
    "object `refused` before any load, each with its reason",
  () => {
    const dir = tempDir("oats-addon-files-");
    const missing = loadAddonFile(join(dir, "absent.node"));
    assert.equal(missing.addon, null);
    assert.equal(missing.status.state, "missing");
    assert.match(missing.status.reason!, /not built here/);

    const corrupt = join(dir, "corrupt.node");
    writeFileSync(corrupt, Buffer.from("this was an addon once, before a disk ate it".repeat(100)));
    assert.deepEqual(loadAddonFile(corrupt), {
      addon: null,
      status: { state: "refused", file: corrupt, reason: "not an ELF file (corrupt or truncated)" },
    });

    const empty = join(dir, "empty.node");
    writeFileSync(empty, "");
    assert.equal(loadAddonFile(empty).status.reason, "not an ELF file (corrupt or truncated)");

    const foreign = join(dir, "foreign.node");
    const real = existsSync(ADDON_FILE) ? readFileSync(ADDON_FILE) : undefined;
    writeFileSync(
      foreign,
      real ? otherArchitecture(real) : elfHeader({ machine: process.arch === "arm64" ? 62 : 183 }),
    );
    const refused = loadAddonFile(foreign);
    assert.equal(refused.addon, null);
    assert.equal(refused.status.state, "refused");
    assert.equal(
      refused.status.reason,
      `built for ${process.arch === "arm64" ? "x64" : "arm64"}, and this is ${process.arch}`,
    );
  },
);

test("loadAddonFile: the real addon cut short is refused as truncated before " +
  "any load (mapped, it would kill the process with SIGBUS); the whole one loads", { skip: addonSkip() }, () => {
  const dir = tempDir("oats-addon-cut-");
  const cut = join(dir, "cut.node");
  writeFileSync(cut, readFileSync(ADDON_FILE).subarray(0, 4096));
  const refused = loadAddonFile(cut);
  assert.equal(refused.addon, null);
  assert.equal(refused.status.state, "refused");
  assert.equal(refused.status.reason, "truncated: 4096 bytes, and its headers describe more");
  const whole = loadAddonFile(ADDON_FILE);
  assert.equal(whole.status.state, "loaded");
  assert.equal(typeof whole.addon?.readSmallFiles, "function");
});

/** The C library this process runs with: a whole shared object for this machine, and no addon. */
const libc = /\s(\/\S*\/libc\.so\.6)$/m.exec(readFileSync("/proc/self/maps", "utf8"))?.[1];

test("loadAddonFile: a whole shared object for this machine that is no addon " +
  "(the C library) passes the checks and is refused by the load: `failed`, with the loader's message", {
  skip: libc === undefined && "no glibc libc.so.6 mapped here to try",
}, () => {
  const attempt = loadAddonFile(libc!);
  assert.equal(attempt.addon, null);
  assert.equal(attempt.status.state, "failed");
  assert.match(attempt.status.reason!, /self-register|libc\.so\.6/);
});

/** A copy of the built package (dist/ and package.json, which is all the CLI opens), its addon as `setup` leaves it. */
function packageCopy(): string {
  const copy = tempDir("oats-addon-package-");
  cpSync(join(REPO, "dist"), join(copy, "dist"), { recursive: true });
  cpSync(join(REPO, "package.json"), join(copy, "package.json"));
  return copy;
}

function oats(root: string, args: string[]) {
  return spawnSync(process.execPath, [join(root, "dist/cli/bin.js"), ...args], {
    encoding: "utf8",
    input: "",
    env: { ...process.env, OATS_NATIVE_READS: "" },
  });
}

test(
  "Given an install with no addon, a corrupt one, or one for another " +
    "architecture, When oats digests, Then the digest is the same, nothing " +
    "more is printed, --json stdout is one envelope, and `oats doctor` says why",
  () => {
    const copy = packageCopy();
    const addon = join(copy, "dist/native/oats.node");
    const real = existsSync(ADDON_FILE) ? readFileSync(ADDON_FILE) : undefined;
    const cases: [string, (() => void) | null, string, RegExp][] = [
      ["none", () => rmSync(addon, { force: true }), "missing", /not built here/],
      [
        "corrupt",
        () => writeFileSync(addon, Buffer.alloc(8192, 0x5a)),
        "refused",
        /^not an ELF file \(corrupt or truncated\)$/,
      ],
      [
        "another architecture",
        () => writeFileSync(addon, real ? otherArchitecture(real) : elfHeader({ machine: 183 })),
        "refused",
        /^built for .+, and this is /,
      ],
    ];
    if (real && nativeReadsAvailable())
      cases.push(["this machine's", () => writeFileSync(addon, real), "loaded", /^$/]);
    for (const [name, setup, state, reason] of cases) {
      mkdirSync(join(copy, "dist/native"), { recursive: true });
      setup?.();
      const human = oats(copy, ["digest", FIXTURE_PAYLOAD]);
      assert.equal(human.status, 0, `${name}: ${human.stderr}`);
      assert.equal(human.stdout, `${EXEC}\n`, name);
      assert.equal(human.stderr, "", `${name}: nothing about the addon is printed`);
      const json = oats(copy, ["--json", "digest", FIXTURE_PAYLOAD]);
      assert.equal(json.status, 0, name);
      assert.equal(json.stderr, "", name);
      assert.equal(json.stdout.split("\n").length, 2, `${name}: one envelope line`);
      assert.equal((JSON.parse(json.stdout) as { result: { text: string } }).result.text, EXEC, name);
      const doctor = oats(copy, ["--json", "doctor"]);
      assert.equal(doctor.status, 0, `${name}: ${doctor.stderr}`);
      const status = (
        JSON.parse(doctor.stdout) as { result: { nativeReads: { state: string; file: string; reason?: string } } }
      ).result.nativeReads;
      assert.equal(status.state, state, name);
      assert.equal(status.file, addon, name);
      assert.match(status.reason ?? "", reason, name);
      const text = oats(copy, ["doctor"]);
      assert.match(
        text.stdout.split("\n")[1]!,
        state === "loaded"
          ? /^native reads: loaded \(/
          : new RegExp(`^native reads: not in use, ${state}: .*; digests read every file from JavaScript`),
        name,
      );
    }
  },
);
