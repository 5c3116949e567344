/**
 * Bounded extraction and walks: archives and trees whose cost
 * would grow much faster than their size are refused, with typed refusals,
 * before the work that would blow up. Hostile archives are written here as
 * raw ustar/pax headers (test/support/raw-tar.ts). The CLI runs in a child
 * node with a 128 MB heap, so a regression shows as a crash (SIGABRT, exit
 * 134) rather than as slowness; no test measures time.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { importBundle, retainTarball } from "../src/acquisition/index.js";
import { TREE_EXEC, digestTree, retainTree, verifyTree } from "../src/retention/index.js";
import { FIXTURE_PAYLOAD, REPO, snapshotTree, tempDir } from "./helpers.js";
import { deepEntries, gzipTar, tarBytes, ustarHeader } from "./support/raw-tar.js";
import { refusal } from "./support/refusals.js";
import { populatedScope } from "./support/scopes.js";

const SMALL_HEAP = "--max-old-space-size=128";
/** An 800 KB pax path ("a/a/a/..."), the attack this guards against: about 1 KB gzipped. */
const LONG_PATH = `package/${"a/".repeat(400_000)}f`;

function writeFile(bytes: Buffer, name: string): string {
  const file = join(tempDir("oats-limits-"), name);
  writeFileSync(file, bytes);
  return file;
}

/** Run the built CLI in a child node with a 128 MB heap; its JSON envelope. */
function smallHeapOats(scope: string, args: string[]) {
  const run = spawnSync(
    process.execPath,
    [SMALL_HEAP, join(REPO, "dist/cli/bin.js"), "--json", "--scope", scope, ...args],
    { encoding: "utf8", maxBuffer: 1 << 24 },
  );
  assert.equal(run.signal, null, `the CLI died of ${run.signal}: ${run.stderr.slice(0, 2000)}`);
  const envelope = JSON.parse(run.stdout) as {
    ok: boolean;
    error?: { code: string; details: Record<string, unknown> };
    result?: Record<string, unknown>;
  };
  return { status: run.status, envelope, stderr: run.stderr };
}

function assertNoStaging(scope: string): void {
  assert.equal(existsSync(join(scope, ".agents/extract")), false, "the extraction store was left behind");
  assert.deepEqual(
    snapshotTree(scope).filter((row) => /(^|\/)\.(staging|lock)-/.test(row.split(" ")[1] ?? "")),
    [],
    "staging was left behind",
  );
}

/** The CLI refuses with invalid-artifact and `details`, exit 4, the store byte-for-byte as it was, no staging left. */
async function cliRefuses(args: string[], details: Record<string, unknown>): Promise<Record<string, unknown>> {
  const scope = await populatedScope();
  const before = snapshotTree(scope);
  const run = smallHeapOats(scope, args);
  assert.equal(run.status, 4, JSON.stringify(run.envelope).slice(0, 2000));
  assert.equal(run.envelope.ok, false);
  assert.equal(run.envelope.error!.code, "invalid-artifact");
  for (const [key, value] of Object.entries(details))
    assert.deepEqual(run.envelope.error!.details[key], value, `details.${key}`);
  assert.deepEqual(snapshotTree(scope), before, "the store changed although the request was refused");
  assertNoStaging(scope);
  return run.envelope.error!.details;
}

/** `levels` nested directories named d, with a file at the bottom, made by a child that descends with chdir (the path
 * is longer than PATH_MAX). */
function deepDirectory(levels: number): string {
  const root = join(tempDir("oats-deep-"), "tree");
  mkdirSync(root);
  const script =
    'const fs = require("fs"); process.chdir(process.argv[1]); for (let i = ' +
    '0; i < Number(process.argv[2]); i++) { fs.mkdirSync("d"); ' +
    'process.chdir("d"); } fs.writeFileSync("f", "bottom\\n");';
  execFileSync(process.execPath, ["-e", script, root, String(levels)]);
  return root;
}

/** helpers' rmSync cannot take a tree deeper than PATH_MAX; rm -rf can. */
function removeDeep(path: string): void {
  execFileSync("rm", ["-rf", "--", path]);
}

