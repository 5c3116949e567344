import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { appendFileSync, readFileSync, readdirSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO, snapshotTree, tempDir } from "./helpers.js";
import { OatsError } from "../src/core/errors.js";
import { bytesDigest } from "../src/core/canonical-json.js";
import { setFaultHook } from "../src/retention/store/faults.js";
import {
  enqueueSealedRun,
  listOutbox,
  outboxEntries,
  pushEvidence,
  readDelivered,
  type EvidenceTransport,
} from "../src/index.js";
import { dirTransport } from "../src/evidence/transport-dir.js";
import { MOUNT_SKIP, makeShare, mountAt, shareTempDir } from "./support/shares.js";
import { makeSealedRun } from "./support/sealed-runs.js";
import { refusal } from "./support/refusals.js";

/**
 * Delivery of run evidence: the outbox holds exact bytes in order, push
 * delivers in order and believes only what it reads back from the far side,
 * an unreachable far side keeps everything queued, and a push killed between
 * put and mark loses and duplicates nothing.
 */

function hex(runId: string): string {
  return runId.slice("sha256-".length);
}

function auditLines(scope: string, seqs: number[]): string {
  const lines = readFileSync(join(scope, ".agents/audit/audit.jsonl"), "utf8").split("\n").filter(Boolean);
  return seqs.map((seq) => `${lines[seq - 1]}\n`).join("");
}

async function scopeWithRuns(count: number) {
  const scope = tempDir("oats-scope-");
  const runs = [];
  for (let index = 1; index <= count; index += 1) runs.push(await makeSealedRun(scope, { index }));
  return { scope, runs };
}

/** The dir transport wrapped to record the order of puts (the far side is still the real share). */
function recording(share: string, order: number[]): EvidenceTransport {
  const real = dirTransport(share, { allowSameFilesystem: true });
  return { ...real, describe: real.describe, put: async (bundle) => (order.push(bundle.seq), real.put(bundle)) };
}

