/**
 * Retaining straight from npm-style package tarballs (src/acquisition/tarball.ts)
 * with real files and real tar: tarballs made at test time from the fixture
 * packages (`npm pack`, which drops symlinks, and tar.c, which keeps them),
 * and hostile tarballs written here byte by byte (ustar headers with their
 * checksums) rather than committed. Every refusal is typed, leaves the store
 * byte-for-byte as it was, leaves no extraction staging, and writes nothing
 * outside staging.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  cpSync,
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  statSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { once } from "node:events";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { describe, test } from "node:test";
import { createGzip, gzipSync } from "node:zlib";
import ssri from "ssri";
import { c as tarCreate } from "tar";
import { retainTarball, type RetainTarballRequest } from "../src/acquisition/index.js";
import type { OatsError } from "../src/core/errors.js";
import type { JsonValue } from "../src/core/index.js";
import {
  TREE_EXEC,
  TREE_LEGACY,
  cleanupStaging,
  digestTree,
  fsck,
  retainCapabilityArtifact,
  verifyTree,
} from "../src/retention/index.js";
import { hostTag, stagingName } from "../src/retention/store/layout.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, FIXTURES, fixtureLock, runOats, snapshotTree, tempDir } from "./helpers.js";
import { tarBytes, ustarHeader, type RawEntry } from "./support/raw-tar.js";
import { contractKind, refusal, type Details } from "./support/refusals.js";
import { populatedScope } from "./support/scopes.js";

const PACKAGES = join(FIXTURES, "packages");
const payloadOf = (name: string) => join(PACKAGES, name, "payload");
const lockOf = (name: string) => JSON.parse(readFileSync(join(PACKAGES, name, "oats-lock.json"), "utf8")) as LockObject;

type LockObject = {
  lockfileVersion: number;
  packages: Record<string, Record<string, JsonValue>>;
  capabilities: Record<string, Record<string, JsonValue>>;
};

const sha512Of = (bytes: Buffer) => ssri.fromData(bytes, { algorithms: ["sha512"] }).toString();

// ---------------------------------------------------------------------------
// Making tarballs

/** `npm pack` of a fixture payload into a fresh directory (npm drops the symlinks). */
function npmPack(name: string): string {
  const dest = tempDir("oats-pack-");
  const out = execFileSync("npm", ["pack", "--pack-destination", dest, "--json", "--ignore-scripts", "--silent"], {
    cwd: payloadOf(name),
    encoding: "utf8",
  });
  const [packed] = JSON.parse(out) as { filename: string }[];
  return join(dest, packed!.filename);
}

/** A package tarball built with tar.c, which keeps symlinks verbatim. */
async function tarPack(payload: string): Promise<string> {
  const file = join(tempDir("oats-tarc-"), "package.tgz");
  await tarCreate({ gzip: true, cwd: payload, prefix: "package/", file, portable: true }, readdirSync(payload).sort());
  return file;
}

function writeTarball(bytes: Buffer, name = "hostile.tgz"): string {
  const file = join(tempDir("oats-hostile-"), name);
  writeFileSync(file, bytes);
  return file;
}

const hostile = (entries: readonly RawEntry[]) => writeTarball(gzipSync(tarBytes(entries)));

/** A decompression bomb written streaming: one entry of `size` zero bytes, gzipped (never held in memory). */
async function writeBomb(size: number): Promise<string> {
  const file = join(tempDir("oats-bomb-"), "bomb.tgz");
  const gzip = createGzip();
  const done = pipeline(gzip, createWriteStream(file));
  gzip.write(ustarHeader({ name: "package/zeros" }, size));
  const chunk = Buffer.alloc(1 << 20);
  for (let left = size; left > 0; left -= chunk.length) {
    if (!gzip.write(left >= chunk.length ? chunk : chunk.subarray(0, left))) await once(gzip, "drain");
  }
  gzip.end(Buffer.alloc(1024));
  await done;
  return file;
}

