import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { closeSync, createReadStream, openSync, readSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { dirTransport } from "../src/evidence/transport-dir.js";
import { ociTransport } from "../src/evidence/transport-oci.js";
import type { EvidenceTransport } from "../src/evidence/transport.js";
import { listOutbox, pushEvidence, receiveRun } from "../src/index.js";
import { REPO, snapshotTree, tempDir } from "./helpers.js";
import { writeLargeLog } from "./support/large-log.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";
import { refusal } from "./support/refusals.js";
import { makeSealedRun } from "./support/sealed-runs.js";
import { makeShare } from "./support/shares.js";

/**
 * A run's log streams all the way: sealed run -> outbox -> far side (a
 * share, a registry) -> read-back -> received store. Each push and pull runs
 * in a child process that reports how far its peak resident set grew; the
 * log is several times that bound, so a path that held the log whole (as
 * one buffer, or as the chunks of one) fails here. A byte flipped in the
 * middle of the far side's copy is still refused while streaming.
 */

const MiB = 1024 * 1024;
const LOG_SIZE = 160 * MiB;
/** The most a push or a pull may grow the peak RSS by: a quarter of the log. */
const GROWTH_BOUND = LOG_SIZE / 4;

const HAVE = registryBinary() !== null;
let registry: Registry | undefined;
before(async () => {
  if (HAVE) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
});

interface ChildReport {
  outcome: Record<string, unknown>;
  growth: number;
}

async function inChild(args: string[], t?: { diagnostic(message: string): void }): Promise<ChildReport> {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ["--expose-gc", "--import", "tsx", join(REPO, "test/support/stream-child.ts"), ...args],
    { cwd: REPO, maxBuffer: 1024 * 1024 },
  );
  const report = JSON.parse(stdout.trim().split("\n").at(-1)!) as ChildReport;
  t?.diagnostic(`${args[0]}: peak RSS grew by ${(report.growth / MiB).toFixed(1)} MiB`);
  return report;
}

async function fileDigest(path: string): Promise<string> {
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return `sha256-${hash.digest("hex")}`;
}

/** Flip one byte in the middle of a file, in place. */
function flipMiddle(path: string): void {
  const fd = openSync(path, "r+");
  try {
    const at = Math.floor(statSync(path).size / 2);
    const byte = Buffer.alloc(1);
    readSync(fd, byte, 0, 1, at);
    byte[0] = byte[0]! ^ 0x01;
    writeSync(fd, byte, 0, 1, at);
  } finally {
    closeSync(fd);
  }
}

/** A scope with one sealed run whose log is LOG_SIZE bytes; `tag` makes its log differ from another's. */
async function largeRun(tag: string) {
  const scope = tempDir("oats-stream-");
  const run = await makeSealedRun(scope, { index: 7, writeLog: (path) => writeLargeLog(path, LOG_SIZE, tag) });
  return { scope, run, logDigest: await fileDigest(join(run.dir, "log")) };
}

/** A transport that damages the far side's copy of the log right after each put, then reads back for real. */
function damagingAfterPut(real: EvidenceTransport, damage: (runId: string) => void): EvidenceTransport {
  return {
    describe: () => real.describe(),
    probe: () => real.probe(),
    async put(bundle) {
      await real.put(bundle);
      damage(bundle.runId);
    },
    readBack: (runId) => real.readBack(runId),
    openBack: (runId) => real.openBack!(runId),
  };
}

async function pullRefused(from: string, runId: string): Promise<void> {
  const scope = tempDir("oats-stream-pull-");
  const before = snapshotTree(scope);
  await assert.rejects(receiveRun(scope, from, runId, { insecure: true }), refusal("integrity-mismatch"));
  assert.deepEqual(snapshotTree(scope), before, "a refused pull leaves the scope as it was");
}