describe("the outbox", () => {
  test(
    "Given sealed runs, When enqueued, Then each entry holds the record's, " +
      "the log's and the run's audit lines' exact bytes, numbered in order; " +
      "enqueuing again adds nothing",
    async () => {
      const { scope, runs } = await scopeWithRuns(3);
      for (const run of runs) assert.equal((await enqueueSealedRun(scope, run.handle)).queued, true);
      const again = await enqueueSealedRun(scope, { handle: runs[1]!.handle, runId: runs[1]!.runId });
      assert.equal(again.queued, false);
      assert.equal(again.entry.seq, 2);
      const entries = outboxEntries(scope);
      assert.deepEqual(
        entries.map((entry) => [entry.seq, entry.runId]),
        runs.map((run, index) => [index + 1, run.runId]),
      );
      for (const [index, run] of runs.entries()) {
        const dir = join(scope, ".agents/outbox/entries", `${String(index + 1).padStart(12, "0")}-${hex(run.runId)}`);
        assert.ok(readFileSync(join(dir, "record.json")).equals(run.recordBytes));
        assert.ok(readFileSync(join(dir, "log")).equals(run.log));
        // run-start, dispatch and run-end, byte for byte as the audit log holds them.
        assert.equal(readFileSync(join(dir, "audit.jsonl"), "utf8"), auditLines(scope, run.seqs));
        assert.deepEqual(entries[index]!.audit, run.seqs);
      }
      assert.deepEqual(
        readdirSync(join(scope, ".agents/outbox/entries")).filter((name) => name.startsWith(".")),
        [],
        "no staging left behind",
      );
    },
  );

  test(
    "Given a run whose log no longer matches its sealed record (or whose " +
      "record is not canonical), When enqueued, Then integrity-mismatch / " +
      "invalid-artifact and the outbox is byte-for-byte as it was",
    async () => {
      const { scope, runs } = await scopeWithRuns(2);
      await enqueueSealedRun(scope, runs[0]!.handle);
      const before = snapshotTree(join(scope, ".agents/outbox"));
      writeFileSync(
        join(runs[1]!.dir, "log"),
        Buffer.concat([runs[1]!.log, Buffer.from("2026-12-01T03:40:09.000000Z out forged\n")]),
      );
      await assert.rejects(enqueueSealedRun(scope, runs[1]!.handle), refusal("integrity-mismatch"));
      // Same size, one byte changed: only the digest tells.
      const flipped = Buffer.from(runs[1]!.log);
      flipped[flipped.indexOf("line two")] = "L".charCodeAt(0);
      writeFileSync(join(runs[1]!.dir, "log"), flipped);
      await assert.rejects(enqueueSealedRun(scope, runs[1]!.handle), refusal("integrity-mismatch"));
      writeFileSync(join(runs[1]!.dir, "log"), runs[1]!.log);
      writeFileSync(join(runs[1]!.dir, "record.json"), ` ${runs[1]!.recordBytes.toString("utf8")}`);
      await assert.rejects(
        enqueueSealedRun(scope, runs[1]!.handle),
        refusal("invalid-artifact", "run-record-not-canonical"),
      );
      await assert.rejects(enqueueSealedRun(scope, "../escape"), refusal("invalid-input"));
      await assert.rejects(
        enqueueSealedRun(scope, { handle: runs[0]!.handle, runId: runs[1]!.runId }),
        refusal("integrity-mismatch"),
      );
      assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), before);
    },
  );

  test(
    "Given a log of megabytes (read and copied in many pieces), When " +
      "enqueued, Then the entry holds its exact bytes; one byte changed in its " +
      "last piece is refused",
    async () => {
      const scope = tempDir("oats-scope-");
      const lines = Array.from({ length: 30_000 }, (_, index) => `line ${index} ${"x".repeat(index % 61)}`);
      const [run, other] = [
        await makeSealedRun(scope, { index: 1, lines }),
        await makeSealedRun(scope, { index: 2, lines }),
      ];
      assert.ok(run.log.length > 1024 * 1024, `${run.log.length} bytes`);
      const { entry } = await enqueueSealedRun(scope, run.handle);
      const dir = join(scope, ".agents/outbox/entries", `${String(entry.seq).padStart(12, "0")}-${hex(run.runId)}`);
      assert.ok(readFileSync(join(dir, "log")).equals(run.log));
      assert.deepEqual(
        entry.files.find((file) => file.name === "log"),
        { name: "log", digest: bytesDigest(run.log), bytes: run.log.length },
      );
      const before = snapshotTree(join(scope, ".agents/outbox"));
      const flipped = Buffer.from(other.log);
      flipped[flipped.length - 20] = flipped[flipped.length - 20]! ^ 1;
      writeFileSync(join(other.dir, "log"), flipped);
      await assert.rejects(enqueueSealedRun(scope, other.handle), refusal("integrity-mismatch"));
      assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), before);
    },
  );

  test(
    "Given a log that changes after the record was read and before the log " +
      "is copied (a racing writer, injected there), When enqueued, Then " +
      "integrity-mismatch (log-mismatch) and the outbox is byte-for-byte as it " +
      "was; a copy that fails is outbox-unwritable and leaves it as it was too",
    async () => {
      const { scope, runs } = await scopeWithRuns(2);
      await enqueueSealedRun(scope, runs[0]!.handle);
      const before = snapshotTree(join(scope, ".agents/outbox"));
      const log = join(runs[1]!.dir, "log");
      const races: Array<[string, () => void]> = [
        ["appended", () => appendFileSync(log, "2026-12-01T03:40:09.000000Z out forged\n")],
        [
          "same size",
          () => writeFileSync(log, Buffer.from(runs[1]!.log.toString("utf8").replace("line two", "line 2wo"))),
        ],
      ];
      try {
        for (const [what, race] of races) {
          writeFileSync(log, runs[1]!.log);
          setFaultHook((step, detail) => {
            if (step === "copy" && detail === log) race();
          });
          await assert.rejects(
            enqueueSealedRun(scope, runs[1]!.handle),
            refusal("integrity-mismatch", "log-mismatch"),
            what,
          );
          assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), before, what);
        }
        writeFileSync(log, runs[1]!.log);
        setFaultHook((step) => {
          if (step === "copy")
            throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
        });
        await assert.rejects(
          enqueueSealedRun(scope, runs[1]!.handle),
          refusal("audit-unavailable", "outbox-unwritable"),
        );
        assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), before);
      } finally {
        setFaultHook(null);
      }
      assert.equal(
        (await enqueueSealedRun(scope, runs[1]!.handle)).queued,
        true,
        "with the log as sealed, it is queued",
      );
      // Queued already: enqueuing again still reads the log, and refuses one that is no longer the sealed one.
      appendFileSync(log, "2026-12-01T03:40:09.000000Z out forged\n");
      const queued = snapshotTree(join(scope, ".agents/outbox"));
      await assert.rejects(enqueueSealedRun(scope, runs[1]!.handle), refusal("integrity-mismatch", "log-mismatch"));
      assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), queued);
    },
  );

  test(
    "Given a run whose record names a dispatch audit entry the audit log " +
      "holds with another hash, When enqueued, Then integrity-mismatch",
    async () => {
      const scope = tempDir("oats-scope-");
      const run = await makeSealedRun(scope);
      const record = JSON.parse(run.recordBytes.toString("utf8"));
      record.dispatchAudit.hash = `sha256-${"0".repeat(64)}`;
      const { canonicalJsonBytes } = await import("../src/core/canonical-json.js");
      writeFileSync(join(run.dir, "record.json"), canonicalJsonBytes(record));
      await assert.rejects(enqueueSealedRun(scope, run.handle), refusal("integrity-mismatch"));
    },
  );

  test(
    "Given a queued entry changed on disk after it was queued, When pushed, " +
      "Then the push refuses it (integrity-mismatch), delivers what came " +
      "before it, and nothing after it",
    async () => {
      const { scope, runs } = await scopeWithRuns(3);
      for (const run of runs) await enqueueSealedRun(scope, run.handle);
      const { share } = makeShare();
      const entryLog = join(scope, ".agents/outbox/entries", `000000000002-${hex(runs[1]!.runId)}`, "log");
      writeFileSync(entryLog, "forged\n");
      const order: number[] = [];
      await assert.rejects(pushEvidence(scope, { to: recording(share, order) }), refusal("integrity-mismatch"));
      assert.deepEqual(order, [1], "in order: the third run is not delivered before the second");
      assert.deepEqual(
        readdirSync(join(share, "runs")).filter((name) => !name.startsWith(".")),
        [hex(runs[0]!.runId)],
      );
      assert.deepEqual(
        listOutbox(scope).map((entry) => entry.delivered.length),
        [1, 0, 0],
      );
    },
  );
});

