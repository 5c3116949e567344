/**
 * Export and import of retained artifacts:
 * real retained trees, real records and blobs, real tar files. Bundles that
 * a test damages are rewritten at the tar level (entries read with tar's own
 * Header, written back with it), so each case changes exactly one thing. A
 * refused import leaves the target scope byte for byte as it was, with no
 * staging left behind.
 */
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { Header, Pax, type HeaderData } from "tar";
import { exportBundle, importBundle, type ImportReport } from "../src/acquisition/bundle.js";
import { prepareCapture } from "../src/captures/prepare-capture.js";
import { readBlob } from "../src/retention/store/blobs.js";
import type { OatsError } from "../src/core/errors.js";
import { readRecordBytes, readResolution, writeResolution } from "../src/resolution/index.js";
import {
  canonicalJsonBytes,
  listRetained,
  retainCapabilityArtifact,
  retainTree,
  verifyTree,
  type ArtifactReceipt,
} from "../src/retention/index.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, fixtureCopy, fixtureLock, runOats, snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

type Json = any;

// ---------------------------------------------------------------- tar at the entry level

interface TarEntry {
  path: string;
  type: "File" | "Directory" | "SymbolicLink" | "Link";
  mode: number;
  linkpath?: string;
  body: Buffer;
  /** Offset of the body in the archive it was read from. */
  offset?: number;
}

function readTar(bytes: Buffer): TarEntry[] {
  const entries: TarEntry[] = [];
  let offset = 0;
  let extended: HeaderData | undefined;
  while (offset + 512 <= bytes.length) {
    const header = new Header(bytes, offset, extended);
    if (header.nullBlock) break;
    const size = header.size ?? 0;
    const bodyOffset = offset + 512;
    const body = Buffer.from(bytes.subarray(bodyOffset, bodyOffset + size));
    offset = bodyOffset + Math.ceil(size / 512) * 512;
    if (header.type === "ExtendedHeader") {
      extended = Pax.parse(body.toString("utf8"), extended, false);
      continue;
    }
    extended = undefined;
    entries.push({
      path: header.path!,
      type: header.type as TarEntry["type"],
      mode: header.mode ?? 0o644,
      ...(header.linkpath ? { linkpath: header.linkpath } : {}),
      body,
      offset: bodyOffset,
    });
  }
  return entries;
}

