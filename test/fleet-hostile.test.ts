/**
 * The mapping (pure) and pulls of hostile manifests: each crafted with the
 * registry client directly (blobs and manifest put into a real
 * docker-registry), then pulled with the library into an occupied scope,
 * which must be byte-for-byte unchanged after the typed refusal.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { pullFromRegistry } from "../src/fleet/pull.js";
import {
  ANNOTATION_INTEGRITY,
  ANNOTATION_KEY,
  ANNOTATION_KIND,
  BLOB_MEDIA_TYPE,
  EMPTY_CONFIG,
  OCI_MANIFEST_MEDIA_TYPE,
  TREES_ARTIFACT_TYPE,
  encodeManifest,
  ociDigest,
  parsePulledManifest,
  resolutionManifest,
  treesManifest,
} from "../src/fleet/mapping.js";
import { openRegistry } from "../src/fleet/target.js";
import { putManifest } from "../src/oci/manifests.js";
import { bufferSource, putBlob } from "../src/oci/upload.js";
import { digestTree, retainTree } from "../src/retention/index.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { tarBytes, type RawEntry } from "./support/raw-tar.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";
import { refusal, expectRefusal } from "./support/refusals.js";

const HEX = (c: string) => c.repeat(64);

describe("the mapping (pure)", () => {
  const record = Buffer.from('{"a":1}');
  const id = `sha256-${ociDigest(record).slice(7)}`;
  const treeA = {
    kind: "capture" as const,
    key: "a",
    integrity: `oats.tree-exec.v1:sha256-${HEX("a")}`,
    digest: `sha256:${HEX("1")}`,
    size: 10,
  };
  const treeB = {
    kind: "capability" as const,
    key: "b",
    integrity: `oats.tree-exec.v1:sha256-${HEX("b")}`,
    digest: `sha256:${HEX("2")}`,
    size: 20,
  };
  const blobs = [
    { blob: `sha256-${HEX("d")}`, size: 3 },
    { blob: `sha256-${HEX("c")}`, size: 4 },
  ];

  test(
    "Given the same resolution in any input order When it is mapped Then the " +
      "manifest bytes (and digest) are the same, canonical, with sorted layers",
    () => {
      const one = encodeManifest(
        resolutionManifest({ id, recordBytes: record, capture: "a", trees: [treeA, treeB], blobs }),
      );
      const two = encodeManifest(
        resolutionManifest({
          id,
          recordBytes: record,
          capture: "a",
          trees: [treeB, treeA],
          blobs: [...blobs].reverse(),
        }),
      );
      assert.equal(one.digest, two.digest);
      assert.ok(one.bytes.equals(two.bytes));
      const parsed = JSON.parse(one.bytes.toString());
      assert.equal(one.bytes.toString(), `${JSON.stringify(parsed)}\n`, "oats.json.v1: no whitespace, one trailing LF");
      assert.deepEqual(
        Object.keys(parsed),
        ["annotations", "artifactType", "config", "layers", "mediaType", "schemaVersion"],
        "sorted keys",
      );
      assert.deepEqual(
        parsed.layers.map((layer: { digest: string }) => layer.digest),
        [treeB.digest, treeA.digest, `sha256:${HEX("c")}`, `sha256:${HEX("d")}`],
      );
      assert.equal(parsed.config.digest, `sha256:${id.slice(7)}`, "the config digest is the resolution id");
      // And it reads back as what was mapped.
      const back = parsePulledManifest(one.bytes, "test");
      assert.equal(back.resolution?.id, id);
      assert.equal(back.layers.length, 4);
    },
  );

  test("Given record bytes that are not the id's When mapped Then it is an internal error, never a manifest", () => {
    assert.throws(
      () => resolutionManifest({ id: `sha256-${HEX("0")}`, recordBytes: record, capture: null, trees: [], blobs: [] }),
      refusal("internal-error"),
    );
  });

  const refusedParse = (manifest: unknown, reason: string) =>
    assert.throws(
      () => parsePulledManifest(Buffer.from(JSON.stringify(manifest)), "test"),
      refusal("invalid-input", reason),
      reason,
    );
  const good = () => JSON.parse(encodeManifest(treesManifest([treeA])).bytes.toString());

  test(
    "Given manifests with an unknown media type, artifactType, config or " +
      "layer type When read Then each is refused (unknown-media-type)",
    () => {
      refusedParse(
        { ...good(), mediaType: "application/vnd.docker.distribution.manifest.v2+json" },
        "unknown-media-type",
      );
      refusedParse({ ...good(), artifactType: "application/vnd.example+json" }, "unknown-media-type");
      refusedParse(
        {
          ...good(),
          config: { mediaType: "application/vnd.oci.image.config.v1+json", digest: `sha256:${HEX("e")}`, size: 2 },
        },
        "unknown-media-type",
      );
      refusedParse(
        { ...good(), layers: [{ ...good().layers[0], mediaType: "application/vnd.oci.image.layer.v1.tar+gzip" }] },
        "unknown-media-type",
      );
    },
  );

  test("Given malformed layers When read Then each is refused before any blob is fetched", () => {
    const layer = good().layers[0];
    refusedParse(
      { ...good(), layers: [{ ...layer, annotations: { ...layer.annotations, [ANNOTATION_KIND]: "secrets" } }] },
      "invalid-manifest",
    );
    refusedParse(
      { ...good(), layers: [{ ...layer, annotations: { ...layer.annotations, [ANNOTATION_KEY]: "../up" } }] },
      "invalid-manifest",
    );
    refusedParse(
      {
        ...good(),
        layers: [{ ...layer, annotations: { ...layer.annotations, [ANNOTATION_INTEGRITY]: `sha256-${HEX("a")}` } }],
      },
      "invalid-manifest",
    );
    refusedParse({ ...good(), layers: [layer, layer] }, "invalid-manifest");
    refusedParse(
      {
        ...good(),
        layers: [
          {
            mediaType: BLOB_MEDIA_TYPE,
            digest: `sha256:${HEX("a")}`,
            size: 1,
            annotations: { "vnd.oats.blob": `sha256-${HEX("b")}` },
          },
        ],
      },
      "invalid-manifest",
    );
    refusedParse(
      {
        ...good(),
        layers: [
          {
            mediaType: BLOB_MEDIA_TYPE,
            digest: `sha256:${HEX("a")}`,
            size: 17 << 20,
            annotations: { "vnd.oats.blob": `sha256-${HEX("a")}` },
          },
        ],
      },
      "too-large",
    );
    refusedParse({ ...good(), layers: [{ ...layer, urls: ["https://elsewhere.example/x"] }] }, "invalid-manifest");
    refusedParse({ ...good(), extra: true }, "invalid-manifest");
  });

  test("Given a manifest over 4 MiB When read Then it is refused by size before it is parsed", () => {
    const big = Buffer.alloc((4 << 20) + 1, 0x20);
    assert.throws(
      () => parsePulledManifest(big, "test"),
      (error: unknown) => error instanceof OatsError && error.details["reason"] === "manifest-too-large",
    );
  });
});

let registry: Registry | null = null;
const skip = registryBinary() === null ? NO_REGISTRY : false;
before(async () => {
  if (!skip) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
});

/** Put a trees manifest whose layers are `layers` (each entries as a tar, claiming an integrity); returns the pull
 * reference. */
