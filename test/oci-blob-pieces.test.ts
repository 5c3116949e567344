import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { OatsError } from "../src/core/index.js";
import { bufferSource, OciClient } from "../src/oci/index.js";
import { startFakeRegistry } from "./support/fake-registry.js";
import { NO_REGISTRY, registryBinary, sha256, startRegistry, type Registry } from "./support/registry.js";
import { refusal } from "./support/refusals.js";

/** A blob read a piece at a time through one reused buffer (oci/blob-pieces.ts), and its fallback. */

const HAVE = registryBinary() !== null;
let registry: Registry;
let tls: Registry;

before(async () => {
  if (HAVE) [registry, tls] = await Promise.all([startRegistry(), startRegistry({ tls: true })]);
});
after(async () => {
  await Promise.all([registry?.stop(), tls?.stop()]);
});

/** Every piece copied out (a piece is valid only during its call), and how many pieces there were. */
async function readAll(client: OciClient, digest: string, options: { size?: number; limit?: number } = {}) {
  const copies: Buffer[] = [];
  const handed = await client.readBlobPieces(digest, options, (piece) => copies.push(Buffer.from(piece)));
  return { bytes: Buffer.concat(copies), handed, pieces: copies.length };
}

test("a blob read in pieces is the blob, byte for byte, up to a limit when one is given", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const client = new OciClient(registry.ref("oats/pieces"));
  const bytes = randomBytes(5 * 1024 * 1024 + 7);
  const digest = sha256(bytes);
  await client.putBlob(bufferSource(bytes, digest));
  const whole = await readAll(client, digest, { size: bytes.length });
  assert.equal(whole.handed, bytes.length);
  assert.ok(whole.bytes.equals(bytes));
  assert.ok(whole.pieces > 1, "the blob came in pieces");
  const cut = await readAll(client, digest, { limit: 100_000 });
  assert.equal(cut.handed, 100_000);
  assert.ok(cut.bytes.equals(bytes.subarray(0, 100_000)));
  const empty = Buffer.alloc(0);
  await client.putBlob(bufferSource(empty, sha256(empty)));
  assert.deepEqual(await readAll(client, sha256(empty)), { bytes: empty, handed: 0, pieces: 0 });
});

test("a blob corrupted in the registry's storage is integrity-mismatch when read in pieces", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const client = new OciClient(registry.ref("oats/pieces-corrupt"));
  const bytes = randomBytes(300 * 1024);
  const digest = sha256(bytes);
  await client.putBlob(bufferSource(bytes, digest));
  const tampered = Buffer.from(bytes);
  tampered.writeUInt8(tampered.readUInt8(0) ^ 1, 0);
  writeFileSync(registry.blobPath(digest), tampered);
  await assert.rejects(readAll(client, digest, { size: bytes.length }), refusal("integrity-mismatch"));
});

test("a registry whose plain answer is not the blob is refused on the first GET, with no second one", async (t) => {
  const good = Buffer.from("the blob");
  const digest = `sha256:${createHash("sha256").update(good).digest("hex")}`;
  const fake = await startFakeRegistry((_request, response) => {
    response.writeHead(200, { "content-length": String(good.length) });
    response.end(Buffer.from("not blob"));
  });
  t.after(() => fake.close());
  const client = new OciClient(`http://${fake.host}/oats/lying`);
  await assert.rejects(readAll(client, digest), refusal("integrity-mismatch"));
  assert.equal(fake.requests.length, 1);
});