function writeTar(entries: readonly TarEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const entry of entries) {
    const data = {
      path: entry.path,
      type: entry.type,
      mode: entry.mode,
      size: entry.type === "File" ? entry.body.length : 0,
      mtime: new Date(0),
      uid: 0,
      gid: 0,
      ...(entry.linkpath ? { linkpath: entry.linkpath } : {}),
    };
    const header = new Header(data);
    if (header.encode())
      blocks.push(new Pax({ path: entry.path, ...(entry.linkpath ? { linkpath: entry.linkpath } : {}) }).encode());
    blocks.push(header.block!);
    if (entry.type === "File") {
      blocks.push(entry.body);
      const rest = entry.body.length % 512;
      if (rest) blocks.push(Buffer.alloc(512 - rest));
    }
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

/** Change one byte of a bundle in place. */
function flip(bytes: Buffer, at: number, mask: number): void {
  bytes.writeUInt8(bytes.readUInt8(at) ^ mask, at);
}

function file(path: string, body: string | Buffer, mode = 0o644): TarEntry {
  return { path, type: "File", mode, body: Buffer.from(body) };
}

function manifestOf(entries: TarEntry[]): Json {
  return JSON.parse(entries.find((entry) => entry.path === "manifest.json")!.body.toString("utf8"));
}

/** Replace the manifest (kept first, written canonically). */
function withManifest(entries: TarEntry[], manifest: Json): TarEntry[] {
  return [
    file("manifest.json", canonicalJsonBytes(manifest)),
    ...entries.filter((entry) => entry.path !== "manifest.json"),
  ];
}

// ---------------------------------------------------------------- fixtures

const TOOL_SCRIPT = "#!/bin/sh\necho tool\n";

/** A second tree: an executable, a nested relative symlink, a plain file. */
function toolTree(): string {
  const dir = join(tempDir("oats-bundle-tool-"), "tool");
  mkdirSync(join(dir, "bin"), { recursive: true });
  mkdirSync(join(dir, "share/doc"), { recursive: true });
  writeFileSync(join(dir, "bin/run"), TOOL_SCRIPT);
  chmodSync(join(dir, "bin/run"), 0o755);
  writeFileSync(join(dir, "share/doc/README"), "the tool\n");
  symlinkSync("../bin/run", join(dir, "share/run"));
  return dir;
}

interface Source {
  readonly scope: string;
  readonly hello: ArtifactReceipt;
  readonly tool: ArtifactReceipt;
}

function refOf(receipt: ArtifactReceipt) {
  return { kind: receipt.kind, key: receipt.key, integrity: `${receipt.integrity.format}:${receipt.integrity.value}` };
}

async function sourceScope(): Promise<Source> {
  const scope = tempDir("oats-bundle-src-");
  const hello = await retainTree(scope, { kind: "capability", key: "demo.hello", source: fixtureCopy() });
  const tool = await retainTree(scope, { kind: "capture", key: "tool", source: toolTree() });
  return { scope, hello, tool };
}

function bundlePath(name = "bundle.tar"): string {
  return join(tempDir("oats-bundle-out-"), name);
}

async function exported(source: Source): Promise<string> {
  const out = bundlePath();
  await exportBundle(source.scope, [refOf(source.hello), refOf(source.tool)], out);
  return out;
}

/** An instance record naming the retained capability (as in resolution-record.test.ts). */
function instanceRecord(hello: ArtifactReceipt): Json {
  const ref = {
    kind: "capability",
    key: "demo.hello",
    integrity: { format: hello.integrity.format, value: hello.integrity.value },
  };
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: "alpha" },
    source: null,
    artifacts: {
      "demo.hello": {
        artifact: ref,
        package: {
          id: "demo.hello-pkg",
          source: "path:/srv/packages/hello",
          version: "1.0.0",
          commit: null,
          integrity: null,
        },
        legacyIntegrity: null,
      },
    },
    config: {
      "/settings/demo.hello/greeting": {
        value: "héllo",
        origin: { kind: "operator", ref: "plan.yaml" },
        constraints: [],
        considered: [],
      },
    },
    bindings: {},
    messaging: null,
    entrypoints: { hello: { artifact: ref, path: "bin/hello.mjs", args: [], role: "command" } },
    capture: null,
    evidence: [],
    unresolved: [],
  };
}

/** A capture prepared in `scope`: a retained capture tree, three pinned blobs, a capture record. */
async function preparedCapture(scope: string) {
  const work = tempDir("oats-bundle-capture-");
  const tree = join(work, "tool");
  mkdirSync(join(tree, "bin"), { recursive: true });
  writeFileSync(join(tree, "bin/run"), "#!/bin/sh\necho report\n");
  chmodSync(join(tree, "bin/run"), 0o755);
  const config = {
    schemaVersion: 1,
    wings: { reports: "internal" },
    repos: {},
    defaults: [],
    fallback: "internal",
    principals: {},
  };
  writeFileSync(join(work, "classification.yaml"), `${JSON.stringify(config, null, 2)}\n`);
  writeFileSync(join(work, "profile.yaml"), "schemaVersion: 1\nretention:\n  keepLast: 3\n");
  const spec = {
    name: "nightly-report",
    executable: { tree: "./tool", path: "bin/run", args: [] },
    target: { wing: "reports" },
    classification: "internal",
    classificationConfig: "./classification.yaml",
    profile: "./profile.yaml",
    env: { LOG_LEVEL: "info" },
  };
  writeFileSync(join(work, "capture.yaml"), `${JSON.stringify(spec, null, 2)}\n`);
  return prepareCapture(scope, join(work, "capture.yaml"));
}

/** A scope that already holds something, so "nothing published" is checked against a store that exists. */
async function occupiedScope(): Promise<string> {
  const scope = tempDir("oats-bundle-dst-");
  await retainTree(scope, { kind: "capture", key: "unrelated", source: toolTree() });
  return scope;
}

