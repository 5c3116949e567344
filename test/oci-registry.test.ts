import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { text } from "node:stream/consumers";
import { after, before, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { bufferSource, fileSource, OCI_MANIFEST, OciClient } from "../src/oci/index.js";
import { tempDir } from "./helpers.js";
import { NO_REGISTRY, registryBinary, sha256, startRegistry, type Registry } from "./support/registry.js";
import { refusal } from "./support/refusals.js";

/** The client against a real CNCF distribution registry on loopback. */

const HAVE = registryBinary() !== null;
let registry: Registry;

before(async () => {
  if (HAVE) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
});

async function drainToBuffer(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function manifestFor(
  config: { digest: string; size: number },
  layers: Array<{ digest: string; size: number }>,
): Buffer {
  return Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: OCI_MANIFEST,
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...config },
      layers: layers.map((layer) => ({ mediaType: "application/vnd.oci.image.layer.v1.tar", ...layer })),
    }),
  );
}

test("blobs go up monolithic and chunked, HEAD sees them, GET streams them verified", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const client = new OciClient(registry.ref("oats/blobs"));
  const small = randomBytes(1000);
  const big = randomBytes(3 * 1024 * 1024 + 17);
  assert.equal(await client.headBlob(sha256(small)), null);
  const one = await client.putBlob(bufferSource(small, sha256(small)));
  assert.deepEqual(one, { digest: sha256(small), size: 1000, resumed: 0, restarted: 0 });
  const file = join(tempDir(), "big");
  writeFileSync(file, big);
  const chunked = await client.putBlob(fileSource(file, sha256(big), big.length), { chunkSize: 1024 * 1024 });
  assert.equal(chunked.digest, sha256(big));
  assert.deepEqual(await client.headBlob(sha256(small)), { size: 1000 });
  assert.deepEqual(await client.headBlob(sha256(big)), { size: big.length });
  assert.ok((await drainToBuffer(await client.getBlob(sha256(big), { size: big.length }))).equals(big));
  assert.ok((await client.getBlobBytes(sha256(small), { maxBytes: 4096 })).equals(small));
  // An empty blob, chunked, is a PUT with no PATCH.
  const empty = Buffer.alloc(0);
  await client.putBlob(bufferSource(empty, sha256(empty)), { chunked: true });
  assert.deepEqual(await client.headBlob(sha256(empty)), { size: 0 });
});

test("a blob sent with the wrong digest is refused by the registry as integrity-mismatch", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const client = new OciClient(registry.ref("oats/wrong"));
  const bytes = randomBytes(500);
  const claimed = sha256(Buffer.from("something else"));
  await assert.rejects(client.putBlob(bufferSource(bytes, claimed)), refusal("integrity-mismatch"));
  await assert.rejects(
    client.putBlob(bufferSource(bytes, claimed), { chunked: true, chunkSize: 100 }),
    refusal("integrity-mismatch"),
  );
  assert.equal(await client.headBlob(claimed), null);
});

test("a blob corrupted inside the registry's storage fails the verifying stream", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const client = new OciClient(registry.ref("oats/corrupt"));
  const bytes = randomBytes(4096);
  const digest = sha256(bytes);
  await client.putBlob(bufferSource(bytes, digest));
  const tampered = Buffer.from(bytes);
  tampered[100] = tampered[100]! ^ 0xff;
  writeFileSync(registry.blobPath(digest), tampered);
  await assert.rejects(
    drainToBuffer(await client.getBlob(digest)),
    (error: unknown) =>
      error instanceof OatsError && error.code === "integrity-mismatch" && error.details["actual"] === sha256(tampered),
  );
  writeFileSync(registry.blobPath(digest), bytes.subarray(0, 4000));
  await assert.rejects(drainToBuffer(await client.getBlob(digest, { size: 4096 })), refusal("integrity-mismatch"));
  writeFileSync(registry.blobPath(digest), bytes);
  await assert.rejects(
    async () => drainToBuffer(await client.getBlob(digest, { maxBytes: 4095 })),
    refusal("invalid-artifact", "too-large"),
  );
});

