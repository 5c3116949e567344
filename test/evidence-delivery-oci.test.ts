import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { runJson, snapshotTree, tempDir } from "./helpers.js";
import { OatsError } from "../src/core/errors.js";
import { enqueueSealedRun, listOutbox, pushEvidence, readDelivered, type EvidenceTransport } from "../src/index.js";
import { transportFor } from "../src/evidence/transport.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";
import { makeSealedRun } from "./support/sealed-runs.js";

/**
 * The outbox through the OCI transport (src/evidence/transport-oci.ts,
 * registered as `oci://` and loopback `http://`): the same push, in order, read
 * back from the registry itself, idempotent, and a registry that drops what it
 * was given is caught by the read-back.
 */

const HAVE = registryBinary() !== null;
let registry: Registry;

before(async () => {
  if (HAVE) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
});

describe("evidence delivery to an OCI registry", () => {
  test("Given three queued runs, When pushed to a loopback registry, Then each is delivered in order and read back from the registry; a second push sends nothing; `oats push --to http://…` and `oats outbox ls` agree", async (t) => {
    if (!HAVE) return t.skip(NO_REGISTRY);
    const scope = tempDir("oats-scope-");
    const runs = [await makeSealedRun(scope, { index: 1 })];
    await enqueueSealedRun(scope, runs[0]!.handle);
    const to = registry.ref("oats/evidence");
    const first = runJson(["--scope", scope, "push", "--to", to]);
    assert.equal(first.status, 0, first.stderr);
    assert.deepEqual(
      first.envelope.result!["delivered"].map((entry: { seq: number }) => entry.seq),
      [1],
    );
    // Sealed later: the second is queued by hand, the third only by the push's sweep.
    runs.push(await makeSealedRun(scope, { index: 2 }), await makeSealedRun(scope, { index: 3 }));
    await enqueueSealedRun(scope, runs[1]!.handle);
    const order: number[] = [];
    const real = transportFor(to);
    const recording: EvidenceTransport = {
      describe: () => real.describe(),
      probe: () => real.probe(),
      readBack: (id) => real.readBack(id),
      put: async (bundle) => (order.push(bundle.seq), real.put(bundle)),
    };
    const second = await pushEvidence(scope, { to: recording });
    assert.deepEqual(order, [2, 3]);
    assert.equal(second.alreadyDelivered, 1);
    for (const run of runs) {
      const back = await readDelivered(to, run.runId);
      assert.ok(back!.get("record.json")!.equals(run.recordBytes));
      assert.ok(back!.get("log")!.equals(run.log));
    }
    const third = await pushEvidence(scope, { to });
    assert.deepEqual(third.delivered, []);
    const listed = runJson(["--scope", scope, "outbox", "ls"]);
    assert.deepEqual(
      listed.envelope.result!["entries"].map((entry: { delivered: { to: string }[] }) =>
        entry.delivered.map((mark) => mark.to),
      ),
      runs.map(() => [real.describe()]),
    );
  });

  test(
    "Given a registry transport whose put succeeds and stores nothing, When " +
      "pushed, Then integrity-mismatch and the run stays queued; the registry " +
      "unreachable keeps it queued too",
    async (t) => {
      if (!HAVE) return t.skip(NO_REGISTRY);
      const scope = tempDir("oats-scope-");
      const run = await makeSealedRun(scope);
      await enqueueSealedRun(scope, run.handle);
      const real = transportFor(registry.ref("oats/dropped"));
      const dropping: EvidenceTransport = {
        describe: () => real.describe(),
        probe: () => real.probe(),
        readBack: (id) => real.readBack(id),
        put: async () => undefined,
      };
      await assert.rejects(
        pushEvidence(scope, { to: dropping }),
        (error: unknown) =>
          error instanceof OatsError &&
          error.code === "integrity-mismatch" &&
          error.details["reason"] === "read-back-mismatch",
      );
      // A port nobody listens on: unreachable, nothing marked.
      await assert.rejects(
        pushEvidence(scope, { to: "http://127.0.0.1:9/oats/evidence" }),
        (error: unknown) =>
          error instanceof OatsError && error.code === "registry-refused" && error.details["reason"] === "unreachable",
      );
      assert.deepEqual(listOutbox(scope)[0]!.delivered, []);
    },
  );
});

describe("a registry that is down", () => {
  test(
    "Given nothing listening where the registry was, When evidence is pushed there, and artifacts pushed to and " +
      "pulled from it, Then all three are registry-refused, reason unreachable, exit 6 (one outage, one code); " +
      "the evidence stays queued",
    async () => {
      const port = await new Promise<number>((resolve) => {
        const server = net.createServer();
        server.listen(0, "127.0.0.1", () => {
          const { port } = server.address() as net.AddressInfo;
          server.close(() => resolve(port));
        });
      });
      const down = `http://127.0.0.1:${port}/oats/down`;
      const scope = tempDir("oats-scope-");
      const run = await makeSealedRun(scope, { index: 1 });
      await enqueueSealedRun(scope, run.handle);
      const outbox = snapshotTree(join(scope, ".agents/outbox"));
      const tool = join(tempDir("oats-tool-"), "tool");
      mkdirSync(tool);
      writeFileSync(join(tool, "run"), "#!/bin/sh\n", { mode: 0o755 });
      const retained = runJson(["--scope", scope, "retain", tool, "--kind", "capture", "--id", "tool"]);
      assert.equal(retained.status, 0, retained.stdout);
      const { format, value } = retained.envelope.result!["execIntegrity"];
      const integrity = `${format}:${value}`;
      const outcomes = [
        runJson(["--scope", scope, "push", "--to", down]),
        runJson(["--scope", scope, "push", `capture:tool@${integrity}`, "--to", `${down}:v1`]),
        runJson(["--scope", scope, "pull", `${down}:v1`]),
      ];
      for (const ran of outcomes) {
        assert.deepEqual(
          [ran.status, ran.envelope.error?.code, ran.envelope.error?.details["reason"]],
          [6, "registry-refused", "unreachable"],
          ran.stdout,
        );
      }
      assert.equal(outcomes[0]!.envelope.error!.details["to"], down);
      assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), outbox, "the evidence stays queued, unmarked");
      assert.deepEqual(listOutbox(scope)[0]!.delivered, []);
    },
  );
});
