import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, mkdirSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import {
  DIST,
  MiB,
  WORK,
  addRow,
  dataset,
  fmtMs,
  interleave,
  log,
  median,
  missingRow,
  removeTree,
  retainTree,
  run,
  settle,
  timeRow,
  warm,
  writeResolution,
} from "../lib.mjs";
import { haveTool } from "../tools.mjs";

// ---------------------------------------------------------------- 15. fleet: push and pull through a loopback registry

const fleet = await import(join(DIST, "fleet", "index.js")).catch(() => null);

export function registryBinary() {
  for (const name of ["docker-registry", "registry"]) {
    const found = spawnSync("sh", ["-c", 'command -v "$1"', "sh", name], { encoding: "utf8" });
    if (found.status === 0 && found.stdout.trim()) return found.stdout.trim();
  }
  return null;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** docker-registry on 127.0.0.1 with its storage under the bench's work dir; resolves once it listens. */
export async function startRegistry(binary, dir) {
  const root = join(dir, "storage");
  mkdirSync(root, { recursive: true });
  const port = await freePort();
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log:",
      "  level: error",
      "  accesslog:",
      "    disabled: true",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${root}`,
      "http:",
      `  addr: 127.0.0.1:${port}`,
      "",
    ].join("\n"),
  );
  const child = spawn(binary, ["serve", config], { stdio: "ignore" });
  for (let i = 0; i < 300; i++) {
    const up = await fetch(`http://127.0.0.1:${port}/v2/`).then(
      (response) => response.ok,
      () => false,
    );
    if (up) return { port, root, child, base: `127.0.0.1:${port}` };
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  child.kill("SIGKILL");
  throw new Error("docker-registry did not start");
}

function blobData(root, digest) {
  const hex = digest.slice("sha256:".length);
  return join(root, "docker/registry/v2/blobs/sha256", hex.slice(0, 2), hex, "data");
}

/** The one-blob baseline: POST an upload session, then curl PUTs the whole file as the blob. */
async function curlUpload(base, repository, file, digest) {
  const started = await fetch(`http://${base}/v2/${repository}/blobs/uploads/`, { method: "POST" });
  if (started.status !== 202) throw new Error(`upload session: HTTP ${started.status}`);
  const location = new URL(started.headers.get("location"), `http://${base}`);
  location.searchParams.set("digest", digest);
  // -T streams the file (--data-binary @file would read it all into memory first).
  const put = await run(
    "curl",
    ["-sS", "-f", "-o", "/dev/null", "-H", "Content-Type: application/octet-stream", "-T", file, location.href],
    { capture: false },
  );
  return put;
}

/**
 * Push and pull of 1 GiB of retained trees (the big data set, 8 x 128 MiB,
 * and the small one, 20,000 files) as one resolution, to a loopback
 * registry started here. Pull (manifest, blobs streamed with their OCI
 * digests checked, safe extraction into staging, every oats digest, durable
 * publication) against `tar xf` of the same layer files plus `sha256sum` of
 * them; push (layer tars hashed from the trees, HEADs, the tars generated again into the uploads,
 * manifest) against one `curl` upload of the same bytes as one blob; and a
 * second push of the same resolution (nothing to upload).
 */