// ---------------------------------------------------------------------------
// Scopes

function assertNoExtractionLeft(scope: string): void {
  assert.equal(existsSync(join(scope, ".agents/extract")), false, "the extraction store was left behind");
  assert.deepEqual(
    snapshotTree(scope).filter((row) => /(^|\/)\.(staging|lock)-/.test(row.split(" ")[1] ?? "")),
    [],
    "staging was left behind",
  );
}

/**
 * `retainTarball` refuses with `code` (and `details`), on a populated scope
 * (store byte-for-byte unchanged) and on a fresh one (nothing created), with
 * no staging left and the tarball's directory untouched.
 */
async function refusesUnchanged(
  tarball: string,
  request: RetainTarballRequest,
  code: string,
  details: Details = {},
): Promise<OatsError> {
  let caught: unknown;
  const tarballDir = join(tarball, "..");
  const tarballsBefore = snapshotTree(tarballDir);
  const scope = await populatedScope();
  const before = snapshotTree(scope);
  await assert.rejects(retainTarball(scope, tarball, request), (error) => {
    caught = error;
    return refusal(code, details, contractKind)(error);
  });
  assert.deepEqual(snapshotTree(scope), before, "the store changed although the request was refused");
  assertNoExtractionLeft(scope);

  const fresh = tempDir("oats-fresh-");
  await assert.rejects(retainTarball(fresh, tarball, request), refusal(code, details, contractKind));
  assert.deepEqual(readdirSync(fresh), [], "a refused first request created something");
  assert.deepEqual(snapshotTree(tarballDir), tarballsBefore, "something was written beside the tarball");
  return caught as OatsError;
}

const TREE_REQUEST = { kind: "capability", key: "demo.hostile" } as const;

// ---------------------------------------------------------------------------