describe("archive limits: name bytes, depth, header bytes (a 128 MB heap)", () => {
  test(
    "Given a 1 KB package tarball whose one pax path is 800 KB, When `oats " +
      "retain` runs, Then invalid-artifact header-too-large, quickly and " +
      "within the heap, nothing left behind",
    async () => {
      const tarball = writeFile(gzipTar([{ name: "f", paxPath: LONG_PATH, body: "x" }]), "pax.tgz");
      assert.ok(lstatSync(tarball).size < 2048, "the attack is about a kilobyte");
      const details = await cliRefuses(["retain", tarball, "--id", "demo.hostile"], {
        reason: "header-too-large",
        limit: 65536,
        type: "ExtendedHeader",
      });
      assert.ok((details.size as number) > 800_000);
    },
  );

  test(
    "Given the same tarball and a header limit that admits it, When `oats " +
      "retain` runs, Then the name itself is refused (path-too-long) before it " +
      "is split",
    async () => {
      const tarball = writeFile(gzipTar([{ name: "f", paxPath: LONG_PATH, body: "x" }]), "pax.tgz");
      const details = await cliRefuses(
        ["retain", tarball, "--id", "demo.hostile", "--max-header-bytes", String(1 << 20)],
        { reason: "path-too-long", limit: 4096, length: Buffer.byteLength(LONG_PATH) },
      );
      assert.ok(String(details.entry).length < 400, "the refusal shows only the start of the name");
    },
  );

  test(
    "Given a 1 KB gzipped bundle whose one pax path is 800 KB, When `oats " +
      "import` runs, Then invalid-artifact header-too-large, and path-too-long " +
      "with the header limit raised",
    async () => {
      const bundle = writeFile(
        gzipTar([{ name: "f", paxPath: LONG_PATH.slice("package/".length), body: "x" }]),
        "bundle.tar",
      );
      await cliRefuses(["import", bundle], { reason: "header-too-large", limit: 65536 });
      await cliRefuses(["import", bundle, "--max-header-bytes", String(1 << 20)], {
        reason: "path-too-long",
        limit: 4096,
      });
    },
  );

  test(
    "Given 3,000 entries at depth 1,900, When `oats retain` and `oats " +
      "import` run, Then invalid-artifact too-deep naming the entry and the " +
      "limit, nothing left behind",
    async () => {
      const tarball = writeFile(gzipTar(deepEntries("package", 1900, 3000)), "deep.tgz");
      const details = await cliRefuses(["retain", tarball, "--id", "demo.hostile"], {
        reason: "too-deep",
        limit: 256,
        depth: 1899,
      });
      assert.match(String(details.entry), /^package\/d\/d\//);
      const bundle = writeFile(gzipTar(deepEntries("trees", 1900, 3000)), "deep.tar");
      await cliRefuses(["import", bundle], { reason: "too-deep", limit: 256, depth: 1900 });
      await cliRefuses(["retain", tarball, "--id", "demo.hostile", "--max-depth", "100"], {
        reason: "too-deep",
        limit: 100,
      });
    },
  );

  test(
    "Given a symlink whose text is longer than the name limit, When it is " +
      "retained as a tarball, Then invalid-artifact path-too-long",
    async () => {
      const target = `${"x/".repeat(40)}y`;
      const tarball = writeFile(gzipTar([{ name: "package/link", type: "2", linkname: target }]), "link.tgz");
      const scope = await populatedScope();
      const before = snapshotTree(scope);
      await assert.rejects(
        retainTarball(scope, tarball, { kind: "capability", key: "demo.hostile", limits: { maxPathBytes: 64 } }),
        refusal("invalid-artifact", { reason: "path-too-long", limit: 64, length: target.length }),
      );
      assert.deepEqual(snapshotTree(scope), before);
      assertNoStaging(scope);
    },
  );

  test(
    "Given a GNU long-name header over the header limit, When it is retained " +
      "as a tarball, Then invalid-artifact header-too-large",
    async () => {
      const name = Buffer.from(`package/${"n".repeat(2000)}\0`);
      const bytes = Buffer.concat([
        ustarHeader({ name: "././@LongLink", type: "L" }, name.length),
        name,
        Buffer.alloc((512 - (name.length % 512)) % 512),
        tarBytes([{ name: "package/f", body: "x" }]),
      ]);
      const tarball = writeFile(bytes, "longlink.tar");
      const scope = tempDir("oats-scope-");
      await assert.rejects(
        retainTarball(scope, tarball, { kind: "capability", key: "demo.hostile", limits: { maxHeaderBytes: 1024 } }),
        refusal("invalid-artifact", { reason: "header-too-large", limit: 1024 }),
      );
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    "Given limits that are not positive integers, When they are used, Then " +
      "invalid-input from the library and a usage error (exit 2) from the CLI, " +
      "before anything is read",
    async () => {
      const tarball = writeFile(gzipTar([{ name: "package/f", body: "x" }]), "ok.tgz");
      const scope = tempDir("oats-scope-");
      for (const limits of [
        { maxDepth: 0 },
        { maxPathBytes: 1.5 },
        { maxHeaderBytes: -1 },
        { maxEntries: "9" as unknown as number },
      ]) {
        await assert.rejects(
          retainTarball(scope, tarball, { kind: "capability", key: "demo.x", limits }),
          refusal("invalid-input", { reason: "invalid-limit" }),
        );
        await assert.rejects(
          importBundle(scope, tarball, { limits }),
          refusal("invalid-input", { reason: "invalid-limit" }),
        );
      }
      assert.deepEqual(readdirSync(scope), []);
      const run = spawnSync(
        process.execPath,
        [
          join(REPO, "dist/cli/bin.js"),
          "--json",
          "--scope",
          scope,
          "retain",
          tarball,
          "--id",
          "demo.x",
          "--max-depth",
          "0",
        ],
        { encoding: "utf8" },
      );
      assert.equal(run.status, 2, run.stdout);
      const dir = spawnSync(
        process.execPath,
        [
          join(REPO, "dist/cli/bin.js"),
          "--json",
          "--scope",
          scope,
          "retain",
          FIXTURE_PAYLOAD,
          "--id",
          "demo.x",
          "--max-entries",
          "5",
        ],
        { encoding: "utf8" },
      );
      assert.equal(dir.status, 2, "archive-only limits on a directory retain are a usage error");
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    "Given an archive 300 levels deep and --max-depth 300, When it is " +
      "retained, Then it is admitted and verifies under the same limit (and is " +
      "too deep for the default)",
    async () => {
      const tarball = writeFile(gzipTar(deepEntries("package", 301, 5)), "deep300.tgz");
      const scope = tempDir("oats-scope-");
      const run = smallHeapOats(scope, ["retain", tarball, "--id", "demo.deep", "--max-depth", "300"]);
      assert.equal(run.status, 0, JSON.stringify(run.envelope));
      const integrity = run.envelope.result!.integrity as { format: string; value: string };
      const ref = {
        kind: "capability" as const,
        key: "demo.deep",
        integrity: `${integrity.format}:${integrity.value}`,
      };
      await verifyTree(scope, ref, { maxDepth: 300 });
      await assert.rejects(verifyTree(scope, ref), refusal("invalid-artifact", { reason: "too-deep", limit: 256 }));
    },
  );
});

describe("tree walk depth: retain, digest and verify of a directory 3,000 levels deep", () => {
  test(
    "Given a source 3,000 levels deep, When it is retained, digested or " +
      "verified, Then invalid-artifact too-deep each time, never " +
      "internal-error or a stack overflow",
    async () => {
      const deep = deepDirectory(3000);
      try {
        const scope = await populatedScope();
        const before = snapshotTree(scope);
        await assert.rejects(
          retainTree(scope, { kind: "capability", key: "demo.deep", source: deep }),
          refusal("invalid-artifact", { reason: "too-deep", limit: 256, depth: 257 }),
        );
        assert.deepEqual(snapshotTree(scope), before, "a refused retain changed the store");
        await assert.rejects(digestTree(deep), refusal("invalid-artifact", { reason: "too-deep", limit: 256 }));
        // With the limit raised the same tree digests: the walk keeps its own stack, and opens each directory inside
        // its parent, so no path is longer than PATH_MAX.
        assert.match((await digestTree(deep, [TREE_EXEC], { maxDepth: 5000 }))[TREE_EXEC]!, /^sha256-[0-9a-f]{64}$/);

        // verify: a retained revision replaced by the deep tree.
        const shallow = tempDir("oats-src-");
        writeFileSync(join(shallow, "f"), "x");
        const receipt = await retainTree(scope, { kind: "capability", key: "demo.deep", source: shallow });
        rmSync(receipt.dir, { recursive: true });
        renameSync(deep, receipt.dir);
        const ref = {
          kind: "capability" as const,
          key: "demo.deep",
          integrity: `${TREE_EXEC}:${receipt.integrity.value}`,
        };
        try {
          await assert.rejects(verifyTree(scope, ref), refusal("invalid-artifact", { reason: "too-deep", limit: 256 }));
          const run = smallHeapOats(scope, ["verify", "demo.deep", "--integrity", ref.integrity]);
          assert.equal(run.status, 4);
          assert.equal(run.envelope.error!.code, "invalid-artifact");
          const digest = smallHeapOats(scope, ["digest", receipt.dir]);
          assert.equal(digest.envelope.error!.code, "invalid-artifact");
        } finally {
          removeDeep(receipt.dir);
        }
      } finally {
        removeDeep(deep);
      }
    },
  );
});

describe("positive control: a real package tree under the default limits", () => {
  test(
    "Given this project's node_modules as a package tarball, When it is " +
      "retained under the default limits, Then it is admitted and hashes as " +
      "the directory does; the adopted root is 0555 like a copied one",
    async () => {
      const nodeModules = join(REPO, "node_modules");
      const tarball = join(tempDir("oats-nm-"), "node_modules.tgz");
      // GNU tar, as a real packer writes archives (long names as GNU long-name headers); hard links (esbuild has some)
      // as files, as npm packs them.
      execFileSync("tar", [
        "--hard-dereference",
        "-czf",
        tarball,
        "-C",
        REPO,
        "--transform",
        "s,^node_modules,package,",
        "node_modules",
      ]);
      const scope = tempDir("oats-scope-");
      const adopted = await retainTarball(scope, tarball, { kind: "capability", key: "demo.node-modules" });
      const expected = (await digestTree(nodeModules))[TREE_EXEC];
      assert.equal(adopted.integrity.value, expected);
      await verifyTree(scope, {
        kind: "capability",
        key: "demo.node-modules",
        integrity: `${TREE_EXEC}:${adopted.integrity.value}`,
      });
      const copied = await retainTree(scope, {
        kind: "capability",
        key: "demo.node-modules-copy",
        source: nodeModules,
      });
      assert.equal(copied.integrity.value, expected);
      assert.equal(lstatSync(adopted.dir).mode & 0o7777, 0o555, "adopted root: read-only, as every published revision");
      assert.equal(lstatSync(adopted.dir).mode & 0o7777, lstatSync(copied.dir).mode & 0o7777);
      assertNoStaging(scope);
    },
  );
});