/** Import `bytes` as a bundle into an occupied scope; expect `code` and the scope exactly as it was. */
async function refusedImport(bytes: Buffer, code: string, details: Record<string, unknown> = {}): Promise<OatsError> {
  const scope = await occupiedScope();
  const path = bundlePath("damaged.tar");
  writeFileSync(path, bytes);
  const before = snapshotTree(scope);
  let caught: unknown;
  await assert.rejects(importBundle(scope, path), (error) => {
    caught = error;
    return refusal(code, details)(error);
  });
  assert.deepEqual(snapshotTree(scope), before, "nothing published, no staging left");
  assert.equal(existsSync(join(scope, ".agents/extract")), false);
  return caught as OatsError;
}

// ---------------------------------------------------------------- round trips

describe("export and import: round trips", () => {
  test(
    "Given two retained trees (an executable, relative symlinks) When they " +
      "are exported and imported into a fresh scope Then both are retained and " +
      "verify, with exec bits and link text kept",
    async () => {
      const source = await sourceScope();
      const out = await exported(source);
      const entries = readTar(readFileSync(out));
      assert.equal(entries[0]!.path, "manifest.json", "the manifest comes first");

      const target = tempDir("oats-bundle-dst-");
      const report = await importBundle(target, out);
      assert.deepEqual(report.artifacts.map((row) => [row.kind, row.key, row.status]).sort(), [
        ["capability", "demo.hello", "retained"],
        ["capture", "tool", "retained"],
      ]);
      for (const receipt of [source.hello, source.tool]) {
        const verified = await verifyTree(target, receipt);
        assert.equal(verified.integrity.value, receipt.integrity.value);
      }
      const hello = (await verifyTree(target, source.hello)).dir;
      const tool = (await verifyTree(target, source.tool)).dir;
      assert.equal(statSync(join(hello, "bin/hello.mjs")).mode & 0o111, 0o111, "exec bit kept");
      assert.equal(statSync(join(hello, "oats.json")).mode & 0o111, 0, "no exec bit added");
      assert.equal(readlinkSync(join(hello, "current.mjs")), "bin/hello.mjs");
      assert.equal(statSync(join(tool, "bin/run")).mode & 0o100, 0o100);
      assert.ok(lstatSync(join(tool, "share/run")).isSymbolicLink());
      assert.equal(readlinkSync(join(tool, "share/run")), "../bin/run");
      assert.equal(readFileSync(join(tool, "share/run"), "utf8"), TOOL_SCRIPT);
      assert.equal(existsSync(join(target, ".agents/extract")), false, "staging removed");
    },
  );

  test(
    "Given a bundle already imported When it is imported again Then every " +
      "item reports kept and the store is unchanged",
    async () => {
      const source = await sourceScope();
      const out = await exported(source);
      const target = tempDir("oats-bundle-dst-");
      await importBundle(target, out);
      const before = snapshotTree(target);
      const again = await importBundle(target, out);
      assert.deepEqual(
        again.artifacts.map((row) => row.status),
        ["kept", "kept"],
      );
      assert.deepEqual(snapshotTree(target), before);
      // Importing into the scope it came from: kept too.
      assert.deepEqual(
        (await importBundle(source.scope, out)).artifacts.map((row) => row.status),
        ["kept", "kept"],
      );
    },
  );

  test("Given the same refs When they are exported twice Then the bundles are byte-identical", async () => {
    const source = await sourceScope();
    const a = await exported(source);
    const b = await exported(source);
    assert.ok(readFileSync(a).equals(readFileSync(b)));
  });

  test(
    "Given an instance record and a capture record When their ids are " +
      "exported and imported Then the records, every artifact they name and " +
      "every blob they pin arrive and verify",
    async () => {
      const source = await sourceScope();
      const instance = writeResolution(source.scope, instanceRecord(source.hello));
      const capture = await preparedCapture(source.scope);
      assert.ok(capture.blobs.profile !== null);
      const out = bundlePath();
      const exportReport = await exportBundle(source.scope, [instance.id, capture.id], out);
      assert.equal(exportReport.resolutions.length, 2);
      assert.equal(exportReport.blobs.length, 3, "config, profile and spec");
      assert.equal(exportReport.artifacts.length, 2, "the capability and the capture tree (tool was not asked for)");

      const target = tempDir("oats-bundle-dst-");
      const report: ImportReport = await importBundle(target, out);
      assert.deepEqual(
        report.resolutions.map((row) => row.status),
        ["written", "written"],
      );
      assert.deepEqual(
        report.blobs.map((row) => row.status),
        ["written", "written", "written"],
      );
      for (const id of [instance.id, capture.id]) {
        const read = await readResolution(target, id, { verify: true });
        assert.equal(read.verified, true);
      }
      assert.equal(JSON.stringify(readRecordBytes(target, capture.id).record), JSON.stringify(capture.record));
      for (const digest of [capture.blobs.config, capture.blobs.profile!, capture.blobs.spec]) {
        assert.ok(readBlob(target, digest).equals(readBlob(source.scope, digest)));
      }
      assert.equal(listRetained(target).length, 2);
      const again = await importBundle(target, out);
      assert.deepEqual(
        [...again.resolutions, ...again.blobs].map((row) => row.status),
        ["kept", "kept", "kept", "kept", "kept"],
      );
    },
  );

  test(
    "Given a capability revision named by its lock's legacy integrity When " +
      "it is exported Then the bundle names it by its exec digest and the " +
      "import retains it under tree-exec-v1",
    async () => {
      const scope = tempDir("oats-bundle-src-");
      const legacy = await retainCapabilityArtifact(scope, FIXTURE_PAYLOAD, "demo.hello", fixtureLock());
      assert.equal(legacy.integrity.format, "oats.tree-legacy.v0");
      const out = bundlePath();
      const report = await exportBundle(
        scope,
        [{ kind: "capability", key: "demo.hello", integrity: legacy.integrity }],
        out,
      );
      assert.equal(report.artifacts[0]!.integrity, `oats.tree-exec.v1:${legacy.execIntegrity.value}`);
      assert.equal(report.artifacts[0]!.translatedFrom, `oats.tree-legacy.v0:${legacy.integrity.value}`);
      const target = tempDir("oats-bundle-dst-");
      await importBundle(target, out);
      await verifyTree(target, { kind: "capability", key: "demo.hello", integrity: legacy.execIntegrity });
      assert.ok(existsSync(FIXTURE_LOCK));
    },
  );
});

