/**
 * importBundle publishes a tree it verified on this thread without reading it
 * back (adoptVerifiedTree): the verification read of the private extraction
 * directory also builds the revision's manifest. These tests pin what that
 * rests on: the extraction directory is closed to every other user until
 * the move, the tree moved is the very directory that was read, and the
 * manifest is the one a plain retain writes.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterEach, describe, test } from "node:test";
import { exportBundle, importBundle } from "../src/acquisition/bundle.js";
import { retainTree, verifyTree, type ArtifactReceipt } from "../src/retention/index.js";
import { setFaultHook, type PublishStep } from "../src/retention/store/faults.js";
import { manifestPath } from "../src/retention/store/manifest.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

const NOBODY = 65534;

afterEach(() => setFaultHook(null));

/** A tree with a nested file, an executable and a relative symlink. */
function sourceTree(): string {
  const dir = join(tempDir("oats-imp-tree-"), "tree");
  mkdirSync(join(dir, "bin"), { recursive: true });
  mkdirSync(join(dir, "share/doc"), { recursive: true });
  writeFileSync(join(dir, "bin/run"), "#!/bin/sh\necho run\n");
  chmodSync(join(dir, "bin/run"), 0o755);
  writeFileSync(join(dir, "share/doc/README"), "the tool\n");
  for (let index = 0; index < 40; index += 1) writeFileSync(join(dir, `share/f-${index}`), `file ${index}\n`);
  symlinkSync("../bin/run", join(dir, "share/run"));
  return dir;
}

/** A one-tree bundle (one tree: verified on this thread, so adopted as verified) and the source receipt. */
async function oneTreeBundle(): Promise<{ receipt: ArtifactReceipt; bundle: string }> {
  const scope = tempDir("oats-imp-src-");
  const receipt = await retainTree(scope, { kind: "capture", key: "tool", source: sourceTree() });
  const bundle = join(tempDir("oats-imp-out-"), "bundle.tar");
  await exportBundle(
    scope,
    [{ kind: "capture", key: "tool", integrity: `${receipt.integrity.format}:${receipt.integrity.value}` }],
    bundle,
  );
  return { receipt, bundle };
}

/** A target scope another user can reach up to `.agents/extract`, holding something already. */
async function reachableScope(): Promise<string> {
  const scope = tempDir("oats-imp-dst-");
  chmodSync(scope, 0o755);
  await retainTree(scope, { kind: "capture", key: "unrelated", source: sourceTree() });
  return scope;
}

/** The extracted tree inside the extraction directory: .staging-X/artifacts/capture/tool/hex. */
function extractedTree(scope: string): { staging: string; tree: string } {
  const root = join(scope, ".agents/extract");
  const staging = readdirSync(root)
    .filter((name) => name.startsWith(".staging-"))
    .map((name) => join(root, name));
  assert.equal(staging.length, 1, "one extraction directory");
  const parent = join(staging[0]!, "artifacts/capture/tool");
  const trees = readdirSync(parent);
  assert.equal(trees.length, 1);
  return { staging: staging[0]!, tree: join(parent, trees[0]!) };
}

function hook(at: PublishStep, act: (detail: string) => void): PublishStep[] {
  const seen: PublishStep[] = [];
  setFaultHook((step, detail) => {
    seen.push(step);
    if (step === at) act(detail);
  });
  return seen;
}

