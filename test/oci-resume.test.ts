import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { bufferSource, OciClient } from "../src/oci/index.js";
import { startFaultProxy } from "./support/fault-proxy.js";
import { NO_REGISTRY, registryBinary, sha256, startRegistry, type Registry } from "./support/registry.js";

/** A connection dropped mid-upload, between the client and a real registry. */

const HAVE = registryBinary() !== null;
let registry: Registry;

before(async () => {
  if (HAVE) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
});

async function read(client: OciClient, digest: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await client.getBlob(digest)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

for (const [name, cutAfter] of [
  ["in the first chunk", 300 * 1024],
  ["in a later chunk", 2 * 1024 * 1024 + 5000],
  ["just past the first chunk boundary", 1024 * 1024 + 600],
] as const) {
  test(`a chunked upload cut ${name} resumes or restarts and the registry holds exactly the blob`, async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const proxy = await startFaultProxy(registry.port, cutAfter);
    t.after(() => proxy.close());
    const bytes = randomBytes(4 * 1024 * 1024 + 333);
    const digest = sha256(bytes);
    const client = new OciClient(`http://127.0.0.1:${proxy.port}/oats/resume`);
    const result = await client.putBlob(bufferSource(bytes, digest), { chunkSize: 1024 * 1024 });
    assert.equal(proxy.cuts, 1, "the proxy did cut the connection");
    // distribution 2.8 may report an offset that includes the cut PATCH's partial bytes and then refuse to continue
    // from it: one resume and one clean restart.
    assert.ok(result.resumed + result.restarted >= 1 && result.restarted <= 1, JSON.stringify(result));
    t.diagnostic(`resumed ${result.resumed}, restarted ${result.restarted}`);
    const direct = new OciClient(registry.ref("oats/resume"));
    assert.deepEqual(await direct.headBlob(digest), { size: bytes.length });
    assert.ok((await read(direct, digest)).equals(bytes));
  });
}

test(
  "a connection cut between two chunks resumes from the registry's offset " + "without sending the first chunk again",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const proxy = await startFaultProxy(registry.port, { request: "PATCH", nth: 3 });
    t.after(() => proxy.close());
    const bytes = randomBytes(4 * 1024 * 1024 + 1);
    const digest = sha256(bytes);
    const client = new OciClient(`http://127.0.0.1:${proxy.port}/oats/resume-exact`);
    const result = await client.putBlob(bufferSource(bytes, digest), { chunkSize: 1024 * 1024 });
    assert.equal(proxy.cuts, 1);
    assert.deepEqual({ resumed: result.resumed, restarted: result.restarted }, { resumed: 1, restarted: 0 });
    // Five chunks and the request heads: a restart would have sent at least 2 MiB more.
    assert.ok(proxy.forwarded < bytes.length + 64 * 1024, `${proxy.forwarded} bytes went through`);
    assert.ok((await read(new OciClient(registry.ref("oats/resume-exact")), digest)).equals(bytes));
  },
);

test("a monolithic upload cut mid-body restarts cleanly", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const proxy = await startFaultProxy(registry.port, 200 * 1024);
  t.after(() => proxy.close());
  const bytes = randomBytes(1024 * 1024);
  const digest = sha256(bytes);
  const client = new OciClient(`http://127.0.0.1:${proxy.port}/oats/restart`);
  const result = await client.putBlob(bufferSource(bytes, digest));
  assert.equal(proxy.cuts, 1);
  assert.deepEqual({ resumed: result.resumed, restarted: result.restarted }, { resumed: 0, restarted: 1 });
  assert.ok((await read(new OciClient(registry.ref("oats/restart")), digest)).equals(bytes));
});

test("with no retries left a lost connection is a typed refusal, and nothing is stored under the digest", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const proxy = await startFaultProxy(registry.port, 100 * 1024);
  t.after(() => proxy.close());
  const bytes = randomBytes(512 * 1024);
  const digest = sha256(bytes);
  const client = new OciClient(`http://127.0.0.1:${proxy.port}/oats/noretry`);
  await assert.rejects(client.putBlob(bufferSource(bytes, digest), { retries: 0 }), (error: unknown) => {
    const details = (error as { details?: Record<string, unknown> }).details ?? {};
    return (error as { code?: string }).code === "registry-refused" && details["reason"] === "connection-lost";
  });
  assert.equal(await new OciClient(registry.ref("oats/noretry")).headBlob(digest), null);
});