// ---------------------------------------------------------------- damaged bundles

describe("import refuses a damaged bundle and publishes nothing", () => {
  test(
    "Given one byte of a tree's file changed in place When the bundle is " +
      "imported Then integrity-mismatch names the tree and nothing is published",
    async () => {
      const source = await sourceScope();
      const bytes = readFileSync(await exported(source));
      // The capture tree comes second: an importer that published as it verified would already have published the
      // capability.
      const entry = readTar(bytes).find((each) => each.path.endsWith("/share/doc/README"))!;
      flip(bytes, entry.offset!, 0x20);
      const error = await refusedImport(bytes, "integrity-mismatch", { kind: "capture", key: "tool" });
      assert.match(error.message, /capture tool/);
    },
  );

  test(
    "Given a tree's exec bit cleared in the tar header When the bundle is " + "imported Then integrity-mismatch",
    async () => {
      const source = await sourceScope();
      const entries = readTar(readFileSync(await exported(source))).map((entry) =>
        entry.path.endsWith("/bin/run") ? { ...entry, mode: 0o644 } : entry,
      );
      await refusedImport(writeTar(entries), "integrity-mismatch", { kind: "capture", key: "tool" });
    },
  );

  test("Given an extra file inside a tree When the bundle is imported Then integrity-mismatch", async () => {
    const source = await sourceScope();
    const entries = readTar(readFileSync(await exported(source)));
    const tool = manifestOf(entries).artifacts.find((row: Json) => row.key === "tool").path;
    await refusedImport(writeTar([...entries, file(`${tool}/smuggled`, "x")]), "integrity-mismatch", { key: "tool" });
  });

  test(
    "Given a record's bytes changed When the bundle is imported Then " +
      "integrity-mismatch names the record and nothing is published",
    async () => {
      const source = await sourceScope();
      const instance = writeResolution(source.scope, instanceRecord(source.hello));
      const out = bundlePath();
      await exportBundle(source.scope, [instance.id], out);
      const bytes = readFileSync(out);
      const entry = readTar(bytes).find((each) => each.path.startsWith("resolutions/"))!;
      const at = bytes.indexOf("héllo", entry.offset!);
      bytes.write("j", at, "latin1");
      await refusedImport(bytes, "integrity-mismatch", { id: instance.id });
    },
  );

  test(
    "Given a pinned blob's bytes changed When the bundle is imported Then " + "integrity-mismatch names the blob",
    async () => {
      const scope = tempDir("oats-bundle-src-");
      const capture = await preparedCapture(scope);
      const out = bundlePath();
      await exportBundle(scope, [capture.id], out);
      const bytes = readFileSync(out);
      const entry = readTar(bytes).find((each) => each.path === `blobs/${capture.blobs.profile}`)!;
      flip(bytes, entry.offset!, 0x01);
      await refusedImport(bytes, "integrity-mismatch", { digest: capture.blobs.profile });
    },
  );

  test(
    "Given a manifest listing a blob the tar does not hold When the bundle " +
      "is imported Then invalid-input (missing entry)",
    async () => {
      const scope = tempDir("oats-bundle-src-");
      const capture = await preparedCapture(scope);
      const out = bundlePath();
      await exportBundle(scope, [capture.id], out);
      const entries = readTar(readFileSync(out)).filter((entry) => entry.path !== `blobs/${capture.blobs.spec}`);
      await refusedImport(writeTar(entries), "invalid-input", {
        reason: "missing-entry",
        path: `blobs/${capture.blobs.spec}`,
      });
    },
  );

  test(
    "Given a manifest listing a tree the tar does not hold When the bundle " + "is imported Then invalid-input",
    async () => {
      const source = await sourceScope();
      const entries = readTar(readFileSync(await exported(source)));
      const tool = manifestOf(entries).artifacts.find((row: Json) => row.key === "tool").path;
      await refusedImport(writeTar(entries.filter((entry) => !entry.path.startsWith(tool))), "invalid-input", {
        reason: "missing-entry",
        path: tool,
      });
    },
  );

  test(
    "Given an extra file the manifest does not list When the bundle is " +
      "imported Then invalid-input (unlisted entry)",
    async () => {
      const source = await sourceScope();
      const entries = readTar(readFileSync(await exported(source)));
      await refusedImport(writeTar([...entries, file("extra.txt", "surprise\n")]), "invalid-input", {
        reason: "unlisted-entry",
        path: "extra.txt",
      });
      const tree = `artifacts/capture/tool/${"0".repeat(64)}`;
      await refusedImport(writeTar([...entries, file(`${tree}/x`, "x")]), "invalid-input", {
        reason: "unlisted-entry",
        path: tree,
      });
    },
  );

  test("Given a truncated bundle When it is imported Then invalid-input", async () => {
    const source = await sourceScope();
    const bytes = readFileSync(await exported(source));
    const entry = readTar(bytes).find((each) => each.path.endsWith("/bin/hello.mjs"))!;
    await refusedImport(bytes.subarray(0, entry.offset! + 10), "invalid-input");
    await refusedImport(bytes.subarray(0, 700), "invalid-input");
  });

  test("Given garbage or an empty file When it is imported Then invalid-input", async () => {
    const garbage = Buffer.alloc(4096);
    for (let i = 0; i < garbage.length; i++) garbage[i] = (i * 7919 + 13) & 0xff;
    await refusedImport(garbage, "invalid-input");
    await refusedImport(Buffer.from("this is not a tar archive\n"), "invalid-input");
  });

  test(
    "Given a manifest path that does not match its digest layout When the " + "bundle is imported Then invalid-input",
    async () => {
      const source = await sourceScope();
      const entries = readTar(readFileSync(await exported(source)));
      const manifest = manifestOf(entries);
      const row = manifest.artifacts.find((each: Json) => each.key === "tool");
      const moved = `artifacts/capture/tool/sha256-${row.path.split("/").pop()}`;
      const renamed = entries.map((entry) =>
        entry.path.startsWith(row.path) ? { ...entry, path: moved + entry.path.slice(row.path.length) } : entry,
      );
      row.path = moved;
      await refusedImport(writeTar(withManifest(renamed, manifest)), "invalid-input", { reason: "invalid-manifest" });
    },
  );

  test(
    "Given a manifest with an unknown field, a duplicate row, or " +
      "non-canonical bytes When the bundle is imported Then invalid-input",
    async () => {
      const source = await sourceScope();
      const entries = readTar(readFileSync(await exported(source)));
      const manifest = manifestOf(entries);
      await refusedImport(writeTar(withManifest(entries, { ...manifest, note: "hi" })), "invalid-input", {
        reason: "invalid-manifest",
      });
      await refusedImport(
        writeTar(withManifest(entries, { ...manifest, artifacts: [...manifest.artifacts, manifest.artifacts[0]] })),
        "invalid-input",
        { reason: "invalid-manifest" },
      );
      const pretty = [file("manifest.json", `${JSON.stringify(manifest, null, 2)}\n`), ...entries.slice(1)];
      await refusedImport(writeTar(pretty), "invalid-input", { reason: "manifest-not-canonical" });
    },
  );

  test(
    "Given a record whose artifact is not in the bundle When the bundle is " + "imported Then invalid-input",
    async () => {
      const source = await sourceScope();
      const instance = writeResolution(source.scope, instanceRecord(source.hello));
      const out = bundlePath();
      await exportBundle(source.scope, [instance.id], out);
      const entries = readTar(readFileSync(out));
      const manifest = manifestOf(entries);
      const dropped = manifest.artifacts[0].path;
      manifest.artifacts = [];
      await refusedImport(
        writeTar(
          withManifest(
            entries.filter((entry) => !entry.path.startsWith(dropped)),
            manifest,
          ),
        ),
        "invalid-input",
        { reason: "incomplete-resolution" },
      );
    },
  );

  test(
    "Given a target that holds a damaged copy of one of the bundle's trees " +
      "When the bundle is imported Then integrity-mismatch before anything is published",
    async () => {
      const source = await sourceScope();
      const out = await exported(source);
      const target = tempDir("oats-bundle-dst-");
      const damaged = await retainTree(target, { kind: "capture", key: "tool", source: toolTree() });
      writeFileSync(join(damaged.dir, "share/doc/README"), "damaged\n");
      const before = snapshotTree(target);
      await assert.rejects(importBundle(target, out), refusal("integrity-mismatch", { kind: "capture", key: "tool" }));
      assert.deepEqual(
        snapshotTree(target),
        before,
        "the capability was not published and the damaged copy was left alone",
      );
    },
  );

  test(
    "Given a `..` entry When the bundle is imported Then " + "artifact-not-contained and nothing is written",
    async () => {
      const source = await sourceScope();
      const entries = readTar(readFileSync(await exported(source)));
      await refusedImport(writeTar([...entries, file("artifacts/../../escaped", "x")]), "artifact-not-contained");
    },
  );

  test(
    "Given a symlink that stays inside the bundle but leaves its own tree " +
      "When the bundle is imported Then artifact-not-contained",
    async () => {
      const source = await sourceScope();
      const entries = readTar(readFileSync(await exported(source)));
      const manifest = manifestOf(entries);
      const tool = manifest.artifacts.find((row: Json) => row.key === "tool").path;
      // Point share/run at the manifest, five levels up: inside the archive, outside the tree.
      const hostile = entries.map((entry) =>
        entry.path === `${tool}/share/run` ? { ...entry, linkpath: "../../../../../manifest.json" } : entry,
      );
      await refusedImport(writeTar(hostile), "artifact-not-contained");
    },
  );
});