/** Run `script` as nobody; each line of its output is `<what> <errno code or "ok">`. */
function asNobody(script: string, args: string[]): Map<string, string> {
  const run = spawnSync(process.execPath, ["-e", script, ...args], { uid: NOBODY, gid: NOBODY, encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  return new Map(
    run.stdout
      .trim()
      .split("\n")
      .map((line) => line.split(" ") as [string, string]),
  );
}

const ATTACK = `
const fs = require("fs");
const [staging, tree] = process.argv.slice(1);
const attempt = (what, fn) => {
  try { fn(); console.log(what + " ok"); } catch (e) { console.log(what + " " + e.code); }
};
attempt("write-file", () => fs.writeFileSync(tree + "/share/doc/README", "evil\\n"));
attempt("add-file", () => fs.writeFileSync(tree + "/evil", "evil\\n"));
attempt("swap-tree", () => fs.renameSync(staging + "/artifacts", staging + "/gone"));
attempt("swap-staging", () => fs.renameSync(staging, staging + "-gone"));
`;

describe("import adopts the tree it verified without reading it back", () => {
  test(
    "Given a one-tree bundle When it is imported Then the tree is moved, " +
      "made durable and renamed with no read-back, and its manifest is byte " +
      "for byte the one a plain retain writes",
    async () => {
      const { receipt, bundle } = await oneTreeBundle();
      const target = tempDir("oats-imp-dst-");
      const steps = hook("rename", () => {});
      const report = await importBundle(target, bundle);
      setFaultHook(null);
      assert.deepEqual(
        report.artifacts.map((row) => [row.key, row.status]),
        [["tool", "retained"]],
      );
      // Each file is linked into the shared layer, and the sealed tree made durable again; still no read-back.
      assert.deepEqual(
        steps.filter((step) => step !== "link"),
        ["adopt", "fsync", "fsync", "rename"],
        "no verify-staged: the verification read is the only read",
      );
      const imported = await verifyTree(target, { kind: "capture", key: "tool", integrity: receipt.integrity });
      assert.ok(
        readFileSync(manifestPath(imported.dir)).equals(readFileSync(manifestPath(receipt.dir))),
        "the manifest built by the verification read",
      );
      assert.equal(existsSync(join(target, ".agents/extract")), false);
    },
  );

  test(
    "Given the extracted tree replaced by an identical copy between " +
      "verification and the move When the bundle is imported Then " +
      "integrity-mismatch (adopted-tree-replaced) and the store is as it was",
    async () => {
      const { bundle } = await oneTreeBundle();
      const target = await reachableScope();
      const before = snapshotTree(target);
      hook("adopt", () => {
        const { tree } = extractedTree(target);
        renameSync(tree, `${tree}.verified`);
        cpSync(`${tree}.verified`, tree, { recursive: true, verbatimSymlinks: true });
      });
      await assert.rejects(importBundle(target, bundle), refusal("integrity-mismatch", "adopted-tree-replaced"));
      setFaultHook(null);
      assert.deepEqual(snapshotTree(target), before, "nothing published, no staging left");
    },
  );

  test(
    "Given another local user (nobody) When the import stands between " +
      "verification and the move, and again once the tree is in the store's " +
      "staging Then every write, addition and swap is refused and the import " +
      "publishes the verified tree",
    async (t) => {
      if (process.getuid?.() !== 0) return t.skip("not root: cannot run the attacker as nobody");
      const { receipt, bundle } = await oneTreeBundle();
      const target = await reachableScope();
      const outcomes: Map<string, string>[] = [];
      setFaultHook((step, detail) => {
        if (step === "adopt") {
          const { staging, tree } = extractedTree(target);
          outcomes.push(asNobody(ATTACK, [staging, tree]));
        }
        // After the move and the mode masking: the tree is in the store staging directory, reachable by path.
        // (The first fsync: the second makes the sealed tree durable again.)
        if (step === "fsync" && outcomes.length === 1) outcomes.push(asNobody(ATTACK, [join(detail, ".."), detail]));
      });
      const report = await importBundle(target, bundle);
      setFaultHook(null);
      assert.equal(outcomes.length, 2, "both attacks ran");
      for (const outcome of outcomes) {
        assert.equal(outcome.get("write-file"), "EACCES");
        assert.equal(outcome.get("add-file"), "EACCES");
      }
      assert.equal(outcomes[0]!.get("swap-tree"), "EACCES", "the extraction directory is closed (0700)");
      assert.equal(report.artifacts[0]!.status, "retained");
      const imported = await verifyTree(target, { kind: "capture", key: "tool", integrity: receipt.integrity });
      assert.equal(readFileSync(join(imported.dir, "share/doc/README"), "utf8"), "the tool\n");
    },
  );
});