async function benchFleet() {
  console.error("\n[15] fleet: push and pull of 1 GiB of retained trees through a loopback docker-registry");
  // Installed as the other rows' tools are (apt-get, as root) when neither name is on the path.
  const binary = registryBinary() ?? (haveTool("docker-registry", "docker-registry", "15") ? registryBinary() : null);
  if (!fleet || typeof fleet.pushToRegistry !== "function") {
    missingRow("15a", "fleet push/pull", "-", "the fleet library is not built");
    return;
  }
  if (!binary) {
    missingRow("15a", "fleet push/pull", "-", "docker-registry is not installed (apt-get install -y docker-registry)");
    return;
  }
  const work = join(WORK, "fleet");
  removeTree(work);
  mkdirSync(work, { recursive: true });
  const registry = await startRegistry(binary, join(work, "registry"));
  try {
    const scope = join(work, "scope");
    mkdirSync(scope);
    const big = await retainTree(scope, { kind: "capability", key: "bench.big", source: dataset("big") });
    const small = await retainTree(scope, { kind: "capability", key: "bench.small", source: dataset("small") });
    const refs = [big, small].map((receipt) => ({
      kind: "capability",
      key: receipt.key,
      integrity: { format: receipt.execIntegrity.format, value: receipt.execIntegrity.value },
    }));
    const record = {
      schemaVersion: 1,
      kind: "instance",
      status: "complete",
      subject: { instance: "bench-fleet" },
      source: null,
      artifacts: Object.fromEntries(
        refs.map((ref) => [
          ref.key,
          {
            artifact: ref,
            package: { id: ref.key, source: `path:/bench/${ref.key}`, version: "1.0.0", commit: null, integrity: null },
            legacyIntegrity: null,
          },
        ]),
      ),
      config: {},
      bindings: {},
      messaging: null,
      entrypoints: { run: { artifact: refs[0], path: "blob-0.bin", args: [], role: "command" } },
      capture: null,
      evidence: [],
      unresolved: [],
    };
    const { id } = writeResolution(scope, record);
    warm(big.dir);
    warm(small.dir);

    // Push: each round to a fresh repository, which lacks every blob.
    const pushSides = [
      {
        name: "oats",
        inProcess: true,
        prepare: settle,
        run: async (round) =>
          void (await fleet.pushToRegistry(scope, [id], `http://${registry.base}/bench/push-${round + 2}`)),
      },
    ];
    // The curl side needs the layers' bytes as one file: made once from the blobs the registry now holds.
    const first = await fleet.pushToRegistry(scope, [id], `http://${registry.base}/bench/first`);
    const layers = first.blobs.filter((blob) => blob.what.startsWith("capability"));
    const bytes = layers.reduce((sum, blob) => sum + blob.size, 0);
    const joined = join(work, "layers.bin");
    {
      const out = createWriteStream(joined);
      for (const layer of layers)
        await pipeline(createReadStream(blobData(registry.root, layer.digest)), out, { end: false });
      out.end();
      await new Promise((resolve) => out.on("finish", resolve));
    }
    const hash = createHash("sha256");
    await pipeline(createReadStream(joined), hash);
    const oneBlob = `sha256:${hash.digest("hex")}`;
    if (statSync(joined).size !== bytes) throw new Error("the joined layers are not the layers' size");
    pushSides.push({
      name: "curl",
      prepare: settle,
      run: (round) => curlUpload(registry.base, `bench/curl-${round + 2}`, joined, oneBlob),
    });
    const pushed = await interleave(pushSides, 3);
    timeRow({
      id: "15a",
      what:
        `push of a resolution with 1 GiB of retained trees (${layers.length} ` +
        `layers, ${(bytes / MiB).toFixed(0)} MiB) vs curl upload of the same ` +
        `bytes as one blob`,
      oursMs: median(pushed.oats),
      baseMs: median(pushed.curl),
      goal: 1.5,
      bytes,
    });

    // A second push of the same resolution: nothing to upload.
    const again = [];
    for (let i = 0; i < 5; i++) {
      const started = performance.now();
      const report = await fleet.pushToRegistry(scope, [id], `http://${registry.base}/bench/first`);
      again.push(performance.now() - started);
      if (report.uploadedBytes !== 0) throw new Error("the second push uploaded bytes");
    }
    const againMs = median(again);
    addRow({
      id: "15b",
      what: "second push of the same resolution (registry has it all; nothing uploaded)",
      headline: true,
      ours: fmtMs(againMs),
      baseline: "-",
      ratio: "-",
      goal: "< 1 s",
      pass: againMs < 1000,
    });

    // Pull into a fresh scope each round, vs tar xf of the same layer files plus sha256sum of them.
    const targets = join(work, "targets");
    mkdirSync(targets);
    const layerFiles = layers.map((layer) => blobData(registry.root, layer.digest));
    const pullSides = [
      {
        name: "oats",
        inProcess: true,
        prepare: async (round) => {
          mkdirSync(join(targets, `scope-${round + 2}`));
          await settle();
        },
        run: async (round) => {
          const report = await fleet.pullFromRegistry(
            join(targets, `scope-${round + 2}`),
            `http://${registry.base}/bench/first:oats-json-v1-${id.slice(7)}`,
          );
          if (report.resolutions[0]?.id !== id) throw new Error("the pull did not bring the record");
        },
        cleanup: (round) => removeTree(join(targets, `scope-${round + 2}`)),
      },
      {
        name: "tar",
        prepare: async (round) => {
          for (let i = 0; i < layerFiles.length; i++)
            mkdirSync(join(targets, `tar-${round + 2}`, `l${i}`), { recursive: true });
          await settle();
        },
        run: async (round) => {
          for (let i = 0; i < layerFiles.length; i++)
            await run("tar", ["-C", join(targets, `tar-${round + 2}`, `l${i}`), "-xf", layerFiles[i]], {
              capture: false,
            });
          await run("sha256sum", layerFiles, { capture: false });
        },
        cleanup: (round) => removeTree(join(targets, `tar-${round + 2}`)),
      },
    ];
    const pulled = await interleave(pullSides, 3);
    timeRow({
      id: "15c",
      what:
        "pull of the same resolution (stream, OCI digests, safe extraction, oats " +
        "digests, durable publication) vs tar xf + sha256sum of the layers",
      oursMs: median(pulled.oats),
      baseMs: median(pulled.tar),
      goal: 2,
      bytes,
    });
    log(`pull ${fmtMs(median(pulled.oats))}, baseline ${fmtMs(median(pulled.tar))}`);
  } finally {
    registry.child.kill("SIGTERM");
    await new Promise((resolve) => registry.child.once("exit", resolve));
    removeTree(work);
  }
}

export const parts = { fleet: benchFleet };
