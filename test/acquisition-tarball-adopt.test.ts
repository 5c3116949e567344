/**
 * retainTarball adopts the extracted tree as the revision's staging instead
 * of copying it (publishAdopted in src/retention/store/publish.ts). These
 * tests pin what that path must still guarantee: the tree is compared with
 * the lock row or `expect` after it is durable and read back, provenance is
 * checked on the staged tree, a present revision is reused only after the
 * tree hashes to it, a concurrent winner is reported kept, a failure at any
 * step (move, durability, verify, rename) publishes nothing and leaves no
 * staging and no store directory the call created, and a move that cannot
 * cross filesystems falls back to the copy.
 */
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, test } from "node:test";
import { c as tarCreate } from "tar";
import { retainTarball, type RetainTarballRequest } from "../src/acquisition/index.js";
import { TREE_EXEC, TREE_LEGACY, digestTree, verifyTree } from "../src/retention/index.js";
import { setFaultHook, type PublishStep } from "../src/retention/store/faults.js";
import { FIXTURES, snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";
import type { JsonValue } from "../src/core/index.js";

const PACKAGES = join(FIXTURES, "packages");
const payloadOf = (name: string) => join(PACKAGES, name, "payload");

type LockObject = {
  lockfileVersion: number;
  packages: Record<string, Record<string, JsonValue>>;
  capabilities: Record<string, Record<string, JsonValue>>;
};
const lockOf = (name: string) => JSON.parse(readFileSync(join(PACKAGES, name, "oats-lock.json"), "utf8")) as LockObject;

/** A package tarball of `payload` (entries under package/, symlinks kept). */
async function tarPack(payload: string): Promise<string> {
  const file = join(tempDir("oats-adopt-tgz-"), "package.tgz");
  await tarCreate({ gzip: true, cwd: payload, prefix: "package/", file, portable: true }, readdirSync(payload).sort());
  return file;
}

/** A copy of a fixture payload that a test may change. */
function payloadCopy(name: string): string {
  const dir = join(tempDir("oats-adopt-src-"), "payload");
  cpSync(payloadOf(name), dir, { recursive: true, verbatimSymlinks: true });
  return dir;
}

/** A tree of `count` small files in 4 directories, one of them executable: more than PER_FILE_FSYNC_LIMIT takes the
 * syncfs branch. */
function manyFiles(count: number): string {
  const dir = join(tempDir("oats-adopt-many-"), "payload");
  for (let d = 0; d < 4; d++) mkdirSync(join(dir, `d${d}`), { recursive: true });
  for (let i = 0; i < count; i++)
    writeFileSync(join(dir, `d${i % 4}`, `f${i}.txt`), `file ${i}\n`, { mode: i === 0 ? 0o755 : 0o644 });
  return dir;
}

/** Staging, locks or extraction directories anywhere in the scope. */
function leftovers(scope: string): string[] {
  return snapshotTree(scope)
    .map((row) => row.split(" ")[1] ?? "")
    .filter((path) => /(^|\/)\.(staging|lock)-/.test(path) || path.startsWith(".agents/extract"));
}

/** Record which publication steps a call passes through; optionally fail or act at one. */
function hookSteps(at?: { step: PublishStep; act: (detail: string) => void }): PublishStep[] {
  const seen: PublishStep[] = [];
  setFaultHook((step, detail) => {
    seen.push(step);
    if (at && step === at.step) at.act(detail);
  });
  return seen;
}

afterEach(() => setFaultHook(null));

const CAPTURE = { kind: "capture", key: "adopted" } as const;

describe("retainTarball adopts the extracted tree", () => {
  test(
    "Given a locked capability tarball, When it is retained, Then nothing is " +
      "copied: the extracted tree is moved, made durable, verified once and " +
      "renamed; the exec digest comes from the same staged tree",
    async () => {
      const tarball = await tarPack(payloadOf("echo"));
      const lock = lockOf("echo");
      const scope = tempDir("oats-adopt-scope-");
      const steps = hookSteps();
      const receipt = await retainTarball(scope, tarball, { id: "demo.echo", lock });
      setFaultHook(null);
      assert.equal(receipt.status, "retained");
      // Each file is then linked into the shared layer, and the sealed tree made durable again.
      assert.deepEqual(
        steps.filter((step) => step !== "link"),
        ["adopt", "fsync", "verify-staged", "fsync", "rename"],
        "the publication steps of an adopted tree",
      );
      assert.equal(steps.filter((step) => step === "link").length, receipt.files!.stored);
      assert.equal(receipt.integrity.format, TREE_LEGACY);
      assert.equal(receipt.integrity.value, lock.capabilities["demo.echo"]!.integrity);
      const digests = await digestTree(payloadOf("echo"), [TREE_LEGACY, TREE_EXEC]);
      assert.equal(receipt.execIntegrity.value, digests[TREE_EXEC]);
      assert.equal((await digestTree(receipt.dir, [TREE_EXEC]))[TREE_EXEC], digests[TREE_EXEC]);
      assert.ok(
        existsSync(
          join(scope, ".agents/capabilities/artifacts/demo.echo", `.manifest-${receipt.integrity.value}.json`),
        ),
        "the manifest is written from the verify pass",
      );
      assert.deepEqual(leftovers(scope), []);
    },
  );

  test(
    "Given more files than the per-file fsync limit, When the tarball is " +
      "retained, Then the tree is adopted (one syncfs) and verifies",
    async () => {
      const payload = manyFiles(600);
      const tarball = await tarPack(payload);
      const expected = (await digestTree(payload, [TREE_EXEC]))[TREE_EXEC]!;
      const scope = tempDir("oats-adopt-scope-");
      const steps = hookSteps();
      const receipt = await retainTarball(scope, tarball, { ...CAPTURE, expect: `${TREE_EXEC}:${expected}` });
      setFaultHook(null);
      assert.equal(receipt.status, "retained");
      assert.ok(!steps.includes("copy"), "nothing was copied");
      assert.equal(receipt.integrity.value, expected);
      await verifyTree(scope, { kind: "capture", key: "adopted", integrity: receipt.integrity });
      assert.deepEqual(leftovers(scope), []);
    },
  );

  test(
    "Given a lock whose row does not match the extracted tree, When it is " +
      "retained, Then integrity-mismatch (source-differs), the store is " +
      "byte-for-byte unchanged and no staging is left",
    async () => {
      const tarball = await tarPack(payloadOf("echo"));
      const lock = lockOf("echo");
      lock.capabilities["demo.echo"]!.integrity = `sha256-${"ab".repeat(32)}`;
      for (const populated of [false, true]) {
        const scope = tempDir("oats-adopt-scope-");
        if (populated)
          await retainTarball(scope, await tarPack(payloadOf("clock")), { id: "demo.clock", lock: lockOf("clock") });
        const before = snapshotTree(scope);
        const steps = hookSteps();
        await assert.rejects(
          retainTarball(scope, tarball, { id: "demo.echo", lock }),
          refusal("integrity-mismatch", { reason: "source-differs", expected: `sha256-${"ab".repeat(32)}` }),
        );
        setFaultHook(null);
        assert.ok(steps.includes("verify-staged"), "the mismatch was found by the verify pass of the adopted tree");
        assert.deepEqual(snapshotTree(scope), before, "the store changed");
        if (!populated) assert.deepEqual(readdirSync(scope), [], "a refused first request created something");
        assert.deepEqual(leftovers(scope), []);
      }
    },
  );

  test(
    "Given a tree whose bytes change in staging before the verify pass, When " +
      "it is retained with a lock, Then integrity-mismatch and nothing is published",
    async () => {
      const tarball = await tarPack(payloadOf("echo"));
      const scope = tempDir("oats-adopt-scope-");
      hookSteps({ step: "verify-staged", act: (staging) => writeFileSync(join(staging, "package.json"), "{}\n") });
      await assert.rejects(retainTarball(scope, tarball, { id: "demo.echo", lock: lockOf("echo") }), {
        code: "integrity-mismatch",
      });
      setFaultHook(null);
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    "Given an exec digest to expect that the tree does not have, When a " +
      "capture tarball is retained, Then integrity-mismatch and the scope is " +
      "left empty",
    async () => {
      const tarball = await tarPack(payloadOf("clock"));
      const scope = tempDir("oats-adopt-scope-");
      await assert.rejects(
        retainTarball(scope, tarball, { ...CAPTURE, expect: `${TREE_EXEC}:sha256-${"0".repeat(64)}` }),
        refusal("integrity-mismatch", "source-differs"),
      );
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    "Given provenance that disagrees with the lock, When the tarball is " +
      "retained, Then provenance-mismatch from the staged tree and nothing is left",
    async () => {
      const payload = payloadCopy("echo");
      const provenancePath = join(payload, ".oats-installation.json");
      writeFileSync(
        provenancePath,
        JSON.stringify({ ...JSON.parse(readFileSync(provenancePath, "utf8")), commit: "0".repeat(40) }, null, 2),
      );
      const lock = lockOf("echo");
      lock.capabilities["demo.echo"]!.integrity = (await digestTree(payload, [TREE_LEGACY]))[TREE_LEGACY]!;
      const scope = tempDir("oats-adopt-scope-");
      const steps = hookSteps();
      await assert.rejects(retainTarball(scope, await tarPack(payload), { id: "demo.echo", lock }), {
        code: "provenance-mismatch",
      });
      setFaultHook(null);
      assert.ok(
        steps.includes("verify-staged") && !steps.includes("rename"),
        `checked after the verify pass, before the rename: ${steps.join(", ")}`,
      );
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    "Given the revision is already retained, When a different tarball is " +
      "retained with the same lock, Then source-differs (the tree is measured " +
      "before kept) and the store is unchanged",
    async () => {
      const lock = lockOf("echo");
      const scope = tempDir("oats-adopt-scope-");
      const first = await retainTarball(scope, await tarPack(payloadOf("echo")), { id: "demo.echo", lock });
      assert.equal(first.status, "retained");
      const again = await retainTarball(scope, await tarPack(payloadOf("echo")), { id: "demo.echo", lock });
      assert.equal(again.status, "kept");
      assert.equal(again.execIntegrity.value, first.execIntegrity.value);

      const drifted = payloadCopy("echo");
      writeFileSync(join(drifted, "package.json"), '{"name":"drifted"}\n');
      const before = snapshotTree(scope);
      await assert.rejects(
        retainTarball(scope, await tarPack(drifted), { id: "demo.echo", lock }),
        refusal("integrity-mismatch", "source-differs"),
      );
      assert.deepEqual(snapshotTree(scope), before);
      assert.deepEqual(leftovers(scope), []);
    },
  );

  test(
    "Given a concurrent publisher that wins the revision during the verify " +
      "pass, When the rename comes, Then the winner is verified and reported " +
      "kept and our staging is gone",
    async () => {
      const lock = lockOf("echo");
      const winner = tempDir("oats-adopt-winner-");
      const won = await retainTarball(winner, await tarPack(payloadOf("echo")), { id: "demo.echo", lock });
      const scope = tempDir("oats-adopt-scope-");
      const destination = join(
        scope,
        ".agents/capabilities/artifacts/demo.echo",
        String(lock.capabilities["demo.echo"]!.integrity),
      );
      hookSteps({
        step: "verify-staged",
        act: () => cpSync(won.dir, destination, { recursive: true, verbatimSymlinks: true }),
      });
      const receipt = await retainTarball(scope, await tarPack(payloadOf("echo")), { id: "demo.echo", lock });
      setFaultHook(null);
      assert.equal(receipt.status, "kept");
      assert.equal(receipt.dir, destination);
      assert.deepEqual(leftovers(scope), []);
    },
  );

  for (const step of ["adopt", "fsync", "verify-staged", "rename"] as const) {
    for (const files of [5, 600]) {
      test(
        `Given a failure injected at ${step} ` +
          `(${files > 512 ? "syncfs" : "per-file fsync"}), When a tarball is ` +
          `retained, Then internal-error with step ${step}, nothing is published ` +
          `and no staging or store directory is left`,
        async () => {
          const payload = files === 5 ? payloadOf("echo") : manyFiles(files);
          const tarball = await tarPack(payload);
          const request: RetainTarballRequest = files === 5 ? { id: "demo.echo", lock: lockOf("echo") } : CAPTURE;
          for (const populated of [false, true]) {
            const scope = tempDir("oats-adopt-scope-");
            if (populated)
              await retainTarball(scope, await tarPack(payloadOf("clock")), { kind: "capture", key: "other" });
            const before = snapshotTree(scope);
            hookSteps({
              step,
              act: () => {
                throw Object.assign(new Error(`injected ${step} failure`), { code: "EIO" });
              },
            });
            await assert.rejects(retainTarball(scope, tarball, request), refusal("internal-error", { step }));
            setFaultHook(null);
            assert.deepEqual(snapshotTree(scope), before, "the store changed");
            if (!populated) assert.deepEqual(readdirSync(scope), [], "the failed first request left something");
            assert.deepEqual(leftovers(scope), []);
          }
        },
      );
    }
  }

  test(
    "Given the move into the store cannot cross filesystems (EXDEV), When " +
      "the tarball is retained, Then it is copied instead, with the same " +
      "receipt, and nothing is left behind",
    async () => {
      const tarball = await tarPack(payloadOf("echo"));
      const lock = lockOf("echo");
      const adopted = await retainTarball(tempDir("oats-adopt-scope-"), tarball, { id: "demo.echo", lock });
      const scope = tempDir("oats-adopt-scope-");
      const steps = hookSteps({
        step: "adopt",
        act: () => {
          throw Object.assign(new Error("EXDEV: cross-device link not permitted"), { code: "EXDEV" });
        },
      });
      const copied = await retainTarball(scope, tarball, { id: "demo.echo", lock });
      setFaultHook(null);
      assert.ok(steps.includes("copy"), "the fallback copies");
      assert.equal(copied.status, "retained");
      assert.equal(copied.integrity.value, adopted.integrity.value);
      assert.equal(copied.execIntegrity.value, adopted.execIntegrity.value);
      assert.deepEqual(leftovers(scope), []);
    },
  );
});
