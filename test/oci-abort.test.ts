/**
 * Ending a registry exchange at once (an AbortSignal through the OCI
 * client, src/oci/): a layer the extractor refuses ends its request then and
 * there, Ctrl-C ends a request the registry never answers, and a blob whose
 * bytes are not the manifest's digest is `integrity-mismatch` even when the
 * tar parser fails on them first. Against a real docker-registry; Ctrl-C
 * goes to a real CLI process (dist/cli/bin.js; `npm run build` first), timed.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import net from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { pullFromRegistry } from "../src/fleet/pull.js";
import {
  EMPTY_CONFIG,
  OCI_MANIFEST_MEDIA_TYPE,
  encodeManifest,
  ociDigest,
  treesManifest,
} from "../src/fleet/mapping.js";
import { openRegistry } from "../src/fleet/target.js";
import { getBlob } from "../src/oci/blobs.js";
import { putManifest } from "../src/oci/manifests.js";
import { pause } from "../src/oci/retry.js";
import { bufferSource, putBlob } from "../src/oci/upload.js";
import { REPO, snapshotTree, tempDir } from "./helpers.js";
import { tarBytes, type RawEntry } from "./support/raw-tar.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";

let registry: Registry | null = null;
const skip = registryBinary() === null ? NO_REGISTRY : false;
before(async () => {
  if (!skip) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
});

const INTEGRITY = `oats.tree-exec.v1:sha256-${"a".repeat(64)}`;

/** A trees manifest with one layer of exactly `bytes`; returns the pull reference and the layer's digest. */
async function oneLayer(repository: string, bytes: Buffer): Promise<{ reference: string; digest: string }> {
  const reference = registry!.ref(repository, ":crafted");
  const { session } = openRegistry(reference);
  await putBlob(session, bufferSource(EMPTY_CONFIG, ociDigest(EMPTY_CONFIG)));
  await putBlob(session, bufferSource(bytes, ociDigest(bytes)));
  const manifest = treesManifest([
    { kind: "capture", key: "evil", integrity: INTEGRITY, digest: ociDigest(bytes), size: bytes.length },
  ]);
  await putManifest(session, "crafted", encodeManifest(manifest).bytes, OCI_MANIFEST_MEDIA_TYPE);
  return { reference, digest: ociDigest(bytes) };
}

function emptyScope(): string {
  const scope = join(tempDir("oats-oci-abort-"), "scope");
  mkdirSync(scope);
  return scope;
}

/** Sockets to the registry still held by a request (a pooled idle socket has none). */
function inFlight(port: number): number {
  const handles = (process as unknown as { _getActiveHandles(): unknown[] })._getActiveHandles();
  return handles.filter(
    (handle) =>
      handle instanceof net.Socket &&
      !handle.destroyed &&
      handle.remotePort === port &&
      (handle as unknown as { _httpMessage: unknown })._httpMessage,
  ).length;
}

interface Timed {
  status: number | null;
  stdout: string;
  stderr: string;
  /** From the interrupt (or the start) to the exit. */
  ms: number;
}