describe("retainTarball: npm-packed and tar-built package tarballs", () => {
  test(
    "Given an npm-packed capability tarball, When it is retained, Then the " +
      "receipt carries the tarball's sha512 SRI, the revision verifies and the " +
      "owner-exec bit is kept",
    async () => {
      const tarball = npmPack("clock");
      const bytes = readFileSync(tarball);
      const scope = tempDir("oats-scope-");
      const receipt = await retainTarball(scope, tarball, { kind: "capability", key: "demo.clock" });

      assert.equal(receipt.status, "retained");
      assert.equal(receipt.kind, "capability");
      assert.equal(receipt.key, "demo.clock");
      assert.equal(receipt.integrity.format, TREE_EXEC);
      assert.equal(receipt.tarballIntegrity, sha512Of(bytes));
      assert.match(receipt.tarballIntegrity, /^sha512-[A-Za-z0-9+/]{86}==$/);

      // The same tree as the fixture payload without its symlink (npm pack drops symlinks).
      const withoutLink = join(tempDir(), "payload");
      cpSync(payloadOf("clock"), withoutLink, { recursive: true, verbatimSymlinks: true });
      unlinkSync(join(withoutLink, "bin/time.mjs"));
      assert.equal(receipt.integrity.value, (await digestTree(withoutLink, [TREE_EXEC]))[TREE_EXEC]);

      const verified = await verifyTree(scope, { kind: "capability", key: "demo.clock", integrity: receipt.integrity });
      assert.equal(verified.integrity.value, receipt.integrity.value);
      assert.ok(
        (statSync(join(receipt.dir, "bin/clock.mjs")).mode & 0o100) !== 0,
        "bin/clock.mjs keeps its owner-exec bit",
      );
      assert.equal(statSync(join(receipt.dir, "lib/time.mjs")).mode & 0o111, 0, "lib/time.mjs stays non-executable");
      assert.equal(
        readFileSync(join(receipt.dir, "package.json"), "utf8"),
        readFileSync(join(payloadOf("clock"), "package.json"), "utf8"),
      );
      assertNoExtractionLeft(scope);

      const again = await retainTarball(scope, tarball, { kind: "capability", key: "demo.clock" });
      assert.equal(again.status, "kept");
      assert.equal(again.tarballIntegrity, receipt.tarballIntegrity);
      assertNoExtractionLeft(scope);
    },
  );

  test(
    "Given the tarball's own sha512 as tarballIntegrity, When it is " + "retained, Then it is retained as without it",
    async () => {
      const tarball = npmPack("echo");
      const integrity = sha512Of(readFileSync(tarball));
      const scope = tempDir("oats-scope-");
      const receipt = await retainTarball(scope, tarball, {
        kind: "capability",
        key: "demo.echo",
        tarballIntegrity: integrity,
      });
      assert.equal(receipt.status, "retained");
      assert.equal(receipt.tarballIntegrity, integrity);
      assertNoExtractionLeft(scope);
      // A package-lock.json integrity may carry several hashes; the strongest is checked.
      const sha256 = ssri.fromData(readFileSync(tarball), { algorithms: ["sha256"] }).toString();
      const both = await retainTarball(scope, tarball, {
        kind: "capability",
        key: "demo.echo",
        tarballIntegrity: `${sha256} ${integrity}`,
      });
      assert.equal(both.status, "kept");
    },
  );

  test(
    "Given a wrong tarballIntegrity, When it is retained, Then " +
      "integrity-mismatch with expected and actual, and nothing is extracted",
    async () => {
      const tarball = npmPack("clock");
      const actual = sha512Of(readFileSync(tarball));
      const wrong = sha512Of(Buffer.from("some other tarball"));
      const error = await refusesUnchanged(
        tarball,
        { kind: "capability", key: "demo.clock", tarballIntegrity: wrong },
        "integrity-mismatch",
        {
          expected: wrong,
          actual,
          reason: "tarball-integrity",
        },
      );
      assert.match(error.message, /nothing was extracted/);
    },
  );

  test(
    "Given a hostile tarball and a wrong tarballIntegrity, When it is " +
      "retained, Then the integrity is refused first: the entries were never read",
    async () => {
      const tarball = hostile([{ name: "package/evil", type: "2", linkname: "/etc/passwd" }]);
      const wrong = sha512Of(Buffer.from("x"));
      await refusesUnchanged(tarball, { ...TREE_REQUEST, tarballIntegrity: wrong }, "integrity-mismatch", {
        expected: wrong,
      });
      // With its true integrity the same tarball reaches extraction, and the entry refusal.
      await refusesUnchanged(
        tarball,
        { ...TREE_REQUEST, tarballIntegrity: sha512Of(readFileSync(tarball)) },
        "artifact-not-contained",
        { reason: "absolute-symlink" },
      );
    },
  );

  test(
    "Given a tar-built tarball of a locked capability, When it is retained " +
      "with its lock, Then it is retained at the lock's integrity with symlink " +
      "text verbatim",
    async () => {
      for (const [name, link, text] of [
        ["clock", "bin/time.mjs", "../lib/time.mjs"],
        ["echo", "bin/say", "echo.mjs"],
      ] as const) {
        const tarball = await tarPack(payloadOf(name));
        const lock = lockOf(name);
        const scope = await populatedScope();
        const receipt = await retainTarball(scope, tarball, {
          id: `demo.${name}`,
          lock,
          tarballIntegrity: sha512Of(readFileSync(tarball)),
        });
        assert.equal(receipt.status, "retained");
        assert.equal(receipt.integrity.format, TREE_LEGACY);
        assert.equal(receipt.integrity.value, lock.capabilities[`demo.${name}`]!.integrity);
        assert.equal(
          receipt.dir,
          join(
            scope,
            ".agents/capabilities/artifacts",
            `demo.${name}`,
            String(lock.capabilities[`demo.${name}`]!.integrity),
          ),
        );
        assert.equal(readlinkSync(join(receipt.dir, link)), text);
        assert.equal(receipt.tarballIntegrity, sha512Of(readFileSync(tarball)));
        // The directory form of the same package names the same revision.
        const fromDir = await retainCapabilityArtifact(scope, payloadOf(name), `demo.${name}`, lock);
        assert.equal(fromDir.status, "kept");
        assertNoExtractionLeft(scope);
      }
    },
  );

  test(
    "Given an npm-packed tarball (symlink dropped) and the directory's lock, " +
      "When it is retained with that lock, Then integrity-mismatch; with a " +
      "lock for the packed tree, Then retained",
    async () => {
      const tarball = npmPack("clock");
      await refusesUnchanged(tarball, { id: "demo.clock", lock: lockOf("clock") }, "integrity-mismatch", {
        expected: lockOf("clock").capabilities["demo.clock"]!.integrity,
      });

      const packedTree = join(tempDir(), "payload");
      cpSync(payloadOf("clock"), packedTree, { recursive: true, verbatimSymlinks: true });
      unlinkSync(join(packedTree, "bin/time.mjs"));
      const lock = lockOf("clock");
      lock.capabilities["demo.clock"]!.integrity = (await digestTree(packedTree, [TREE_LEGACY]))[TREE_LEGACY]!;
      const scope = tempDir("oats-scope-");
      const receipt = await retainTarball(scope, tarball, { id: "demo.clock", lock });
      assert.equal(receipt.status, "retained");
      assert.equal(receipt.integrity.value, lock.capabilities["demo.clock"]!.integrity);
    },
  );

  test(
    "Given a tarball whose provenance disagrees with the lock, When it is " +
      "retained with the lock, Then provenance-mismatch and the store is unchanged",
    async () => {
      const payload = join(tempDir(), "payload");
      cpSync(payloadOf("echo"), payload, { recursive: true, verbatimSymlinks: true });
      const provenancePath = join(payload, ".oats-installation.json");
      writeFileSync(
        provenancePath,
        JSON.stringify(
          { ...JSON.parse(readFileSync(provenancePath, "utf8")), source: "git:https://evil.test/tools.git@v2.0.0" },
          null,
          2,
        ),
      );
      const lock = lockOf("echo");
      lock.capabilities["demo.echo"]!.integrity = (await digestTree(payload, [TREE_LEGACY]))[TREE_LEGACY]!;
      await refusesUnchanged(await tarPack(payload), { id: "demo.echo", lock }, "provenance-mismatch", {
        field: "source",
      });
    },
  );
});