describe("pushing to a share", () => {
  test(
    "Given three queued runs and a share on another filesystem (tmpfs), When " +
      "pushed, Then they are delivered in order, read back from the share, " +
      "marked; a second push sends nothing",
    async (t) => {
      const { scope, runs } = await scopeWithRuns(3);
      for (const run of runs) await enqueueSealedRun(scope, run.handle);
      const { share, mounted } = makeShare();
      if (!mounted) t.diagnostic(`SKIPPED DETAIL: ${MOUNT_SKIP}`);
      const first = await pushEvidence(scope, { to: `dir:${share}`, allowSameFilesystem: !mounted });
      assert.deepEqual(
        first.delivered.map((entry) => entry.seq),
        [1, 2, 3],
      );
      assert.equal(first.alreadyDelivered, 0);
      for (const run of runs) {
        const dir = join(share, "runs", hex(run.runId));
        assert.deepEqual(readdirSync(dir).sort(), ["audit.jsonl", "log", "record.json"]);
        assert.ok(readFileSync(join(dir, "record.json")).equals(run.recordBytes));
        assert.ok(readFileSync(join(dir, "log")).equals(run.log));
        assert.equal(readFileSync(join(dir, "audit.jsonl"), "utf8"), auditLines(scope, run.seqs));
      }
      // Read from the far side only: the local run directories are gone and it still answers.
      for (const run of runs) rmSync(run.dir, { recursive: true });
      const back = await readDelivered(`dir:${share}`, runs[2]!.runId);
      assert.ok(back?.get("log")?.equals(runs[2]!.log));
      const listed = listOutbox(scope);
      assert.deepEqual(
        listed.map((entry) => entry.delivered.map((mark) => mark.to)),
        runs.map(() => [`dir:${share}`]),
      );

      const shareBefore = snapshotTree(share);
      const order: number[] = [];
      const second = await pushEvidence(scope, { to: recording(share, order) });
      assert.deepEqual(second.delivered, []);
      assert.equal(second.alreadyDelivered, 3);
      assert.deepEqual(order, [], "nothing was sent again");
      assert.deepEqual(snapshotTree(share), shareBefore);
    },
  );

  test(
    "Given a far side that is missing, then an empty mount point " +
      "(unmounted), When pushed, Then far-side-unreachable and everything " +
      "stays queued; once mounted, a push delivers all of it in order",
    async (t) => {
      const { scope, runs } = await scopeWithRuns(3);
      for (const run of runs.slice(0, 2)) await enqueueSealedRun(scope, run.handle);
      const base = shareTempDir("oats-far-");
      const mountPoint = join(base, "evidence");
      const before = snapshotTree(join(scope, ".agents/outbox"));
      await assert.rejects(
        pushEvidence(scope, { to: `dir:${mountPoint}` }),
        refusal("artifact-not-found", "far-side-unreachable"),
      );
      // The mount point exists but nothing is mounted on it: the scope's own filesystem.
      const { mkdirSync } = await import("node:fs");
      mkdirSync(mountPoint);
      await assert.rejects(
        pushEvidence(scope, { to: `dir:${mountPoint}` }),
        (error: unknown) => error instanceof OatsError && error.details["probe"] === "same-filesystem",
      );
      assert.deepEqual(readdirSync(mountPoint), [], "nothing written onto the local disk under the mount point");
      assert.deepEqual(snapshotTree(join(scope, ".agents/outbox")), before, "nothing dropped or marked");
      // A run sealed while the far side was away is queued behind the others.
      await enqueueSealedRun(scope, runs[2]!.handle);
      const mounted = mountAt(mountPoint);
      if (!mounted) t.diagnostic(`SKIPPED DETAIL: ${MOUNT_SKIP}`);
      const order: number[] = [];
      const transport = dirTransport(
        mountPoint,
        mounted ? { localPath: join(scope, ".agents/outbox") } : { allowSameFilesystem: true },
      );
      const pushed = await pushEvidence(scope, {
        to: { ...transport, put: async (bundle) => (order.push(bundle.seq), transport.put(bundle)) },
      });
      assert.deepEqual(order, [1, 2, 3]);
      assert.deepEqual(
        pushed.delivered.map((entry) => entry.runId),
        runs.map((run) => run.runId),
      );
    },
  );
});