// ---------------------------------------------------------------- export refusals

describe("export refusals", () => {
  test(
    "Given a damaged retained revision When it is exported Then " +
      "integrity-mismatch and no bundle (nor a partial file) is left",
    async () => {
      const source = await sourceScope();
      const damaged = join(source.tool.dir, "share/doc/README");
      chmodSync(damaged, 0o644);
      writeFileSync(damaged, "tampered\n");
      const out = bundlePath();
      await assert.rejects(
        exportBundle(source.scope, [refOf(source.hello), refOf(source.tool)], out),
        refusal("integrity-mismatch", { kind: "capture", key: "tool" }),
      );
      assert.deepEqual(readdirSync(join(out, "..")), [], "no bundle and no temporary file");
    },
  );

  test(
    "Given an existing output file When exporting without force Then " +
      "invalid-input and the file is untouched; with force it is replaced",
    async () => {
      const source = await sourceScope();
      const out = bundlePath();
      writeFileSync(out, "precious\n");
      await assert.rejects(
        exportBundle(source.scope, [refOf(source.tool)], out),
        refusal("invalid-input", { reason: "output-exists" }),
      );
      assert.equal(readFileSync(out, "utf8"), "precious\n");
      assert.deepEqual(readdirSync(join(out, "..")), ["bundle.tar"]);
      await exportBundle(source.scope, [refOf(source.tool)], out, { force: true });
      assert.equal(readTar(readFileSync(out))[0]!.path, "manifest.json");
    },
  );

  test(
    "Given refs that name nothing retained or are malformed When exporting " + "Then the typed refusal and no file",
    async () => {
      const source = await sourceScope();
      const out = bundlePath();
      await assert.rejects(
        exportBundle(
          source.scope,
          [{ kind: "capture", key: "tool", integrity: `oats.tree-exec.v1:sha256-${"a".repeat(64)}` }],
          out,
        ),
        refusal("artifact-not-found"),
      );
      await assert.rejects(
        exportBundle(source.scope, [`sha256-${"b".repeat(64)}`], out),
        refusal("resolution-not-found"),
      );
      await assert.rejects(
        exportBundle(source.scope, ["capture:tool@sha256-abc"], out),
        refusal("invalid-artifact-reference"),
      );
      await assert.rejects(exportBundle(source.scope, [], out), refusal("invalid-input"));
      assert.deepEqual(readdirSync(join(out, "..")), []);
    },
  );
});

