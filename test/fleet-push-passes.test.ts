/**
 * Push makes a tree's layer twice without writing it to disk: a hashing pass
 * (digest and size, for the HEAD and the manifest) and, for a blob the
 * registry lacks, an upload pass that tars the tree again into the PUT. A
 * tree that changes between the passes, or a layer digest that is not the
 * tree's (a wrong value from anywhere), must be a typed refusal with nothing
 * stored under that digest and nothing tagged. Real docker-registry, real
 * retained trees.
 */
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { hashTreeLayer, layerTestHooks, treeLayerSource } from "../src/fleet/layer.js";
import { pushToRegistry } from "../src/fleet/push.js";
import { pullFromRegistry } from "../src/fleet/pull.js";
import { headBlob } from "../src/oci/blobs.js";
import { getManifest } from "../src/oci/manifests.js";
import { putBlob } from "../src/oci/upload.js";
import { openRegistry } from "../src/fleet/target.js";
import { retainTree } from "../src/retention/index.js";
import { resolveScope } from "../src/retention/store/components.js";
import { tempDir } from "./helpers.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";
import { refusal } from "./support/refusals.js";

let registry: Registry | null = null;
const skip = registryBinary() === null ? NO_REGISTRY : false;
before(async () => {
  if (!skip) registry = await startRegistry();
});
after(async () => {
  layerTestHooks.beforeUploadPass = undefined;
  await registry?.stop();
});

async function retained(): Promise<{
  scope: string;
  ref: { kind: "capability"; key: string; integrity: { format: "oats.tree-exec.v1"; value: string } };
  text: string;
}> {
  const dir = tempDir("oats-fleet-passes-");
  const scope = join(dir, "scope");
  const tool = join(dir, "tool");
  mkdirSync(scope);
  mkdirSync(join(tool, "data"), { recursive: true });
  writeFileSync(join(tool, "data/big.bin"), Buffer.alloc(3 * 1024 * 1024, 7));
  writeFileSync(join(tool, "small.txt"), "hello\n");
  const receipt = await retainTree(scope, { kind: "capability", key: "passes", source: tool });
  const ref = {
    kind: "capability" as const,
    key: "passes",
    integrity: { format: "oats.tree-exec.v1" as const, value: receipt.execIntegrity.value },
  };
  return { scope, ref, text: `capability:passes@oats.tree-exec.v1:${receipt.execIntegrity.value}` };
}

describe("push: the hashing pass and the upload pass of a layer", { skip }, () => {
  for (const change of [
    {
      name: "the same length",
      apply: (dir: string) => writeFileSync(join(dir, "data/big.bin"), Buffer.alloc(3 * 1024 * 1024, 8)),
    },
    { name: "another length", apply: (dir: string) => writeFileSync(join(dir, "small.txt"), "hello, changed\n") },
  ]) {
    test(
      `Given a retained tree changed (${change.name}) between the two passes ` +
        `When it is pushed Then the push is refused (integrity-mismatch), the ` +
        `registry has no blob under the hashed digest and nothing is tagged`,
      async () => {
        const { scope, ref, text } = await retained();
        const layer = await hashTreeLayer(resolveScope(scope), ref);
        const to = registry!.ref("passes/changed", ":v1");
        let calls = 0;
        layerTestHooks.beforeUploadPass = (dir) => {
          calls++;
          change.apply(dir);
        };
        let caught: unknown;
        try {
          await pushToRegistry(scope, [text], to).catch((error: unknown) => (caught = error));
        } finally {
          layerTestHooks.beforeUploadPass = undefined;
        }
        assert.equal(calls, 1, "one upload pass, not retried");
        assert.ok(caught instanceof OatsError, `expected an OatsError, got ${String(caught)}`);
        assert.equal(caught.code, "integrity-mismatch");
        assert.equal(
          caught.details["reason"],
          "changed-between-passes",
          "the upload pass checks the tar against the hashing pass",
        );
        const { session } = openRegistry(to);
        assert.equal(await headBlob(session, layer.digest), null, "no blob under the hashed digest");
        await assert.rejects(getManifest(session, "v1"), refusal("artifact-not-found"), "nothing tagged");
      },
    );
  }

  test(
    "Given a layer digest that is not the tree's (a wrong remembered value) " +
      "When the upload pass runs Then it is refused as changed-between-passes " +
      "and nothing is stored under either digest",
    async () => {
      const { scope, ref } = await retained();
      const real = await hashTreeLayer(resolveScope(scope), ref);
      const wrong = { digest: `sha256:${"e".repeat(64)}`, size: real.size };
      const { session } = openRegistry(registry!.ref("passes/wrong"));
      await assert.rejects(
        putBlob(session, treeLayerSource(resolveScope(scope), ref, wrong), {
          chunked: false,
          chunkSize: Number.MAX_SAFE_INTEGER,
        }),
        (error: unknown) =>
          error instanceof OatsError &&
          error.code === "integrity-mismatch" &&
          error.details["reason"] === "changed-between-passes",
      );
      assert.equal(await headBlob(session, wrong.digest), null);
      assert.equal(
        await headBlob(session, real.digest),
        null,
        "the held-back last bytes never left, so no blob was committed",
      );
    },
  );

  test(
    "Given a resumed or chunked upload When the source is opened at an " +
      "offset Then the bytes sent are exactly the layer's (skipped, not " +
      "regenerated differently) and pull verifies them",
    async () => {
      const { scope, ref, text } = await retained();
      const real = await hashTreeLayer(resolveScope(scope), ref);
      const { session } = openRegistry(registry!.ref("passes/chunked"));
      // Chunks of 1 MiB: every PATCH opens the source at a new offset.
      const result = await putBlob(session, treeLayerSource(resolveScope(scope), ref, real), {
        chunked: true,
        chunkSize: 1024 * 1024,
      });
      assert.equal(result.digest, real.digest);
      assert.deepEqual(await headBlob(session, real.digest), { size: real.size });
      const to = registry!.ref("passes/pushed", ":v1");
      const report = await pushToRegistry(scope, [text], to);
      assert.equal(report.blobs.find((blob) => blob.digest === real.digest)?.status, "uploaded");
      const target = join(tempDir("oats-fleet-passes-b-"), "scope");
      mkdirSync(target);
      const pulled = await pullFromRegistry(target, to);
      assert.equal(pulled.artifacts[0]?.status, "retained");
    },
  );
});