async function craftedLayers(
  repository: string,
  layers: { key: string; entries: RawEntry[]; integrity: string }[],
): Promise<string> {
  const reference = registry!.ref(repository, ":crafted");
  const { session } = openRegistry(reference);
  await putBlob(session, bufferSource(EMPTY_CONFIG, ociDigest(EMPTY_CONFIG)));
  const trees = [];
  for (const layer of layers) {
    const bytes = tarBytes(layer.entries);
    await putBlob(session, bufferSource(bytes, ociDigest(bytes)));
    trees.push({
      kind: "capture" as const,
      key: layer.key,
      integrity: layer.integrity,
      digest: ociDigest(bytes),
      size: bytes.length,
    });
  }
  await putManifest(session, "crafted", encodeManifest(treesManifest(trees)).bytes, OCI_MANIFEST_MEDIA_TYPE);
  return reference;
}

function craftedTrees(
  repository: string,
  entries: RawEntry[],
  integrity = `oats.tree-exec.v1:sha256-${HEX("a")}`,
): Promise<string> {
  return craftedLayers(repository, [{ key: "evil", entries, integrity }]);
}

async function occupiedScope(): Promise<string> {
  const scope = join(tempDir("oats-fleet-hostile-"), "scope");
  mkdirSync(scope);
  const tool = join(tempDir("oats-fleet-tool-"), "tool");
  mkdirSync(tool);
  writeFileSync(join(tool, "run"), "#!/bin/sh\n");
  await retainTree(scope, { kind: "capture", key: "unrelated", source: tool });
  return scope;
}

async function refusedPull(
  reference: string,
  code: string,
  reason: string,
): Promise<{ scope: string; error: OatsError }> {
  const scope = await occupiedScope();
  const before = snapshotTree(scope);
  const error = await expectRefusal(pullFromRegistry(scope, reference), code, reason);
  assert.deepEqual(snapshotTree(scope), before, "the scope is byte-for-byte as it was");
  return { scope, error };
}