// ---------------------------------------------------------------- CLI

describe("oats export / oats import (built CLI)", () => {
  test(
    "Given retained trees When `oats export` and `oats import` run with " +
      "--json Then the round trip reports each item; a tampered bundle exits 5",
    async () => {
      const source = await sourceScope();
      const out = bundlePath();
      const refs = [source.hello, source.tool].map(
        (receipt) => `${receipt.kind}:${receipt.key}@${receipt.integrity.format}:${receipt.integrity.value}`,
      );
      const exportRun = runOats(["--json", "--scope", source.scope, "export", ...refs, "-o", out]);
      assert.equal(exportRun.status, 0, exportRun.stdout + exportRun.stderr);
      const exportEnvelope = JSON.parse(exportRun.stdout);
      assert.equal(exportEnvelope.command, "export");
      assert.equal(exportEnvelope.result.artifacts.length, 2);

      const again = runOats(["--json", "--scope", source.scope, "export", refs[0]!, "-o", out]);
      assert.equal(again.status, 4, "refuses to overwrite without --force");
      assert.equal(JSON.parse(again.stdout).error.code, "invalid-input");

      const target = tempDir("oats-bundle-dst-");
      const importRun = runOats(["--json", "--scope", target, "import", out]);
      assert.equal(importRun.status, 0, importRun.stdout + importRun.stderr);
      const envelope = JSON.parse(importRun.stdout);
      assert.equal(envelope.command, "import");
      assert.deepEqual(
        envelope.result.artifacts.map((row: Json) => row.status),
        ["retained", "retained"],
      );
      const human = runOats(["--scope", target, "import", out]);
      assert.equal(human.status, 0);
      assert.match(human.stdout, /^kept capability demo\.hello oats\.tree-exec\.v1:sha256-[0-9a-f]{64}$/m);

      const bytes = readFileSync(out);
      const entry = readTar(bytes).find((each) => each.path.endsWith("/bin/run"))!;
      flip(bytes, entry.offset!, 0x01);
      const tampered = bundlePath("tampered.tar");
      writeFileSync(tampered, bytes);
      const fresh = tempDir("oats-bundle-dst-");
      const before = snapshotTree(fresh);
      const refused = runOats(["--json", "--scope", fresh, "import", tampered]);
      assert.equal(refused.status, 5, refused.stdout);
      assert.equal(JSON.parse(refused.stdout).error.code, "integrity-mismatch");
      assert.deepEqual(snapshotTree(fresh), before);
    },
  );
});
