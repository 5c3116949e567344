import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import net from "node:net";
import { test } from "node:test";
import { bufferSource, OCI_MANIFEST, OciClient } from "../src/oci/index.js";
import { startFakeRegistry, type Handler } from "./support/fake-registry.js";
import { refusal } from "./support/refusals.js";

/** Registries that lie, misbehave or are not there: every answer is a typed refusal. */

function sha256(bytes: Buffer): string {
  return `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
}

async function drain(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

async function fake(t: { after(fn: () => Promise<void>): void }, handler: Handler, address?: string) {
  const server = await startFakeRegistry(handler, address);
  t.after(() => server.close());
  return { server, client: new OciClient(`http://${server.host}/oats/fleet`) };
}

/** A registry that accepts uploads and answers the final PUT with `answer`. */
function uploads(answer: (response: import("node:http").ServerResponse, digest: string) => void): Handler {
  let held = 0;
  return (request, response, body) => {
    const url = new URL(request.url ?? "/", "http://x");
    if (request.method === "POST") {
      held = 0;
      response.writeHead(202, { location: "/v2/oats/fleet/blobs/uploads/u1", range: "0-0" }).end();
    } else if (request.method === "PATCH") {
      held += body.length;
      response.writeHead(202, { location: "/v2/oats/fleet/blobs/uploads/u1", range: `0-${held - 1}` }).end();
    } else if (request.method === "PUT") answer(response, url.searchParams.get("digest") ?? "");
    else response.writeHead(404).end();
  };
}

test("an upload the registry reports under a different digest is integrity-mismatch", async (t) => {
  const other = sha256(Buffer.from("other"));
  const bytes = randomBytes(100);
  const header = await fake(
    t,
    uploads((response, digest) =>
      response.writeHead(201, { "docker-content-digest": other, location: `/v2/oats/fleet/blobs/${digest}` }).end(),
    ),
  );
  await assert.rejects(header.client.putBlob(bufferSource(bytes, sha256(bytes))), refusal("integrity-mismatch"));
  await assert.rejects(
    header.client.putBlob(bufferSource(bytes, sha256(bytes)), { chunked: true, chunkSize: 30 }),
    refusal("integrity-mismatch"),
  );
  const location = await fake(
    t,
    uploads((response) => response.writeHead(201, { location: `/v2/oats/fleet/blobs/${other}` }).end()),
  );
  await assert.rejects(location.client.putBlob(bufferSource(bytes, sha256(bytes))), refusal("integrity-mismatch"));
  const honest = await fake(
    t,
    uploads((response, digest) =>
      response.writeHead(201, { "docker-content-digest": digest, location: `/v2/oats/fleet/blobs/${digest}` }).end(),
    ),
  );
  assert.equal((await honest.client.putBlob(bufferSource(bytes, sha256(bytes)))).digest, sha256(bytes));
});

test("a blob served with other bytes, or a HEAD naming another digest, is integrity-mismatch", async (t) => {
  const asked = randomBytes(64);
  const served = randomBytes(64);
  const { client } = await fake(t, (request, response) => {
    if (request.method === "HEAD")
      response.writeHead(200, { "content-length": "64", "docker-content-digest": sha256(served) }).end();
    else response.writeHead(200, { "content-length": "64" }).end(served);
  });
  await assert.rejects(async () => drain(await client.getBlob(sha256(asked))), refusal("integrity-mismatch"));
  await assert.rejects(client.headBlob(sha256(asked)), refusal("integrity-mismatch"));
});

test(
  "a manifest that references a blob the registry does not serve: the " + "manifest reads, the blob is blob-not-found",
  async (t) => {
    const missing = sha256(Buffer.from("never served"));
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: OCI_MANIFEST,
        config: { mediaType: "application/vnd.oats.record.v1+json", digest: missing, size: 12 },
        layers: [],
      }),
    );
    const { client } = await fake(t, (request, response) => {
      if (request.url?.includes("/manifests/"))
        response
          .writeHead(200, { "content-type": OCI_MANIFEST, "docker-content-digest": sha256(manifest) })
          .end(manifest);
      else
        response
          .writeHead(404, { "content-type": "application/json" })
          .end('{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown"}]}');
    });
    assert.ok((await client.getManifest("v1")).bytes.equals(manifest));
    await assert.rejects(client.getBlob(missing), refusal("blob-not-found", { digest: missing }));
  },
);

