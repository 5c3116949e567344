import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { bufferSource, fileSource, OciClient } from "../src/oci/index.js";
import { refusal } from "./support/refusals.js";
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

for (const [name, cutAfter, options] of [
  ["a monolithic upload", 200 * 1024, {}],
  ["a chunked upload", 1024 * 1024 + 600, { chunkSize: 1024 * 1024 }],
] as const) {
  test(`a file source cut mid-upload and swapped at its path goes on with the file it opened (${name})`, async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const dir = mkdtempSync(join(tmpdir(), "oats-file-source-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, "blob");
    const bytes = randomBytes(3 * 1024 * 1024 + 17);
    writeFileSync(path, bytes);
    const other = join(dir, "other");
    writeFileSync(other, randomBytes(bytes.length));
    // The path names another file of the same size from the moment the first attempt is cut.
    const proxy = await startFaultProxy(registry.port, cutAfter, () => renameSync(other, path));
    t.after(() => proxy.close());
    const digest = sha256(bytes);
    const source = fileSource(path, digest, bytes.length);
    t.after(() => source.close());
    const repository = `oats/file-swap-${options.chunkSize ? "chunked" : "whole"}`;
    const client = new OciClient(`http://127.0.0.1:${proxy.port}/${repository}`);
    const result = await client.putBlob(source, options);
    assert.equal(proxy.cuts, 1, "the proxy did cut the connection");
    assert.ok(result.resumed + result.restarted >= 1, JSON.stringify(result));
    assert.ok(!readFileSync(path).equals(bytes), "the path now names the other file");
    assert.ok((await read(new OciClient(registry.ref(repository)), digest)).equals(bytes));
  });
}

test("a file source is refused unless the path is a regular file of the size given", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "oats-file-source-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "blob"), "abc");
  symlinkSync(join(dir, "blob"), join(dir, "link"));
  const digest = sha256(Buffer.from("abc"));
  assert.throws(() => fileSource(join(dir, "blob"), digest, 4), refusal("invalid-input"));
  assert.throws(() => fileSource(join(dir, "link"), digest, 3), refusal("invalid-input"));
  assert.throws(() => fileSource(dir, digest, 3), refusal("invalid-input"));
  assert.throws(() => fileSource(join(dir, "missing"), digest, 3), refusal("invalid-input"));
  await fileSource(join(dir, "blob"), digest, 3).close();
});

test("a file source that shrinks before it goes up is integrity-mismatch (source-changed)", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const dir = mkdtempSync(join(tmpdir(), "oats-file-source-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, "blob");
  const bytes = randomBytes(3 * 1024 * 1024);
  writeFileSync(path, bytes);
  const source = fileSource(path, sha256(bytes), bytes.length);
  t.after(() => source.close());
  truncateSync(path, 1024 * 1024 + 5);
  const client = new OciClient(registry.ref("oats/file-shrunk"));
  await assert.rejects(
    client.putBlob(source, { chunkSize: 1024 * 1024 }),
    refusal("integrity-mismatch", { reason: "source-changed" }),
  );
  assert.equal(await client.headBlob(sha256(bytes)), null);
});
