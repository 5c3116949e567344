/**
 * A registry that declares too much: thousands of layers, or sizes no pull
 * could ever hold (one layer of 2^53 bytes, or many large ones together).
 * Each pull is refused from the manifest alone, with a typed refusal, before
 * any blob is asked for: the registry here records every request, and the
 * test finds no blob among them.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  BLOB_MEDIA_TYPE,
  EMPTY_CONFIG,
  MAX_LAYERS,
  OCI_MANIFEST_MEDIA_TYPE,
  RESOLUTION_MEDIA_TYPE,
  TREE_MEDIA_TYPE,
  TREES_ARTIFACT_TYPE,
  pullByteBudget,
  treesManifest,
} from "../src/fleet/mapping.js";
import { pullFromRegistry } from "../src/fleet/pull.js";
import { DEFAULT_EXTRACT_LIMITS } from "../src/acquisition/index.js";
import { retainTree } from "../src/retention/index.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { startFakeRegistry } from "./support/fake-registry.js";
import { expectRefusal, refusal } from "./support/refusals.js";

const sha256 = (bytes: Buffer | string) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
const HEX = (c: string) => c.repeat(64);

function treeLayer(index: number, size: number) {
  return {
    mediaType: TREE_MEDIA_TYPE,
    digest: `sha256:${HEX("1")}`,
    size,
    annotations: {
      "vnd.oats.kind": "capture",
      "vnd.oats.key": `t${index}`,
      "vnd.oats.integrity": `oats.tree-exec.v1:sha256-${HEX("a")}`,
    },
  };
}

function manifestOf(layers: unknown[], resolution?: { size: number }): Buffer {
  const config = resolution
    ? { mediaType: RESOLUTION_MEDIA_TYPE, digest: `sha256:${HEX("c")}`, size: resolution.size }
    : { mediaType: "application/vnd.oci.empty.v1+json", digest: sha256(EMPTY_CONFIG), size: EMPTY_CONFIG.length };
  return Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: OCI_MANIFEST_MEDIA_TYPE,
      artifactType: resolution ? RESOLUTION_MEDIA_TYPE : TREES_ARTIFACT_TYPE,
      config,
      layers,
      ...(resolution ? { annotations: { "vnd.oats.resolution": `sha256-${HEX("c")}` } } : {}),
    }),
  );
}

/** Serve `manifest` for any manifest request; a blob request is recorded (and answered 404). */
async function registryServing(t: { after(fn: () => Promise<void>): void }, manifest: Buffer) {
  const server = await startFakeRegistry((request, response) => {
    const url = request.url ?? "";
    if (url.includes("/manifests/"))
      response
        .writeHead(200, {
          "content-type": OCI_MANIFEST_MEDIA_TYPE,
          "content-length": String(manifest.length),
          "docker-content-digest": sha256(manifest),
        })
        .end(request.method === "HEAD" ? undefined : manifest);
    else if (url.includes("/blobs/")) response.writeHead(404).end();
    else response.writeHead(200, { "content-type": "application/json" }).end("{}");
  });
  t.after(() => server.close());
  return server;
}

async function occupiedScope(): Promise<string> {
  const scope = join(tempDir("oats-pull-limits-"), "scope");
  mkdirSync(scope);
  const tool = join(tempDir("oats-pull-tool-"), "tool");
  mkdirSync(tool);
  writeFileSync(join(tool, "run"), "#!/bin/sh\n");
  await retainTree(scope, { kind: "capture", key: "unrelated", source: tool });
  return scope;
}

/** Pull `manifest`: refused with `reason`, no blob asked, scope as it
 * was. */
async function refusedUpFront(t: { after(fn: () => Promise<void>): void }, manifest: Buffer, reason: string) {
  const server = await registryServing(t, manifest);
  const scope = await occupiedScope();
  const before = snapshotTree(scope);
  const started = Date.now();
  const error = await expectRefusal(
    pullFromRegistry(scope, `oci://${server.host}/hostile/pull:crafted`, { insecure: true }),
    "invalid-input",
    reason,
  );
  assert.ok(Date.now() - started < 10_000, "refused at once, not after a wait");
  assert.deepEqual(
    server.requests.filter((request) => request.url.includes("/blobs/")).map((request) => request.url),
    [],
    "no blob was asked for",
  );
  assert.deepEqual(snapshotTree(scope), before, "the scope is byte-for-byte as it was");
  return error;
}

const budget = pullByteBudget(DEFAULT_EXTRACT_LIMITS.maxBytes);

describe("a manifest that declares too much is refused before any blob is fetched", { timeout: 60_000 }, () => {
  test("5,000 layers (one blob, 5,000 keys) are too-many-layers", async (t) => {
    const layers = Array.from({ length: 5_000 }, (_, index) => treeLayer(index, 1024));
    const error = await refusedUpFront(t, manifestOf(layers), "too-many-layers");
    assert.equal(error.details["layers"], 5_000);
    assert.equal(error.details["limit"], MAX_LAYERS);
  });

  test("2^53 is not a size (invalid-manifest); a tree, blob or record of 2^53 - 1 is too-large", async (t) => {
    await refusedUpFront(t, manifestOf([treeLayer(0, 2 ** 53)]), "invalid-manifest");
    await refusedUpFront(t, manifestOf([treeLayer(0, 2 ** 53 - 1)]), "too-large");
    const blob = {
      mediaType: BLOB_MEDIA_TYPE,
      digest: `sha256:${HEX("b")}`,
      size: 2 ** 53 - 1,
      annotations: { "vnd.oats.blob": `sha256-${HEX("b")}` },
    };
    await refusedUpFront(t, manifestOf([blob]), "too-large");
    await refusedUpFront(t, manifestOf([], { size: 2 ** 53 - 1 }), "too-large");
  });

  test("one layer over the pull's budget, or 100 layers of 1 GiB together, are too-large", async (t) => {
    const one = await refusedUpFront(t, manifestOf([treeLayer(0, budget + 1)]), "too-large");
    assert.equal(one.details["limit"], budget);
    const many = Array.from({ length: 100 }, (_, index) => treeLayer(index, 1024 ** 3));
    const error = await refusedUpFront(t, manifestOf(many), "too-large");
    assert.equal(error.details["limit"], budget);
    assert.ok((error.details["layer"] as number) < 100);
  });

  test("a smaller --max-bytes lowers the budget with it", async (t) => {
    const server = await registryServing(t, manifestOf([treeLayer(0, 300 << 20)]));
    const scope = await occupiedScope();
    await assert.rejects(
      pullFromRegistry(scope, `oci://${server.host}/hostile/pull:crafted`, {
        insecure: true,
        limits: { maxBytes: 100 << 20 },
      }),
      refusal("invalid-input", { reason: "too-large", limit: pullByteBudget(100 << 20) }),
    );
  });

  test("push refuses to make a manifest no pull accepts", () => {
    const trees = Array.from({ length: MAX_LAYERS + 1 }, (_, index) => ({
      kind: "capture" as const,
      key: `t${index}`,
      integrity: `oats.tree-exec.v1:sha256-${HEX("a")}`,
      digest: `sha256:${HEX("1")}`,
      size: 1,
    }));
    assert.throws(() => treesManifest(trees), refusal("invalid-input", "too-many-layers"));
  });
});
