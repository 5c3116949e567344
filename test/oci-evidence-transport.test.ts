import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import net from "node:net";
import { after, before, test } from "node:test";
import type { EvidenceFileName } from "../src/evidence/transport.js";
import { ociTransport, runManifest, runTag } from "../src/evidence/transport-oci.js";
import { OciClient } from "../src/oci/index.js";
import { enqueueSealedRun, listOutbox, outboxEntries, pushEvidence, readDelivered } from "../src/index.js";
import { runJson, snapshotTree, tempDir } from "./helpers.js";
import { startFakeRegistry } from "./support/fake-registry.js";
import { startInterceptingProxy } from "./support/http-proxy.js";
import { makeSealedRun } from "./support/sealed-runs.js";
import { NO_REGISTRY, registryBinary, sha256, startRegistry, type Registry } from "./support/registry.js";
import { refusal } from "./support/refusals.js";

/** Sealed runs as OCI artifacts: put, read back from the registry, idempotence, refusals. */

const HAVE = registryBinary() !== null;
let registry: Registry;
let tls: Registry;

before(async () => {
  if (HAVE) [registry, tls] = await Promise.all([startRegistry(), startRegistry({ tls: true })]);
});
after(async () => {
  await Promise.all([registry?.stop(), tls?.stop()]);
});

function bundle(seed = randomBytes(8).toString("hex")) {
  const record = Buffer.from(JSON.stringify({ format: "oats.run.v1", seed }));
  const runId = `sha256-${createHash("sha256").update(record).digest("hex")}`;
  const files = new Map<EvidenceFileName, Buffer>([
    ["record.json", record],
    ["log", Buffer.from(`2026-12-01T03:40:00.000000Z out hello ${seed}\n# exit: code 0\n# RESULT: OK\n`)],
    ["audit.jsonl", Buffer.from(`{"action":"run-start","seed":"${seed}"}\n`)],
  ]);
  return { runId, seq: 1, files };
}

test("a sealed run goes up as one artifact and reads back, byte for byte, from the registry", async (t) => {
  if (!HAVE) return t.skip(NO_REGISTRY);
  const transport = ociTransport(registry.ref("oats/evidence"));
  assert.equal(transport.describe(), `http://${registry.host}/oats/evidence`);
  assert.deepEqual(await transport.probe(), { state: "reachable", reason: null });
  const run = bundle();
  assert.equal(await transport.readBack(run.runId), null);
  await transport.put(run);
  const back = await transport.readBack(run.runId);
  assert.deepEqual([...back!.keys()].sort(), ["audit.jsonl", "log", "record.json"]);
  for (const [name, bytes] of run.files) assert.ok(back!.get(name)!.equals(bytes), name);
  // The manifest is exactly the deterministic one, under the run's tag.
  const client = new OciClient(registry.ref("oats/evidence"));
  const manifest = await client.getManifest(runTag(run.runId));
  assert.ok(manifest.bytes.equals(runManifest(run.runId, run.files).bytes));
  // A second put of the same run changes nothing and succeeds.
  await transport.put(run);
  assert.equal((await client.getManifest(runTag(run.runId))).digest, manifest.digest);
  // The same run id with other content is refused, and the registry keeps the first.
  const other = { ...run, files: new Map(run.files).set("log", Buffer.from("forged\n")) };
  await assert.rejects(transport.put(other), refusal("integrity-mismatch", "other-content"));
  assert.ok((await transport.readBack(run.runId))!.get("log")!.equals(run.files.get("log")!));
});

test(
  "read back verifies: a log corrupted in the registry's storage is " + "integrity-mismatch, not a delivered run",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const transport = ociTransport(registry.ref("oats/evidence-corrupt"));
    const run = bundle();
    await transport.put(run);
    const log = run.files.get("log")!;
    const tampered = Buffer.from(log);
    tampered[0] = 0x21;
    writeFileSync(registry.blobPath(sha256(log)), tampered);
    await assert.rejects(transport.readBack(run.runId), refusal("integrity-mismatch"));
  },
);

test(
  "probe: a down registry and an untrusted certificate are unreachable " +
    "with their reason; a bad destination is refused",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, "127.0.0.1", () => {
        const { port } = probe.address() as net.AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    // The client's own refusal rides along, so a push can raise the code artifact push and pull give one outage.
    for (const [destination, reason] of [
      [`http://127.0.0.1:${port}/oats/evidence`, "unreachable"],
      [tls.ref("oats/evidence"), "tls"],
    ] as const) {
      const probe = await ociTransport(destination).probe();
      assert.equal(probe.state, "unreachable", destination);
      assert.equal(probe.reason, reason, destination);
      assert.equal((probe as { refusal?: { code?: string } }).refusal?.code, "registry-refused", destination);
    }
    assert.throws(() => ociTransport(registry.ref("oats/evidence", ":latest")), refusal("invalid-input"));
    assert.throws(() => ociTransport("http://10.1.2.3/oats/evidence"), refusal("registry-refused"));
    await assert.rejects(
      ociTransport(registry.ref("oats/evidence")).readBack("not-a-run-id"),
      refusal("invalid-input"),
    );
  },
);