describe("retainTarball: bad requests are refused before anything is read or created", () => {
  test(
    "Given a bad id, lock, integrity form, limit or tarball path, When it is " +
      "retained, Then a typed refusal and nothing created",
    async () => {
      const tarball = npmPack("hello");
      const cases: [RetainTarballRequest, string, Details][] = [
        [{ kind: "capability", key: "Not An Id" }, "invalid-artifact-reference", {}],
        [{ kind: "nonsense" as "capture", key: "x" }, "invalid-artifact-reference", {}],
        [{ id: "demo.hello", lock: { lockfileVersion: 1 } }, "invalid-lock", {}],
        [{ id: "demo.other", lock: fixtureLock() }, "invalid-lock", {}],
        [{ kind: "capture", key: "nightly", expect: "sha256-abc" }, "invalid-artifact-reference", {}],
        [
          { ...TREE_REQUEST, tarballIntegrity: "sha1-2jmj7l5rSw0yVb/vlWAYkK/YBwk=" },
          "invalid-input",
          { reason: "invalid-tarball-integrity" },
        ],
        [{ ...TREE_REQUEST, tarballIntegrity: "sha512-abc" }, "invalid-input", { reason: "invalid-tarball-integrity" }],
        [{ ...TREE_REQUEST, tarballIntegrity: "not an sri" }, "invalid-input", { reason: "invalid-tarball-integrity" }],
        [{ ...TREE_REQUEST, tarballIntegrity: "" }, "invalid-input", { reason: "invalid-tarball-integrity" }],
        [{ ...TREE_REQUEST, limits: { maxEntries: 0 } }, "invalid-input", {}],
        [{ ...TREE_REQUEST, limits: { maxBytes: 1.5 } }, "invalid-input", {}],
      ];
      for (const [request, code, details] of cases) await refusesUnchanged(tarball, request, code, details);
      const missing = join(tempDir(), "missing.tgz");
      const scope = tempDir("oats-fresh-");
      await assert.rejects(retainTarball(scope, missing, TREE_REQUEST), refusal("invalid-input", contractKind));
      await assert.rejects(retainTarball(scope, tempDir(), TREE_REQUEST), refusal("invalid-input", contractKind));
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    "Given .agents/extract is a file or a symlink, When a tarball is " +
      "retained, Then invalid-artifact-store and nothing changes",
    async () => {
      const tarball = npmPack("hello");
      for (const make of ["file", "symlink"] as const) {
        const scope = await populatedScope();
        const extract = join(scope, ".agents/extract");
        if (make === "file") writeFileSync(extract, "not a directory");
        else {
          const elsewhere = tempDir("oats-elsewhere-");
          execFileSync("ln", ["-s", elsewhere, extract]);
        }
        const before = snapshotTree(scope);
        await assert.rejects(
          retainTarball(scope, tarball, { kind: "capability", key: "demo.hello" }),
          refusal("invalid-artifact-store", { path: extract }, contractKind),
        );
        assert.deepEqual(snapshotTree(scope), before);
      }
    },
  );
});

describe("retainTarball: hostile tarballs (generated here) are typed refusals with nothing left behind", () => {
  const outside = `/tmp/oats-escape-${randomBytes(6).toString("hex")}`;
  const cases: {
    name: string;
    entries: RawEntry[];
    code: string;
    reason: string;
    limits?: { maxEntries?: number; maxBytes?: number };
  }[] = [
    {
      name: "an absolute path",
      entries: [{ name: `${outside}/x`, body: "pwned" }],
      code: "artifact-not-contained",
      reason: "absolute-path",
    },
    {
      name: "a .. segment",
      entries: [
        { name: "package/ok", body: "ok" },
        { name: "package/../../escape", body: "pwned" },
      ],
      code: "artifact-not-contained",
      reason: "dot-dot",
    },
    {
      name: "an entry outside package/",
      entries: [
        { name: "package/ok", body: "ok" },
        { name: "other/x", body: "x" },
      ],
      code: "invalid-artifact",
      reason: "outside-prefix",
    },
    {
      name: "an absolute symlink",
      entries: [{ name: "package/passwd", type: "2", linkname: "/etc/passwd" }],
      code: "artifact-not-contained",
      reason: "absolute-symlink",
    },
    {
      name: "an escaping symlink",
      entries: [{ name: "package/lib/etc", type: "2", linkname: "../../etc" }],
      code: "artifact-not-contained",
      reason: "escaping-symlink",
    },
    {
      name: "a file written under a symlink entry",
      entries: [
        { name: "package/lib", type: "2", linkname: "." },
        { name: "package/lib/x", body: "through the link" },
      ],
      code: "artifact-not-contained",
      reason: "through-symlink",
    },
    {
      name: "a hard link",
      entries: [
        { name: "package/a", body: "a" },
        { name: "package/b", type: "1", linkname: "package/a" },
      ],
      code: "invalid-artifact",
      reason: "hard-link",
    },
    {
      name: "a character device",
      entries: [{ name: "package/null", type: "3" }],
      code: "invalid-artifact",
      reason: "special-file",
    },
    {
      name: "a block device",
      entries: [{ name: "package/sda", type: "4" }],
      code: "invalid-artifact",
      reason: "special-file",
    },
    {
      name: "a FIFO",
      entries: [{ name: "package/pipe", type: "6" }],
      code: "invalid-artifact",
      reason: "special-file",
    },
    {
      name: "a duplicate entry",
      entries: [
        { name: "package/a", body: "first" },
        { name: "package/a", body: "second" },
      ],
      code: "invalid-artifact",
      reason: "duplicate-entry",
    },
    {
      name: "a case-fold collision",
      entries: [
        { name: "package/README", body: "upper" },
        { name: "package/readme", body: "lower" },
      ],
      code: "invalid-artifact",
      reason: "case-collision",
    },
    {
      name: "more entries than maxEntries",
      entries: Array.from({ length: 6 }, (_, index) => ({ name: `package/f${index}`, body: String(index) })),
      code: "invalid-artifact",
      reason: "too-many-entries",
      limits: { maxEntries: 5 },
    },
    {
      name: "more expanded bytes than maxBytes across files",
      entries: Array.from({ length: 4 }, (_, index) => ({
        name: `package/f${index}`,
        body: Buffer.alloc(4096, index),
      })),
      code: "invalid-artifact",
      reason: "too-large",
      limits: { maxBytes: 10_000 },
    },
  ];

  for (const each of cases) {
    test(
      `Given a package tarball with ${each.name}, When it is retained, Then ` +
        `${each.code} (${each.reason}) and the store is unchanged`,
      async () => {
        const tarball = hostile(each.entries);
        // details.archive: the extractor refused it, not a later layer (retention's own source check).
        await refusesUnchanged(
          tarball,
          { ...TREE_REQUEST, ...(each.limits ? { limits: each.limits } : {}) },
          each.code,
          {
            reason: each.reason,
            archive: tarball,
          },
        );
        assert.equal(existsSync(outside), false, "an absolute entry was written outside staging");
      },
    );
  }

  test(
    "Given a decompression bomb (200 MiB of zeros gzipped), When it is " +
      "retained with maxBytes 10 MB, Then too-large and nothing is left",
    async () => {
      const size = 200 * 1024 * 1024;
      const bomb = await writeBomb(size);
      assert.ok(statSync(bomb).size < 1024 * 1024, `the bomb is small on disk (${statSync(bomb).size} bytes)`);
      await refusesUnchanged(bomb, { ...TREE_REQUEST, limits: { maxBytes: 10 * 1024 * 1024 } }, "invalid-artifact", {
        reason: "too-large",
        limit: 10 * 1024 * 1024,
      });
    },
  );

  test(
    "Given a truncated tarball (gzip cut short, or a tar whose last entry is " +
      "short), When it is retained, Then invalid-input (corrupt-archive)",
    async () => {
      const good = readFileSync(npmPack("clock"));
      const cutGzip = writeTarball(good.subarray(0, Math.floor(good.length / 2)), "cut.tgz");
      await refusesUnchanged(cutGzip, { kind: "capability", key: "demo.clock" }, "invalid-input", {
        reason: "corrupt-archive",
      });

      const whole = tarBytes([{ name: "package/a", body: Buffer.alloc(3000, 1) }], { end: false });
      const cutTar = writeTarball(whole.subarray(0, 1024), "cut.tar");
      await refusesUnchanged(cutTar, TREE_REQUEST, "invalid-input", { reason: "corrupt-archive" });

      const cutPlainGzip = join(tempDir("oats-cut-"), "cut2.tgz");
      writeFileSync(cutPlainGzip, good);
      truncateSync(cutPlainGzip, good.length - 9);
      await refusesUnchanged(cutPlainGzip, { kind: "capability", key: "demo.clock" }, "invalid-input", {
        reason: "corrupt-archive",
      });
    },
  );

  test(
    "Given a readable archive whose only entry is a global pax header, When " +
      "it is retained as a tarball, Then invalid-artifact (empty-archive)",
    async () => {
      const record = "20 comment=nothing\n";
      await refusesUnchanged(
        hostile([{ name: "pax_global_header", type: "g", body: record }]),
        TREE_REQUEST,
        "invalid-artifact",
        { reason: "empty-archive" },
      );
    },
  );

  test(
    "Given garbage bytes or an archive with no entries, When they are " +
      "retained as a tarball, Then invalid-input (corrupt-archive)",
    async () => {
      await refusesUnchanged(writeTarball(Buffer.alloc(0), "empty.tgz"), TREE_REQUEST, "invalid-input", {
        reason: "corrupt-archive",
      });
      await refusesUnchanged(hostile([]), TREE_REQUEST, "invalid-input", { reason: "corrupt-archive" });
      await refusesUnchanged(writeTarball(randomBytes(8192), "garbage.tgz"), TREE_REQUEST, "invalid-input", {
        reason: "corrupt-archive",
      });
      await refusesUnchanged(
        writeTarball(Buffer.from("definitely not a tarball\n".repeat(40)), "text.tgz"),
        TREE_REQUEST,
        "invalid-input",
        { reason: "corrupt-archive" },
      );
    },
  );
});

describe("extraction staging and cleanup", () => {
  function deadPid(): number {
    const pid = Number(
      spawnSync(process.execPath, ["-e", "process.stdout.write(String(process.pid))"], { encoding: "utf8" }).stdout,
    );
    assert.throws(() => process.kill(pid, 0), { code: "ESRCH" });
    return pid;
  }

  test(
    "Given an extraction staging dir left by a dead process, When oats " +
      "cleanup runs, Then it is removed and a live one is kept",
    async () => {
      const scope = tempDir("oats-scope-");
      const extract = join(scope, ".agents/extract");
      mkdirSync(extract, { recursive: true });
      writeFileSync(join(extract, ".gitignore"), "*\n");
      const dead = join(extract, `.staging-${hostTag()}-${deadPid()}-${randomBytes(6).toString("hex")}`);
      const live = join(extract, stagingName());
      for (const dir of [dead, live]) {
        mkdirSync(join(dir, "bin"), { recursive: true });
        writeFileSync(join(dir, "bin/half-extracted"), "x");
      }
      assert.deepEqual((await fsck(scope)).staging.sort(), [dead, live].sort());

      const run = runOats(["--scope", scope, "--json", "cleanup"]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.deepEqual(JSON.parse(run.stdout).result, { removed: [dead], active: [live] });
      assert.equal(existsSync(dead), false);
      assert.equal(existsSync(live), true);
      assert.deepEqual((await cleanupStaging(scope)).removed, []);
    },
  );

  test(
    "Given something foreign in .agents/extract, When fsck runs, Then it is " + "reported unexpected and never removed",
    async () => {
      const scope = tempDir("oats-scope-");
      const extract = join(scope, ".agents/extract");
      mkdirSync(extract, { recursive: true });
      writeFileSync(join(extract, ".gitignore"), "*\n");
      writeFileSync(join(extract, "stray"), "x");
      assert.deepEqual((await fsck(scope)).unexpected, [join(extract, "stray")]);
      await cleanupStaging(scope);
      assert.equal(existsSync(join(extract, "stray")), true);
    },
  );
});

describe("oats retain <pkg.tgz> (the built CLI)", () => {
  test(
    "Given a tar-built tarball and its lock, When oats retain runs with " +
      "--json, Then exit 0 and tarballIntegrity in the result",
    async () => {
      const tarball = await tarPack(payloadOf("clock"));
      const integrity = sha512Of(readFileSync(tarball));
      const scope = tempDir("oats-cli-");
      const lockFile = join(PACKAGES, "clock/oats-lock.json");
      const run = runOats([
        "--scope",
        scope,
        "--json",
        "retain",
        tarball,
        "--id",
        "demo.clock",
        "--lock",
        lockFile,
        "--tarball-integrity",
        integrity,
      ]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      const envelope = JSON.parse(run.stdout);
      assert.equal(envelope.ok, true);
      assert.equal(envelope.command, "retain");
      assert.equal(envelope.result.tarballIntegrity, integrity);
      assert.equal(envelope.result.status, "retained");
      assert.deepEqual(envelope.result.integrity, {
        format: TREE_LEGACY,
        value: lockOf("clock").capabilities["demo.clock"]!.integrity,
      });
      assertNoExtractionLeft(scope);

      const human = runOats(["--scope", scope, "retain", tarball, "--id", "demo.clock", "--lock", lockFile]);
      assert.equal(human.status, 0, human.stderr);
      assert.match(human.stdout, /^kept/);
      assert.ok(human.stdout.includes(`  tarball   ${integrity}\n`), human.stdout);
    },
  );

  test(
    "Given an npm-packed tarball without a lock, When oats retain --kind " +
      "capture runs, Then it is retained under tree-exec-v1",
    () => {
      const tarball = npmPack("echo");
      const scope = tempDir("oats-cli-");
      const run = runOats(["--scope", scope, "--json", "retain", tarball, "--kind", "capture", "--id", "echo-run"]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      const result = JSON.parse(run.stdout).result;
      assert.equal(result.kind, "capture");
      assert.equal(result.tarballIntegrity, sha512Of(readFileSync(tarball)));
      assert.ok(result.dir.includes("/.agents/captures/artifacts/echo-run/tree-exec-v1/sha256-"));
    },
  );

  test(
    "Given a hostile tarball, When oats retain runs, Then exit 4 with the " +
      "reason in details and the store unchanged",
    async () => {
      const scope = tempDir("oats-cli-");
      assert.equal(
        runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK]).status,
        0,
      );
      const before = snapshotTree(scope);
      const tarball = hostile([
        { name: "package/x", body: "x" },
        { name: "package/../../../etc/cron.d/x", body: "pwned" },
      ]);
      const run = runOats(["--scope", scope, "--json", "retain", tarball, "--id", "demo.hostile"]);
      assert.equal(run.status, 4, run.stdout + run.stderr);
      const envelope = JSON.parse(run.stdout);
      assert.equal(envelope.error.code, "artifact-not-contained");
      assert.equal(envelope.error.details.reason, "dot-dot");
      assert.equal(envelope.error.details.entry, "package/../../../etc/cron.d/x");
      assert.deepEqual(snapshotTree(scope), before);
    },
  );

  test(
    "Given a wrong --tarball-integrity, When oats retain runs, Then exit 5 " +
      "integrity-mismatch; on a directory operand, Then exit 2",
    () => {
      const tarball = npmPack("hello");
      const scope = tempDir("oats-cli-");
      const wrong = sha512Of(Buffer.from("wrong"));
      const run = runOats([
        "--scope",
        scope,
        "--json",
        "retain",
        tarball,
        "--id",
        "demo.hello",
        "--tarball-integrity",
        wrong,
      ]);
      assert.equal(run.status, 5, run.stdout + run.stderr);
      const envelope = JSON.parse(run.stdout);
      assert.equal(envelope.error.code, "integrity-mismatch");
      assert.equal(envelope.error.details.expected, wrong);
      assert.equal(envelope.error.details.actual, sha512Of(readFileSync(tarball)));
      assert.deepEqual(readdirSync(scope), []);

      const usage = runOats([
        "--scope",
        scope,
        "--json",
        "retain",
        FIXTURE_PAYLOAD,
        "--id",
        "demo.hello",
        "--tarball-integrity",
        wrong,
      ]);
      assert.equal(usage.status, 2, usage.stdout + usage.stderr);
      assert.equal(JSON.parse(usage.stdout).error.code, "usage");
      assert.deepEqual(readdirSync(scope), []);
    },
  );
});