test(
  "manifests: oversized, unknown media type, a document of another type, " +
    "not JSON, or bytes of another digest are refused",
  async (t) => {
    const good = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: OCI_MANIFEST, config: {}, layers: [] }));
    const huge = Buffer.alloc(4 * 1024 * 1024 + 1, 0x20);
    const cases: Record<string, (response: import("node:http").ServerResponse) => void> = {
      big: (response) => response.writeHead(200, { "content-type": OCI_MANIFEST }).end(huge),
      // No Content-Length: the limit is enforced while reading.
      bigchunked: (response) => {
        response.writeHead(200, { "content-type": OCI_MANIFEST, "transfer-encoding": "chunked" });
        for (let i = 0; i < 5; i++) response.write(Buffer.alloc(1024 * 1024, 0x20));
        response.end();
      },
      mediatype: (response) =>
        response
          .writeHead(200, { "content-type": "application/vnd.docker.distribution.manifest.v1+prettyjws" })
          .end(good),
      liar: (response) =>
        response
          .writeHead(200, { "content-type": OCI_MANIFEST })
          .end(
            JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [] }),
          ),
      notjson: (response) => response.writeHead(200, { "content-type": OCI_MANIFEST }).end("<html>"),
      schema1: (response) => response.writeHead(200, { "content-type": OCI_MANIFEST }).end('{"schemaVersion":1}'),
      header: (response) =>
        response
          .writeHead(200, { "content-type": OCI_MANIFEST, "docker-content-digest": sha256(Buffer.from("x")) })
          .end(good),
      bydigest: (response) => response.writeHead(200, { "content-type": OCI_MANIFEST }).end(good),
    };
    const { client } = await fake(t, (request, response) => {
      const reference = (request.url ?? "").split("/manifests/")[1] ?? "";
      const answer = cases[reference.startsWith("sha256:") ? "bydigest" : reference];
      if (answer) answer(response);
      else response.writeHead(404).end();
    });
    await assert.rejects(client.getManifest("big"), refusal("invalid-artifact", "too-large"));
    await assert.rejects(client.getManifest("bigchunked"), refusal("invalid-artifact", "too-large"));
    await assert.rejects(client.getManifest("mediatype"), refusal("invalid-artifact", "media-type"));
    await assert.rejects(client.getManifest("liar"), refusal("invalid-artifact", "media-type"));
    await assert.rejects(client.getManifest("notjson"), refusal("invalid-artifact", "not-json"));
    await assert.rejects(client.getManifest("schema1"), refusal("invalid-artifact", "schema-version"));
    await assert.rejects(client.getManifest("header"), refusal("integrity-mismatch"));
    await assert.rejects(client.getManifest(sha256(Buffer.from("something else"))), refusal("integrity-mismatch"));
    assert.equal((await client.getManifest(sha256(good))).digest, sha256(good));
    // The caller may narrow what it accepts.
    await assert.rejects(
      client.getManifest(sha256(good), { accept: ["application/vnd.oci.image.index.v1+json"] }),
      refusal("invalid-artifact", "media-type"),
    );
  },
);

test(
  "a redirect to another host is refused and nothing reaches that host; a " +
    "redirect within the registry is followed",
  async (t) => {
    const bytes = randomBytes(32);
    const elsewhere = await startFakeRegistry((_request, response) => response.writeHead(200).end(bytes), "127.0.0.2");
    t.after(() => elsewhere.close());
    const { client, server } = await fake(t, (request, response) => {
      if (request.url?.startsWith("/storage/"))
        response.writeHead(200, { "content-length": String(bytes.length) }).end(bytes);
      else if (request.url?.includes(sha256(bytes)))
        response.writeHead(307, { location: `/storage/${sha256(bytes)}` }).end();
      else if (request.method === "POST")
        response.writeHead(202, { location: `http://${elsewhere.host}/upload` }).end();
      else response.writeHead(307, { location: `http://${elsewhere.host}/blob` }).end();
    });
    assert.ok((await drain(await client.getBlob(sha256(bytes)))).equals(bytes));
    assert.equal(server.requests.filter((r) => r.url.startsWith("/storage/")).length, 1);
    const other = sha256(Buffer.from("other"));
    await assert.rejects(client.getBlob(other), refusal("registry-refused", "redirect-other-host"));
    await assert.rejects(client.getManifest("v1"), refusal("registry-refused", "redirect-other-host"));
    await assert.rejects(
      client.putBlob(bufferSource(bytes, sha256(bytes))),
      refusal("registry-refused", "redirect-other-host"),
    );
    assert.deepEqual(elsewhere.requests, [], "the other host saw no request");
  },
);