describe("pulls of hostile layers from a real registry", { skip }, () => {
  test(
    "Given a tree layer whose tar climbs out with .. When pulled Then " +
      "artifact-not-contained, nothing written outside staging, nothing published",
    async () => {
      const reference = await craftedTrees("hostile/dotdot", [
        { name: "./", type: "5" },
        { name: "../../../../escaped-by-fleet", body: "owned\n" },
      ]);
      const { scope } = await refusedPull(reference, "artifact-not-contained", "dot-dot");
      assert.equal(existsSync(join(scope, "..", "escaped-by-fleet")), false);
      assert.equal(existsSync(join(scope, ".agents/escaped-by-fleet")), false);
    },
  );

  test(
    "Given a tree layer holding a hard link When pulled Then " + "invalid-artifact (hard-link) and nothing published",
    async () => {
      const reference = await craftedTrees("hostile/hardlink", [
        { name: "a", body: "x" },
        { name: "b", type: "1", linkname: "a" },
      ]);
      await refusedPull(reference, "invalid-artifact", "hard-link");
    },
  );

  test("Given a tree layer with an absolute name or an escaping symlink When pulled Then each is refused", async () => {
    await refusedPull(
      await craftedTrees("hostile/absolute", [{ name: "/etc/oats-fleet", body: "x" }]),
      "artifact-not-contained",
      "absolute-path",
    );
    await refusedPull(
      await craftedTrees("hostile/symlink", [{ name: "link", type: "2", linkname: "../../outside" }]),
      "artifact-not-contained",
      "escaping-symlink",
    );
  });

  test(
    "Given a good tree layer and a well-formed one whose tree is not the " +
      "integrity its annotation claims When pulled Then integrity-mismatch in " +
      "staging, and not even the good tree is published",
    async () => {
      const good = join(tempDir("oats-fleet-good-"), "tree");
      mkdirSync(good);
      writeFileSync(join(good, "run"), "#!/bin/sh\n", { mode: 0o755 });
      const integrity = `oats.tree-exec.v1:${(await digestTree(good))["oats.tree-exec.v1"]}`;
      const entries: RawEntry[] = [
        { name: "./", type: "5" },
        { name: "run", body: "#!/bin/sh\n", mode: 0o755 },
      ];
      // Layers are sorted by kind and key: "aaa-good" is published first by an importer that publishes as it verifies.
      const reference = await craftedLayers("hostile/claim", [
        { key: "aaa-good", entries, integrity },
        { key: "evil", entries, integrity: `oats.tree-exec.v1:sha256-${HEX("a")}` },
      ]);
      const scope = await occupiedScope();
      const before = snapshotTree(scope);
      await assert.rejects(pullFromRegistry(scope, reference), refusal("integrity-mismatch", { key: "evil" }));
      assert.deepEqual(snapshotTree(scope), before);
    },
  );

  test(
    "Given a manifest whose layer the registry does not serve When pulled " +
      "Then blob-not-found and nothing published",
    async () => {
      const reference = registry!.ref("hostile/missing", ":crafted");
      const { session } = openRegistry(reference);
      await putBlob(session, bufferSource(EMPTY_CONFIG, ociDigest(EMPTY_CONFIG)));
      // The registry only accepts a manifest whose blobs it has: push one, then remove the layer's bytes from its
      // storage.
      const layer = tarBytes([{ name: "run", body: "x" }]);
      await putBlob(session, bufferSource(layer, ociDigest(layer)));
      const manifest = treesManifest([
        {
          kind: "capture",
          key: "evil",
          integrity: `oats.tree-exec.v1:sha256-${HEX("a")}`,
          digest: ociDigest(layer),
          size: layer.length,
        },
      ]);
      await putManifest(session, "crafted", encodeManifest(manifest).bytes, OCI_MANIFEST_MEDIA_TYPE);
      const { rmSync } = await import("node:fs");
      rmSync(join(registry!.blobPath(ociDigest(layer)), ".."), { recursive: true });
      const scope = await occupiedScope();
      const before = snapshotTree(scope);
      await assert.rejects(
        pullFromRegistry(scope, reference),
        (error: unknown) =>
          error instanceof OatsError && (error.code === "blob-not-found" || error.code === "registry-refused"),
      );
      assert.deepEqual(snapshotTree(scope), before);
    },
  );

  test(
    "Given an unknown layer media type in a registry's manifest When pulled " +
      "Then invalid-input (unknown-media-type) before any blob is fetched",
    async () => {
      const reference = registry!.ref("hostile/media", ":crafted");
      const { session } = openRegistry(reference);
      const layer = tarBytes([{ name: "run", body: "x" }]);
      await putBlob(session, bufferSource(layer, ociDigest(layer)));
      await putBlob(session, bufferSource(EMPTY_CONFIG, ociDigest(EMPTY_CONFIG)));
      const manifest = {
        schemaVersion: 2,
        mediaType: OCI_MANIFEST_MEDIA_TYPE,
        artifactType: TREES_ARTIFACT_TYPE,
        config: { mediaType: "application/vnd.oci.empty.v1+json", digest: ociDigest(EMPTY_CONFIG), size: 2 },
        layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", digest: ociDigest(layer), size: layer.length }],
      };
      await putManifest(session, "crafted", Buffer.from(JSON.stringify(manifest)), OCI_MANIFEST_MEDIA_TYPE);
      await refusedPull(reference, "invalid-input", "unknown-media-type");
    },
  );
});
