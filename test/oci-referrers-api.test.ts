/**
 * Referrers (distribution spec 1.1) both ways, against a loopback registry
 * this test writes (the real registry the other tests start, distribution
 * 2.8, has no referrers API, so only the tag schema runs there):
 *
 * - a registry with the API indexes a manifest put with a `subject` and says
 *   so in `OCI-Subject`: oats lists through `GET /v2/<name>/referrers/<digest>`
 *   and never writes the referrers tag;
 * - a registry without it answers 404 there: oats keeps the referrers tag
 *   `sha256-<hex>` (an image index), adds to it, and lists through it.
 *
 * Attaching the same referrer again writes nothing either way.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import { canonicalJsonBytes } from "../src/index.js";
import { attachReferrer, listReferrers, OciClient } from "../src/oci/index.js";
import { startFakeRegistry } from "./support/fake-registry.js";

const MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const INDEX = "application/vnd.oci.image.index.v1+json";
const BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json";
const digestOf = (bytes: Buffer) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;

/** A registry holding manifests by digest and tag; `api` decides whether it has the referrers API. */
async function registry(t: { after(fn: () => Promise<void>): void }, api: boolean) {
  const manifests = new Map<string, { bytes: Buffer; type: string }>();
  const server = await startFakeRegistry((request, response, body) => {
    const url = new URL(request.url ?? "/", "http://x");
    const referrers = /^\/v2\/oats\/fleet\/referrers\/(sha256:[0-9a-f]{64})$/.exec(url.pathname);
    const manifest = /^\/v2\/oats\/fleet\/manifests\/(.+)$/.exec(url.pathname);
    if (referrers && request.method === "GET") {
      if (!api) return void response.writeHead(404).end();
      const artifactType = url.searchParams.get("artifactType");
      const listed = [...manifests.entries()]
        .filter(([reference]) => reference.startsWith("sha256:"))
        .map(([digest, held]) => ({ digest, held, value: JSON.parse(held.bytes.toString("utf8")) }))
        .filter(({ value }) => value.subject?.digest === referrers[1])
        .filter(({ value }) => artifactType === null || value.artifactType === artifactType)
        .map(({ digest, held, value }) => ({
          mediaType: held.type,
          digest,
          size: held.bytes.length,
          artifactType: value.artifactType,
        }));
      const index = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: INDEX, manifests: listed }));
      return void response.writeHead(200, { "content-type": INDEX }).end(index);
    }
    if (manifest && request.method === "PUT") {
      const type = String(request.headers["content-type"]);
      const digest = digestOf(body);
      manifests.set(manifest[1]!, { bytes: body, type });
      manifests.set(digest, { bytes: body, type });
      const subject = JSON.parse(body.toString("utf8")).subject?.digest as string | undefined;
      const headers: Record<string, string> = { "docker-content-digest": digest };
      if (api && subject !== undefined) headers["oci-subject"] = subject;
      return void response.writeHead(201, headers).end();
    }
    if (manifest && (request.method === "GET" || request.method === "HEAD")) {
      const held = manifests.get(manifest[1]!);
      if (held === undefined) return void response.writeHead(404).end();
      response.writeHead(200, {
        "content-type": held.type,
        "docker-content-digest": digestOf(held.bytes),
        "content-length": String(held.bytes.length),
      });
      return void response.end(request.method === "GET" ? held.bytes : undefined);
    }
    response.writeHead(404).end();
  });
  t.after(() => server.close());
  const client = new OciClient(`http://${server.host}/oats/fleet`);
  return { server, session: client.session, manifests };
}

const subjectDigest = `sha256:${"5".repeat(64)}`;

function referrer(artifactType: string, note: string): { bytes: Buffer; descriptor: Record<string, any> } {
  const empty = `sha256:${createHash("sha256").update("{}").digest("hex")}`;
  const bytes = canonicalJsonBytes({
    schemaVersion: 2,
    mediaType: MANIFEST,
    artifactType,
    config: { mediaType: "application/vnd.oci.empty.v1+json", digest: empty, size: 2 },
    layers: [{ mediaType: artifactType, digest: `sha256:${"6".repeat(64)}`, size: 10 }],
    subject: { mediaType: MANIFEST, digest: subjectDigest, size: 100 },
    annotations: { note },
  });
  return { bytes, descriptor: { mediaType: MANIFEST, digest: digestOf(bytes), size: bytes.length, artifactType } };
}

test("a registry with the referrers API: attached via the API, listed through it, the tag never written", async (t) => {
  const { server, session } = await registry(t, true);
  const bundle = referrer(BUNDLE, "one");
  const other = referrer("application/example", "two");
  const first = await attachReferrer(session, bundle.bytes, bundle.descriptor as never, subjectDigest);
  assert.deepEqual(first, { digest: bundle.descriptor["digest"], via: "api", status: "attached" });
  await attachReferrer(session, other.bytes, other.descriptor as never, subjectDigest);
  const listed = await listReferrers(session, subjectDigest, { artifactType: BUNDLE });
  assert.equal(listed.via, "api");
  assert.deepEqual(
    listed.descriptors.map((descriptor) => descriptor.digest),
    [bundle.descriptor["digest"]],
  );
  const puts = () => server.requests.filter((request) => request.method === "PUT").map((request) => request.url);
  assert.ok(!puts().some((url) => url.includes("sha256-")), "no referrers tag was written");
  const count = puts().length;
  const again = await attachReferrer(session, bundle.bytes, bundle.descriptor as never, subjectDigest);
  assert.deepEqual(again, { digest: bundle.descriptor["digest"], via: "api", status: "kept" });
  assert.equal(puts().length, count, "attaching again writes nothing");
});

test("a registry without it (404): the referrers tag sha256-<hex> holds the index, added to, listed", async (t) => {
  const { server, session, manifests } = await registry(t, false);
  const bundle = referrer(BUNDLE, "one");
  const other = referrer(BUNDLE, "two");
  assert.deepEqual(await attachReferrer(session, bundle.bytes, bundle.descriptor as never, subjectDigest), {
    digest: bundle.descriptor["digest"],
    via: "tag",
    status: "attached",
  });
  await attachReferrer(session, other.bytes, other.descriptor as never, subjectDigest);
  const tag = manifests.get(subjectDigest.replace(":", "-"));
  assert.ok(tag, "the referrers tag exists");
  assert.equal(tag.type, INDEX);
  assert.deepEqual(
    JSON.parse(tag.bytes.toString("utf8")).manifests.map((entry: { digest: string }) => entry.digest),
    [bundle.descriptor["digest"], other.descriptor["digest"]],
  );
  const listed = await listReferrers(session, subjectDigest, { artifactType: BUNDLE });
  assert.equal(listed.via, "tag");
  assert.equal(listed.descriptors.length, 2);
  const count = server.requests.filter((request) => request.method === "PUT").length;
  const again = await attachReferrer(session, other.bytes, other.descriptor as never, subjectDigest);
  assert.deepEqual(again, { digest: other.descriptor["digest"], via: "tag", status: "kept" });
  assert.equal(server.requests.filter((request) => request.method === "PUT").length, count);
});