test("missing blobs and manifests are typed: blob-not-found, artifact-not-found", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const client = new OciClient(registry.ref("oats/missing"));
  const digest = sha256(Buffer.from("never pushed"));
  await assert.rejects(client.getBlob(digest), refusal("blob-not-found"));
  await assert.rejects(client.getManifest("nope"), refusal("artifact-not-found"));
  await assert.rejects(client.getManifest(digest), refusal("artifact-not-found"));
  assert.deepEqual(await client.listTags(), []);
});

test(
  "manifests: put by tag, read back by tag and by digest with the exact " +
    "bytes; tags listed; blobs mounted across repositories",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const client = new OciClient(registry.ref("oats/manifests"));
    const config = Buffer.from('{"oats":"record"}');
    const layer = randomBytes(2048);
    await client.putBlob(bufferSource(config, sha256(config)));
    await client.putBlob(bufferSource(layer, sha256(layer)));
    const bytes = manifestFor({ digest: sha256(config), size: config.length }, [
      { digest: sha256(layer), size: layer.length },
    ]);
    const put = await client.putManifest("run-1", bytes, OCI_MANIFEST);
    assert.equal(put.digest, sha256(bytes));
    const byTag = await client.getManifest("run-1");
    assert.ok(byTag.bytes.equals(bytes));
    assert.equal(byTag.mediaType, OCI_MANIFEST);
    assert.equal(byTag.digest, sha256(bytes));
    assert.ok((await client.getManifest(sha256(bytes))).bytes.equals(bytes));
    await client.putManifest("run-2", bytes, OCI_MANIFEST);
    assert.deepEqual((await client.listTags()).sort(), ["run-1", "run-2"]);
    // The same blob linked into another repository without re-uploading it.
    const other = new OciClient(registry.ref("oats/other"));
    assert.equal(await other.headBlob(sha256(layer)), null);
    assert.equal(await other.mountBlob(sha256(layer), "oats/manifests"), true);
    assert.deepEqual(await other.headBlob(sha256(layer)), { size: layer.length });
    assert.equal(await other.mountBlob(sha256(Buffer.from("absent")), "oats/manifests"), false);
    // A manifest whose blobs the registry does not hold is refused by the registry and left untagged.
    const dangling = manifestFor({ digest: sha256(config), size: config.length }, [
      { digest: sha256(Buffer.from("not uploaded")), size: 12 },
    ]);
    await assert.rejects(
      client.putManifest("dangling", dangling, OCI_MANIFEST),
      refusal("registry-refused", "protocol"),
    );
    await assert.rejects(client.getManifest("dangling"), refusal("artifact-not-found"));
    // Putting under a digest that is not the bytes' digest is refused before sending.
    await assert.rejects(client.putManifest(sha256(config), bytes, OCI_MANIFEST), refusal("invalid-input"));
    assert.equal(await text(await client.getBlob(sha256(config))), '{"oats":"record"}');
  },
);

test(
  "two clients pushing the same blob and manifest at once both succeed and " + "the registry holds one copy",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const bytes = randomBytes(2 * 1024 * 1024 + 3);
    const config = Buffer.from("{}");
    const [a, b] = [new OciClient(registry.ref("oats/race")), new OciClient(registry.ref("oats/race"))];
    const results = await Promise.all(
      [a, b].map((client) => client.putBlob(bufferSource(bytes, sha256(bytes)), { chunkSize: 512 * 1024 })),
    );
    assert.deepEqual(
      results.map((r) => r.digest),
      [sha256(bytes), sha256(bytes)],
    );
    await Promise.all([a, b].map((client) => client.putBlob(bufferSource(config, sha256(config)))));
    const manifest = manifestFor({ digest: sha256(config), size: 2 }, [{ digest: sha256(bytes), size: bytes.length }]);
    const puts = await Promise.all([a, b].map((client) => client.putManifest("same", manifest, OCI_MANIFEST)));
    // No `subject` in the manifest, so no referrers answer to report.
    assert.deepEqual(puts, [
      { digest: sha256(manifest), subject: null },
      { digest: sha256(manifest), subject: null },
    ]);
    assert.ok((await drainToBuffer(await b.getBlob(sha256(bytes)))).equals(bytes));
    assert.ok((await a.getManifest("same")).bytes.equals(manifest));
  },
);