test("any answer but a plain 200 (chunked, a redirect) is read again through the ordinary client", async (t) => {
  const good = randomBytes(200 * 1024);
  const digest = `sha256:${createHash("sha256").update(good).digest("hex")}`;
  const fake = await startFakeRegistry((request, response) => {
    if (request.url?.endsWith("/moved")) {
      response.writeHead(200);
      response.write(good.subarray(0, 1000));
      response.end(good.subarray(1000));
      return;
    }
    response.writeHead(307, { location: `${request.url}/moved` });
    response.end();
  });
  t.after(() => fake.close());
  const client = new OciClient(`http://${fake.host}/oats/moved`);
  const read = await readAll(client, digest, { size: good.length });
  assert.ok(read.bytes.equals(good));
  assert.deepEqual(
    fake.requests.map((request) => request.url.split("/").pop()),
    [digest, digest, "moved"],
    "the plain GET, then the ordinary client's GET and its redirect",
  );
});

test("a TLS registry whose certificate is not trusted is registry-refused (tls) when read in pieces", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const client = new OciClient(tls.ref("oats/pieces-tls"));
  await assert.rejects(readAll(client, sha256(Buffer.from("x"))), refusal("registry-refused", { reason: "tls" }));
});

test("a blob being read in pieces stops at once when its signal is aborted, with the signal's reason", async (t) => {
  const good = randomBytes(64 * 1024);
  const digest = `sha256:${createHash("sha256").update(good).digest("hex")}`;
  // Half the blob, then nothing: a registry that stalls mid-body.
  const fake = await startFakeRegistry((_request, response) => {
    response.writeHead(200, { "content-length": String(good.length) });
    response.write(good.subarray(0, good.length / 2));
  });
  t.after(() => fake.close());
  const stop = new AbortController();
  const why = new OatsError("invalid-artifact", "the consumer refused it", { reason: "test" });
  const client = new OciClient(`http://${fake.host}/oats/stall`);
  const started = Date.now();
  let seen = 0;
  await assert.rejects(
    client.readBlobPieces(digest, { signal: stop.signal }, (piece) => {
      seen += piece.length;
      stop.abort(why);
    }),
    (error: unknown) => error === why,
  );
  assert.ok(seen > 0 && Date.now() - started < 5_000);
  assert.equal(fake.requests.length, 1);
});

test("a connection cut mid-blob is registry-refused (connection-lost), not a short blob", async (t) => {
  const good = randomBytes(64 * 1024);
  const digest = `sha256:${createHash("sha256").update(good).digest("hex")}`;
  const fake = await startFakeRegistry((_request, response) => {
    response.writeHead(200, { "content-length": String(good.length) });
    response.write(good.subarray(0, 1000), () => response.socket?.destroy());
  });
  t.after(() => fake.close());
  const client = new OciClient(`http://${fake.host}/oats/cut`);
  await assert.rejects(
    client.readBlobPieces(digest, {}, () => undefined),
    refusal("registry-refused", { reason: "connection-lost" }),
  );
});

test("after a challenge the plain GET carries the session's Authorization", async (t) => {
  const good = randomBytes(100 * 1024);
  const digest = `sha256:${createHash("sha256").update(good).digest("hex")}`;
  const expected = `Basic ${Buffer.from("reader:pa55").toString("base64")}`;
  const fake = await startFakeRegistry((request, response) => {
    if (request.headers.authorization !== expected) {
      response.writeHead(401, { "www-authenticate": 'Basic realm="test"', "content-length": "0" });
      response.end();
      return;
    }
    response.writeHead(200, { "content-length": String(good.length) });
    response.end(good);
  });
  t.after(() => fake.close());
  const client = new OciClient(`http://${fake.host}/oats/auth`, {
    credentials: { username: "reader", password: "pa55", source: "test" },
  });
  assert.ok((await readAll(client, digest)).bytes.equals(good));
  assert.ok((await readAll(client, digest)).bytes.equals(good));
  const seen = fake.requests.map((request) => [request.headers.authorization === expected, request.headers.connection]);
  // The first plain GET (no Authorization yet), the ordinary client's challenge and answer, then a plain GET with it.
  assert.deepEqual(seen, [
    [false, "close"],
    [false, "keep-alive"],
    [true, "keep-alive"],
    [true, "close"],
  ]);
});