describe("read-back is the proof", () => {
  test(
    "Given a far side that silently corrupts a file between put and " +
      "read-back (truncates the log on the share), When pushed, Then " +
      "integrity-mismatch naming the file, nothing is marked, and a later push " +
      "refuses the damaged copy rather than trusting it",
    async () => {
      const { scope, runs } = await scopeWithRuns(2);
      for (const run of runs) await enqueueSealedRun(scope, run.handle);
      const { share, mounted } = makeShare();
      const real = dirTransport(share, { allowSameFilesystem: !mounted });
      const corrupting: EvidenceTransport = {
        ...real,
        async put(bundle) {
          await real.put(bundle);
          truncateSync(join(share, "runs", hex(bundle.runId), "log"), 10);
        },
      };
      await assert.rejects(pushEvidence(scope, { to: corrupting }), (error: unknown) => {
        assert.ok(error instanceof OatsError);
        assert.equal(error.code, "integrity-mismatch");
        assert.equal(error.details["reason"], "read-back-mismatch");
        assert.match(String((error.details["differences"] as string[])[0]), /^log: /);
        return true;
      });
      assert.deepEqual(
        listOutbox(scope).map((entry) => entry.delivered.length),
        [0, 0],
      );
      await assert.rejects(
        pushEvidence(scope, { to: real }),
        refusal("integrity-mismatch", "existing-content-differs"),
      );
      assert.deepEqual(
        listOutbox(scope).map((entry) => entry.delivered.length),
        [0, 0],
      );
    },
  );

  test(
    "Given a far side that answers put with success and stores nothing, When " +
      "pushed, Then integrity-mismatch (every file missing) and the run stays queued",
    async () => {
      const { scope, runs } = await scopeWithRuns(1);
      await enqueueSealedRun(scope, runs[0]!.handle);
      const { share, mounted } = makeShare();
      const real = dirTransport(share, { allowSameFilesystem: !mounted });
      const dropping: EvidenceTransport = { ...real, put: async () => undefined };
      await assert.rejects(pushEvidence(scope, { to: dropping }), (error: unknown) => {
        assert.ok(error instanceof OatsError && error.code === "integrity-mismatch");
        assert.deepEqual(error.details["differences"], [
          "record.json: missing",
          "log: missing",
          "audit.jsonl: missing",
        ]);
        return true;
      });
      assert.deepEqual(listOutbox(scope)[0]!.delivered, []);
    },
  );

  test(
    "Given a far side that adds a file to the run, When pushed, Then " + "integrity-mismatch (unexpected file)",
    async () => {
      const { scope, runs } = await scopeWithRuns(1);
      await enqueueSealedRun(scope, runs[0]!.handle);
      const { share, mounted } = makeShare();
      const real = dirTransport(share, { allowSameFilesystem: !mounted });
      const adding: EvidenceTransport = {
        ...real,
        put: async (bundle) => (
          await real.put(bundle), writeFileSync(join(share, "runs", hex(bundle.runId), "extra"), "x")
        ),
      };
      await assert.rejects(
        pushEvidence(scope, { to: adding }),
        (error: unknown) =>
          error instanceof OatsError && (error.details["differences"] as string[]).includes("extra: unexpected"),
      );
    },
  );
});