test("read back refuses a tag that names another run or an artifact of another type", async (t) => {
  const run = bundle();
  const otherRun = bundle();
  const cases = [
    [runManifest(otherRun.runId, otherRun.files).bytes, "integrity-mismatch"],
    [
      Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: "application/vnd.oci.image.manifest.v1+json",
          artifactType: "application/vnd.other",
          layers: [],
        }),
      ),
      "invalid-artifact",
    ],
  ] as const;
  for (const [bytes, code] of cases) {
    const fake = await startFakeRegistry((request, response) => {
      if (request.url?.includes("/manifests/"))
        response.writeHead(200, { "content-type": "application/vnd.oci.image.manifest.v1+json" }).end(bytes);
      else response.writeHead(404).end();
    });
    t.after(() => fake.close());
    await assert.rejects(ociTransport(`http://${fake.host}/oats/evidence`).readBack(run.runId), refusal(code));
  }
});

test(
  "the outbox delivers sealed runs to a registry, proves it by reading " +
    "back, and a second push sends nothing (library and CLI)",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const scope = tempDir("oats-scope-");
    const runs = [await makeSealedRun(scope, { index: 1 }), await makeSealedRun(scope, { index: 2 })];
    for (const run of runs) await enqueueSealedRun(scope, run.handle);
    const to = registry.ref("oats/runs");
    const pushed = await pushEvidence(scope, { to });
    assert.deepEqual(
      pushed.delivered.map((entry) => entry.runId),
      runs.map((run) => run.runId),
    );
    assert.equal(pushed.to, to);
    for (const entry of outboxEntries(scope)) {
      const back = await readDelivered(to, entry.runId);
      assert.ok(back, entry.runId);
      for (const file of entry.files) assert.ok(back.has(file.name), file.name);
    }
    assert.ok(
      (await readDelivered(to, runs[0]!.runId))!
        .get("record.json")!
        .equals(readFileSync(join(scope, ".agents/runs", runs[0]!.handle, "record.json"))),
    );
    assert.deepEqual(
      listOutbox(scope, { to }).map((entry) => entry.delivered.map((mark) => mark.to)),
      [[to], [to]],
    );
    const again = await pushEvidence(scope, { to });
    assert.deepEqual(again.delivered, []);
    // The CLI path: a third run through `oats push --to`, and a down registry is refused with the outbox untouched.
    const third = await makeSealedRun(scope, { index: 3 });
    await enqueueSealedRun(scope, third.handle);
    const before = snapshotTree(join(scope, ".agents/outbox"));
    const down = runJson(["--scope", scope, "push", "--to", "http://127.0.0.1:1/oats/runs"]);
    assert.notEqual(down.status, 0, down.stderr);
    assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), before);
    const cli = runJson(["--scope", scope, "push", "--to", to]);
    assert.equal(cli.status, 0, cli.stderr);
    assert.deepEqual(
      cli.envelope.result!["delivered"].map((entry: { runId: string }) => entry.runId),
      [third.runId],
    );
  },
);

test(
  "a run whose manifest the registry first refuses as naming an unknown " +
    "blob (a blob it lost track of) is checked, its blob sent again, and delivered",
  async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const run = bundle();
    const logDigest = sha256(run.files.get("log")!);
    // The proxy claims the log is there on the first HEAD: only the manifest PUT's real refusal can make the transport
    // send it.
    let lied = 0;
    const proxy = await startInterceptingProxy(registry.port, ({ method, path }) =>
      method === "HEAD" && path.endsWith(`/blobs/${logDigest}`) && lied++ === 0
        ? { status: 200, headers: { "content-length": String(run.files.get("log")!.length) } }
        : null,
    );
    t.after(() => proxy.close());
    const transport = ociTransport(`http://${proxy.host}/oats/evidence-lost`);
    await transport.put(run);
    assert.equal(lied, 2, "the log's blob was HEADed again after the refusal");
    assert.equal(proxy.seen.filter((each) => each.method === "PUT" && each.path.includes("/manifests/")).length, 2);
    const back = await ociTransport(registry.ref("oats/evidence-lost")).readBack(run.runId);
    assert.ok(back!.get("log")!.equals(run.files.get("log")!));
  },
);