/** `oats --json <args>` as a child process; `interruptWhen` resolves when to send it SIGINT. */
function timedOats(args: string[], interruptWhen: Promise<void>): Promise<Timed> {
  let started = Date.now();
  const child = spawn(process.execPath, [join(REPO, "dist/cli/bin.js"), "--json", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  void interruptWhen.then(() => {
    started = Date.now();
    child.kill("SIGINT");
  });
  // Far past the bound the test asserts, so a process that hangs is still reaped.
  const reaper = setTimeout(() => child.kill("SIGKILL"), 90_000);
  return new Promise((resolve) => {
    child.on("close", (status) => {
      clearTimeout(reaper);
      resolve({ status, stdout, stderr, ms: Date.now() - started });
    });
  });
}

describe("aborting registry exchanges", { skip }, () => {
  test(
    "Given a tree layer whose first entry climbs out, followed by 48 MiB, When the pull refuses it, Then its " +
      "request is ended at once: no connection to the registry is left half-read until the 60 s idle timeout",
    async () => {
      const entries: RawEntry[] = [
        { name: "../escaped-by-fleet", body: "owned\n" },
        { name: "filler", body: randomBytes(48 << 20) },
      ];
      const { reference } = await oneLayer("abort/refused", tarBytes(entries));
      await assert.rejects(
        pullFromRegistry(emptyScope(), reference),
        (error: unknown) => error instanceof OatsError && error.code === "artifact-not-contained",
      );
      const deadline = Date.now() + 5_000;
      while (inFlight(registry!.port) > 0 && Date.now() < deadline) await pause(50);
      assert.equal(inFlight(registry!.port), 0, "a request to the registry is still open after the refusal");
    },
  );

  test(
    "Given a registry that accepts the connection and never answers, When `oats pull` gets Ctrl-C, Then it " +
      "exits 130 (interrupted) at once",
    async () => {
      const sockets = new Set<net.Socket>();
      let asked!: () => void;
      // The request is in flight (the pull is past its start-up and waits on the registry): then Ctrl-C.
      const inFlightNow = new Promise<void>((resolve) => (asked = resolve));
      const server = net.createServer((socket) => {
        sockets.add(socket);
        socket.on("error", () => undefined);
        socket.once("data", () => setTimeout(asked, 200));
      });
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      const port = (server.address() as net.AddressInfo).port;
      try {
        const reference = `http://127.0.0.1:${port}/stuck/repo:tag`;
        const ran = await timedOats(["--scope", emptyScope(), "pull", reference], inFlightNow);
        assert.equal(ran.status, 130, ran.stdout + ran.stderr);
        assert.equal(JSON.parse(ran.stdout).error.details.reason, "interrupted");
        assert.ok(ran.ms < 10_000, `the pull took ${ran.ms} ms to stop after Ctrl-C`);
      } finally {
        for (const socket of sockets) socket.destroy();
        await new Promise((resolve) => server.close(resolve));
      }
    },
  );

  test(
    "Given a tree layer whose stored bytes the registry replaced with others of the same size, When pulled, " +
      "Then integrity-mismatch naming the parser's refusal (details.extractor), never corrupt-archive; " +
      "nothing is published",
    async () => {
      const bytes = tarBytes([
        { name: "./", type: "5" },
        { name: "run", body: "#!/bin/sh\n", mode: 0o755 },
      ]);
      const { reference, digest } = await oneLayer("abort/served-other", bytes);
      const garbage = Buffer.alloc(bytes.length, 0x41);
      writeFileSync(registry!.blobPath(digest), garbage);
      assert.deepEqual(readFileSync(registry!.blobPath(digest)), garbage);
      const scope = emptyScope();
      const before = snapshotTree(scope);
      let caught: unknown;
      await pullFromRegistry(scope, reference).catch((error: unknown) => (caught = error));
      assert.ok(caught instanceof OatsError, String(caught));
      assert.equal(caught.code, "integrity-mismatch", caught.message);
      assert.equal(caught.details["expected"], digest);
      assert.equal((caught.details["extractor"] as { reason: string }).reason, "corrupt-archive");
      assert.deepEqual(snapshotTree(scope), before);
    },
  );

  test(
    "Given a tree layer that is not a tar but is exactly the bytes pushed, When pulled, Then the parser's " +
      "refusal stands (invalid-input, corrupt-archive)",
    async () => {
      const { reference } = await oneLayer("abort/not-a-tar", Buffer.alloc(4096, 0x41));
      const scope = emptyScope();
      await assert.rejects(pullFromRegistry(scope, reference), (error: unknown) => {
        assert.ok(error instanceof OatsError, String(error));
        assert.equal(error.code, "invalid-input", error.message);
        assert.equal(error.details["reason"], "corrupt-archive");
        return true;
      });
    },
  );

  test(
    "Given a blob being read and a retry's wait, When their signal is aborted, Then each fails at once with " +
      "the signal's reason",
    async () => {
      const bytes = randomBytes(32 << 20);
      await oneLayer("abort/stream", bytes);
      const { session } = openRegistry(registry!.ref("abort/stream", ":crafted"));
      const stop = new AbortController();
      const stream = await getBlob(session, ociDigest(bytes), { size: bytes.length, signal: stop.signal });
      const why = new OatsError("invalid-artifact", "the consumer refused it", { reason: "test" });
      stream.once("data", () => stop.abort(why));
      const started = Date.now();
      await assert.rejects(
        (async () => {
          for await (const chunk of stream) void chunk;
        })(),
        (error: unknown) => error === why,
      );
      assert.ok(Date.now() - started < 5_000);
      const waiting = new AbortController();
      const paused = pause(60_000, waiting.signal);
      waiting.abort();
      await assert.rejects(
        paused,
        (error: unknown) => error instanceof OatsError && error.details["reason"] === "interrupted",
      );
    },
  );
});
