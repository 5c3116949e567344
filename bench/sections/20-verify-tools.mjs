import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { CLI, WORK, dataset, interleave, log, median, missingRow, notes, retainTree, timeRow, warm } from "../lib.mjs";
import {
  coldPossible,
  describeNodeModules,
  dropCaches,
  extraCaCerts,
  haveTool,
  nixEnv,
  nodeModulesTree,
  removeReadOnly,
  runEnv,
} from "../tools.mjs";

// ---------------------------------------------------------------- 20. verify vs nix-store --verify-path

const RUNS = 3;
/**
 * Cold runs read from a disk other machines share: in one run the two tools'
 * cold times overlapped over most of their range (oats 1.21-1.61 s, nix
 * 0.97-2.03 s), so a median of three moved with a single slow read. Five per
 * side, still interleaved, steady that median without favouring either side.
 */
const COLD_RUNS = 5;

/**
 * `oats verify` (the CLI, process start included) of a retained revision
 * against `nix-store --verify-path` of the same tree added to a chroot nix
 * store (`nix-store --add-fixed --recursive sha256`, NIX_REMOTE=local?root=,
 * no daemon). Cold rows drop the page cache before every run of either side
 * (node, nix-store and their libraries are then read from disk too); warm
 * rows read every file once first. When the bench's caller set
 * NODE_EXTRA_CA_CERTS, a third cold side runs the same CLI without it, in the
 * same rounds: rows 20ax-20cx (info), what the certificates node parses at
 * its start cost the cold verify. The goal rows keep the caller's environment.
 */
async function benchVerifyTools() {
  console.error("\n[20] verify vs nix-store --verify-path, cold and warm page cache");
  const nodeModules = nodeModulesTree();
  const workloads = [
    { id: "a", label: "8 x 128 MiB", dir: dataset("big") },
    { id: "b", label: "20k small files", dir: dataset("small") },
    { id: "c", label: describeNodeModules(nodeModules), dir: nodeModules.dir },
  ];
  const hasNix = haveTool("nix-store", "nix-bin", "20");
  const cold = coldPossible("20");
  const scope = join(WORK, "tools-verify-scope");
  const nixRoot = join(WORK, "tools-nix");
  removeReadOnly(scope);
  removeReadOnly(nixRoot);
  mkdirSync(scope, { recursive: true });
  for (const workload of workloads) {
    const key = `tools-${workload.id}`;
    const receipt = await retainTree(scope, { kind: "capture", key, source: workload.dir });
    const integrity = `${receipt.integrity.format}:${receipt.integrity.value}`;
    const verifyArgs = [CLI, "--scope", scope, "--quiet", "verify", "--kind", "capture", "--integrity", integrity, key];
    const oats = { name: "oats verify", run: () => runEnv(process.execPath, verifyArgs) };
    const oatsWithoutCerts = {
      name: "oats verify, no NODE_EXTRA_CA_CERTS",
      run: () => runEnv(process.execPath, verifyArgs, { unset: ["NODE_EXTRA_CA_CERTS"] }),
    };
    let nix = null;
    if (hasNix) {
      const added = await runEnv("nix-store", ["--add-fixed", "--recursive", "sha256", workload.dir], {
        env: nixEnv(nixRoot),
        capture: true,
      });
      const storePath = added.stdout.trim().split("\n").at(-1);
      log(`nix-store --add-fixed: ${storePath}`);
      nix = {
        name: "nix-store --verify-path",
        run: () => runEnv("nix-store", ["--verify-path", storePath], { env: nixEnv(nixRoot) }),
      };
    }
    const sides = nix ? [oats, nix] : [oats];
    const coldSides = (extraCaCerts ? [...sides, oatsWithoutCerts] : sides).map((side) => ({
      ...side,
      prepare: () => void dropCaches(),
    }));
    const what = (temperature) =>
      `verify ${workload.label}, ${temperature}: \`oats verify\` vs \`nix-store --verify-path\``;
    const coldTimes = await interleave(coldSides, COLD_RUNS);
    if (nix)
      timeRow({
        id: `20${workload.id}`,
        what: what(cold ? "COLD cache" : "cache NOT dropped"),
        oursMs: median(coldTimes[oats.name]),
        baseMs: median(coldTimes[nix.name]),
        goal: 1.0,
        baseExtra: " nix",
      });
    else missingRow(`20${workload.id}`, what("COLD cache"), "<= 1.0x", "nix-store not available");
    if (nix && extraCaCerts) {
      timeRow({
        id: `20${workload.id}x`,
        what: `same, COLD, \`oats verify\` without the caller's NODE_EXTRA_CA_CERTS (info)`,
        oursMs: median(coldTimes[oatsWithoutCerts.name]),
        baseMs: median(coldTimes[nix.name]),
        goal: null,
        headline: false,
        baseExtra: " nix",
      });
    }
    warm(workload.dir);
    warm(receipt.dir);
    const warmTimes = await interleave(sides, RUNS);
    if (nix)
      timeRow({
        id: `20${workload.id}w`,
        what: `${what("warm")} (info)`,
        oursMs: median(warmTimes[oats.name]),
        baseMs: median(warmTimes[nix.name]),
        goal: null,
        headline: false,
        baseExtra: " nix",
      });
  }
  if (!cold) notes.push("[20] the cold rows are not cold: the page cache could not be dropped");
  removeReadOnly(scope);
  removeReadOnly(nixRoot);
}

export const parts = { "verify-tools": benchVerifyTools };