describe("a run's log streams to the far side and back", () => {
  test(
    `Given a sealed run with a ${LOG_SIZE / MiB} MiB log, When it is pushed to a share and pulled into another ` +
      `scope, each in its own process, Then neither grows its peak RSS by ${GROWTH_BOUND / MiB} MiB, and both ` +
      "copies are the log, byte for byte",
    async (t) => {
      const { scope, run, logDigest } = await largeRun("share");
      const { share } = makeShare({ size: "512m" });
      const to = `dir:${share}`;
      const pushed = await inChild(["push", scope, to], t);
      assert.deepEqual(pushed.outcome, { delivered: 1, refused: 0 });
      assert.ok(pushed.growth < GROWTH_BOUND, `push grew the peak RSS by ${(pushed.growth / MiB).toFixed(1)} MiB`);
      const hex = run.runId.slice("sha256-".length);
      assert.equal(await fileDigest(join(share, "runs", hex, "log")), logDigest);
      assert.equal(listOutbox(scope)[0]!.delivered.length, 1);

      const into = tempDir("oats-stream-into-");
      const pulled = await inChild(["pull", into, to, run.runId], t);
      assert.deepEqual(pulled.outcome, { status: "written" });
      assert.ok(pulled.growth < GROWTH_BOUND, `pull grew the peak RSS by ${(pulled.growth / MiB).toFixed(1)} MiB`);
      assert.equal(await fileDigest(join(into, ".agents", "received-runs", run.runId, "log")), logDigest);
    },
  );

  test(
    "Given the share's copy of a large log with one byte flipped in its middle, When it is read back after a " +
      "put, or pulled, Then it is refused (integrity-mismatch), never marked delivered, and the pulling scope " +
      "is unchanged",
    async () => {
      const { scope, run } = await largeRun("damaged share");
      const { share } = makeShare({ size: "512m" });
      const real = dirTransport(share, { allowSameFilesystem: true });
      const logAt = (runId: string) => join(share, "runs", runId.slice("sha256-".length), "log");
      const damaging = damagingAfterPut(real, (runId) => flipMiddle(logAt(runId)));
      await assert.rejects(
        pushEvidence(scope, { to: damaging }),
        refusal("integrity-mismatch", "read-back-mismatch", (error) =>
          assert.match(error.message, /log: read back sha256-[0-9a-f]{64} \(\d+ bytes\)/),
        ),
      );
      assert.deepEqual(listOutbox(scope)[0]!.delivered, [], "nothing is marked delivered");
      await pullRefused(`dir:${share}`, run.runId);
    },
  );

  test(
    `Given a sealed run with a ${LOG_SIZE / MiB} MiB log, When it is pushed to a registry (chunked upload) and ` +
      `pulled back, each in its own process, Then neither grows its peak RSS by ${GROWTH_BOUND / MiB} MiB; ` +
      "a byte flipped in the middle of the registry's blob is refused by push and pull",
    async (t) => {
      if (!HAVE) return t.skip(NO_REGISTRY);
      const { scope, run, logDigest } = await largeRun("registry");
      const to = registry!.ref("oats/stream");
      const pushed = await inChild(["push", scope, to], t);
      assert.deepEqual(pushed.outcome, { delivered: 1, refused: 0 });
      assert.ok(pushed.growth < GROWTH_BOUND, `push grew the peak RSS by ${(pushed.growth / MiB).toFixed(1)} MiB`);

      const into = tempDir("oats-stream-into-");
      const pulled = await inChild(["pull", into, to, run.runId], t);
      assert.deepEqual(pulled.outcome, { status: "written" });
      assert.ok(pulled.growth < GROWTH_BOUND, `pull grew the peak RSS by ${(pulled.growth / MiB).toFixed(1)} MiB`);
      assert.equal(await fileDigest(join(into, ".agents", "received-runs", run.runId, "log")), logDigest);

      const blob = registry!.blobPath(`sha256:${logDigest.slice("sha256-".length)}`);
      flipMiddle(blob);
      await pullRefused(to, run.runId);

      // A fresh scope's push of the same run meets the damaged blob on read-back.
      const again = await largeRun("damaged registry");
      const other = registry!.ref("oats/stream-damaged");
      const real = ociTransport(other);
      const damaging = damagingAfterPut(real, () =>
        flipMiddle(registry!.blobPath(`sha256:${again.logDigest.slice(7)}`)),
      );
      await assert.rejects(pushEvidence(again.scope, { to: damaging }), refusal("integrity-mismatch"));
      assert.deepEqual(listOutbox(again.scope)[0]!.delivered, []);
    },
  );
});