describe("a push killed between put and mark", () => {
  test(
    "Given a pusher SIGKILLed after the share took the second run and before " +
      "it was marked, When pushed again, Then every run is on the share " +
      "exactly once, all marked, none lost or duplicated",
    async () => {
      const { scope, runs } = await scopeWithRuns(3);
      for (const run of runs) await enqueueSealedRun(scope, run.handle);
      const { share } = makeShare();
      const child = spawn(
        process.execPath,
        ["--import", "tsx", join(REPO, "test/support/push-child.ts"), scope, share, "2"],
        { cwd: REPO, stdio: ["ignore", "pipe", "pipe"] },
      );
      let out = "";
      let err = "";
      child.stderr.on("data", (chunk) => (err += chunk));
      await new Promise<void>((resolve, reject) => {
        child.stdout.on("data", (chunk) => {
          out += chunk;
          if (out.includes("PUT 2\n")) resolve();
        });
        child.on("exit", () => reject(new Error(`child ended before the hold point: ${out} ${err}`)));
      });
      const exited = new Promise((resolve) => child.on("exit", (_code, signal) => resolve(signal)));
      child.kill("SIGKILL");
      assert.equal(await exited, "SIGKILL");
      assert.deepEqual(
        listOutbox(scope).map((entry) => entry.delivered.length),
        [1, 0, 0],
        "the second run was put but never marked",
      );

      const resumed = await pushEvidence(scope, { to: dirTransport(share, { allowSameFilesystem: true }) });
      assert.deepEqual(
        resumed.delivered.map((entry) => entry.seq),
        [2, 3],
      );
      assert.equal(resumed.alreadyDelivered, 1);
      assert.deepEqual(
        readdirSync(join(share, "runs")).sort(),
        runs.map((run) => hex(run.runId)).sort(),
        "each run exactly once, no staging left",
      );
      for (const run of runs) assert.ok((await readDelivered(`dir:${share}`, run.runId))?.get("log")?.equals(run.log));
      assert.deepEqual(
        listOutbox(scope).map((entry) => entry.delivered.length),
        [1, 1, 1],
      );
    },
  );
});

describe("two pushers at once", () => {
  test(
    "Given two processes pushing the same outbox to the same share at once, " +
      "Then every run is delivered by exactly one of them, in order, and the " +
      "share holds each once",
    async () => {
      const { scope, runs } = await scopeWithRuns(4);
      for (const run of runs) await enqueueSealedRun(scope, run.handle);
      const { share } = makeShare();
      const go = join(tempDir("oats-go-"), "go");
      let ready = 0;
      const pusher = () =>
        new Promise<number[]>((resolve, reject) => {
          const child = spawn(
            process.execPath,
            ["--import", "tsx", join(REPO, "test/support/push-child.ts"), scope, share, "0", go, "150"],
            { cwd: REPO, stdio: ["ignore", "pipe", "pipe"] },
          );
          let out = "";
          let err = "";
          child.stdout.on("data", (chunk) => {
            out += chunk;
            if (String(chunk).includes("READY") && ++ready === 2) writeFileSync(go, "");
          });
          child.stderr.on("data", (chunk) => (err += chunk));
          child.on("exit", (code) => {
            const done = /DONE (\[.*\])/.exec(out);
            if (code === 0 && done) resolve(JSON.parse(done[1]!));
            else reject(new Error(`pusher failed (${code}): ${out} ${err}`));
          });
        });
      const [a, b] = await Promise.all([pusher(), pusher()]);
      assert.deepEqual([...a, ...b].sort(), [1, 2, 3, 4], `each run delivered once: ${JSON.stringify([a, b])}`);
      for (const part of [a, b]) assert.deepEqual(part, [...part].sort(), "each pusher went in order");
      assert.deepEqual(readdirSync(join(share, "runs")).sort(), runs.map((run) => hex(run.runId)).sort());
      assert.deepEqual(
        listOutbox(scope).map((entry) => entry.delivered.length),
        [1, 1, 1, 1],
      );
    },
  );
});