test("a registry that is down is registry-refused (unreachable), before and during an exchange", async (t) => {
  const port = await new Promise<number>((resolve) => {
    const probe = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
  const client = new OciClient(`http://127.0.0.1:${port}/oats/fleet`);
  await assert.rejects(client.headBlob(sha256(Buffer.from("x"))), refusal("registry-refused", "unreachable"));
  await assert.rejects(client.getManifest("v1"), refusal("registry-refused", "unreachable"));
  await assert.rejects(
    client.putBlob(bufferSource(Buffer.from("x"), sha256(Buffer.from("x")))),
    refusal("registry-refused", "unreachable"),
  );
  // A registry that hangs up in the middle of a blob.
  const bytes = randomBytes(100_000);
  const { client: cut } = await fake(t, (_request, response) => {
    response.writeHead(200, { "content-length": String(bytes.length) });
    response.write(bytes.subarray(0, 1000), () => response.socket?.destroy());
  });
  await assert.rejects(
    async () => drain(await cut.getBlob(sha256(bytes))),
    refusal("registry-refused", "connection-lost"),
  );
});

test("a registry that says it holds other than what a PATCH sent, or that stops answering, is refused", async (t) => {
  let held = 0;
  const { client } = await fake(t, (request, response, body) => {
    if (request.method === "POST") response.writeHead(202, { location: "/v2/oats/fleet/blobs/uploads/u1" }).end();
    else if (request.method === "PATCH") {
      held += body.length;
      response.writeHead(202, { location: "/v2/oats/fleet/blobs/uploads/u1", range: `0-${held - 2}` }).end();
    } else {
      // It would even accept the final PUT: only the Range check stands between this and a "successful" upload.
      const digest = new URL(request.url ?? "/", "http://x").searchParams.get("digest") ?? "";
      response.writeHead(201, { "docker-content-digest": digest }).end();
    }
  });
  const bytes = randomBytes(300);
  await assert.rejects(
    client.putBlob(bufferSource(bytes, sha256(bytes)), { chunked: true, chunkSize: 100 }),
    refusal("registry-refused", "protocol"),
  );
  const silent = await startFakeRegistry(() => undefined);
  t.after(() => silent.close());
  await assert.rejects(
    new OciClient(`http://${silent.host}/oats/fleet`, { idleTimeoutMs: 200 }).headBlob(sha256(bytes)),
    refusal("registry-refused", "unreachable"),
  );
});

test(
  "a registry that reports an offset after a lost connection and then " +
    "refuses to continue from it gets one clean restart",
  async (t) => {
    const bytes = randomBytes(300);
    let session = 0;
    let patches = 0;
    let held: Buffer[] = [];
    const { client } = await fake(t, (request, response, body) => {
      const url = new URL(request.url ?? "/", "http://x");
      if (request.method === "POST") {
        session++;
        held = [];
        response.writeHead(202, { location: `/v2/oats/fleet/blobs/uploads/s${session}` }).end();
      } else if (request.method === "PATCH") {
        patches++;
        if (patches === 2) return void response.socket?.destroy();
        if (patches === 3)
          return void response
            .writeHead(404, { "content-type": "application/json" })
            .end('{"errors":[{"code":"BLOB_UPLOAD_INVALID"}]}');
        held.push(body);
        const size = Buffer.concat(held).length;
        response.writeHead(202, { location: url.pathname, range: `0-${size - 1}` }).end();
      } else if (request.method === "GET") response.writeHead(204, { location: url.pathname, range: "0-99" }).end();
      else if (request.method === "DELETE") response.writeHead(204).end();
      else if (request.method === "PUT") {
        const ok = sha256(Buffer.concat(held)) === url.searchParams.get("digest");
        response.writeHead(ok ? 201 : 400, ok ? { "docker-content-digest": sha256(Buffer.concat(held)) } : {}).end();
      }
    });
    const result = await client.putBlob(bufferSource(bytes, sha256(bytes)), { chunked: true, chunkSize: 100 });
    assert.deepEqual({ resumed: result.resumed, restarted: result.restarted }, { resumed: 1, restarted: 1 });
    assert.equal(session, 2);
  },
);
