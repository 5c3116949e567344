/**
 * oats repair through the built CLI (dist/; `npm run build` first): only
 * bytes that verify against the revision's own digest (and, for a
 * legacy-named capability, its lock's provenance) replace it; the damaged
 * tree goes to .agents/quarantine/, the repair is audited, and every refusal
 * leaves the store as it was. Re-retaining over damage stays refused.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import { describe, test } from "node:test";
import {
  TREE_EXEC,
  TREE_LEGACY,
  digestTree,
  fsckScope,
  prepare,
  readAudit,
  repair,
  retainCapabilityArtifact,
  retainTree,
  retainedTreeDir,
  verifyTree,
} from "../src/index.js";
import { readRecordBytes } from "../src/resolution/index.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, fixtureLock, runOats, snapshotTree, tempDir } from "./helpers.js";

function tool(label: string): string {
  const dir = join(tempDir("oats-repair-src-"), label);
  mkdirSync(join(dir, "bin"), { recursive: true });
  writeFileSync(join(dir, "bin/run"), "#!/bin/sh\necho run\n", { mode: 0o755 });
  writeFileSync(join(dir, "data.txt"), `${label}\n`);
  return dir;
}

/**
 * Give `file` an inode of its own (same bytes and mode): a revision's files are links to held files that other
 * revisions share, and a test that damages one revision must not damage the others through them.
 */
function unshare(file: string): void {
  const bytes = readFileSync(file);
  const mode = lstatSync(file).mode & 0o7777;
  chmodSync(dirname(file), 0o755);
  unlinkSync(file);
  writeFileSync(file, bytes, { mode });
  chmodSync(file, mode);
}

function damage(file: string, text = "tampered\n"): void {
  unshare(file);
  chmodSync(file, 0o644);
  writeFileSync(file, text);
}

/** The store without the audit log (refusals are audited; everything else must be byte-for-byte unchanged). */
function storeSnapshot(scope: string): string[] {
  return snapshotTree(scope).filter((row) => !row.includes(".agents/audit"));
}

function repairJson(scope: string, ...args: string[]) {
  const run = runOats(["--json", "--scope", scope, "repair", ...args]);
  return { run, envelope: JSON.parse(run.stdout) };
}

async function damagedCapture() {
  const scope = tempDir("oats-repair-scope-");
  const source = tool("nightly");
  const receipt = await retainTree(scope, { kind: "capture", key: "nightly", source });
  const ref = `capture:nightly@oats.tree-exec.v1:${receipt.execIntegrity.value}`;
  damage(join(receipt.dir, "data.txt"));
  return { scope, source, receipt, ref };
}

describe("repair of an exec-named revision", () => {
  test(
    "Given a damaged revision and a directory holding its exact tree, When " +
      "repairing, Then it verifies again, the damaged tree is in quarantine, " +
      "and the repair is audited",
    async () => {
      const { scope, source, receipt, ref } = await damagedCapture();
      const { run, envelope } = repairJson(scope, ref, "--from", source);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.equal(envelope.result.status, "repaired");
      assert.equal(envelope.result.damage.code, "integrity-mismatch");
      await verifyTree(scope, { kind: "capture", key: "nightly", integrity: receipt.execIntegrity });
      const quarantine = envelope.result.quarantine as string;
      assert.match(
        quarantine,
        new RegExp(
          `^${scope.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}/\\.agents/quarantine/` +
            String.raw`\d{8}T\d{6}Z-capture-nightly-[0-9a-f]{12}-[0-9a-f]{8}$`,
        ),
      );
      assert.equal(
        readFileSync(join(quarantine, "data.txt"), "utf8"),
        "tampered\n",
        "the damaged bytes are kept for inspection",
      );
      assert.deepEqual(
        readdirSync(join(scope, ".agents/quarantine")).filter((name) => name !== ".gitignore").length,
        1,
      );
      const entry = readAudit(scope).entries.find((each) => each.action === "repair");
      assert.equal(entry?.outcome, "ok");
      assert.equal(entry?.subject?.["ref"], ref);
      assert.equal(entry?.details["quarantine"], quarantine);
    },
  );

  test(
    "Given a damaged revision, When the repair source does not verify, Then " +
      "integrity-mismatch (exit 5) and the store is as it was",
    async () => {
      const { scope, ref } = await damagedCapture();
      const before = storeSnapshot(scope);
      const { run, envelope } = repairJson(scope, ref, "--from", tool("another"));
      assert.equal(run.status, 5, run.stdout);
      assert.equal(envelope.error.code, "integrity-mismatch");
      assert.equal(envelope.error.details.reason, "repair-source-differs");
      assert.deepEqual(storeSnapshot(scope), before);
      assert.equal(readAudit(scope).entries.at(-1)?.outcome, "refused");
    },
  );

  test(
    "Given an intact revision, When repairing it, Then invalid-input " + "not-damaged (exit 4) and nothing changes",
    async () => {
      const scope = tempDir("oats-repair-scope-");
      const source = tool("fine");
      const receipt = await retainTree(scope, { kind: "capture", key: "fine", source });
      const before = storeSnapshot(scope);
      const { run, envelope } = repairJson(
        scope,
        `capture:fine@oats.tree-exec.v1:${receipt.execIntegrity.value}`,
        "--from",
        source,
      );
      assert.equal(run.status, 4, run.stdout);
      assert.equal(envelope.error.details.reason, "not-damaged");
      assert.deepEqual(storeSnapshot(scope), before);
    },
  );

  test(
    "Given a revision that is not retained, or a resolution id, When " +
      "repairing, Then artifact-not-found (3) or invalid-artifact-reference (4)",
    async () => {
      const { scope, source } = await damagedCapture();
      const before = storeSnapshot(scope);
      assert.equal(
        repairJson(scope, `capture:nightly@oats.tree-exec.v1:sha256-${"1".repeat(64)}`, "--from", source).run.status,
        3,
      );
      const id = repairJson(scope, `sha256-${"2".repeat(64)}`, "--from", source);
      assert.equal(id.run.status, 4);
      assert.equal(id.envelope.error.code, "invalid-artifact-reference");
      assert.equal(
        repairJson(scope, `capture:../x@oats.tree-exec.v1:sha256-${"1".repeat(64)}`, "--from", source).run.status,
        4,
      );
      assert.equal(
        repairJson(scope, `capture:nightly@oats.tree-exec.v1:sha256-${"1".repeat(64)}`).run.status,
        2,
        "--from is required",
      );
      assert.deepEqual(storeSnapshot(scope), before);
    },
  );

  test(
    "Given a damaged revision, When retaining the same tree over it, Then " +
      "the retain is still refused and the damage stays",
    async () => {
      const { scope, source, receipt } = await damagedCapture();
      const before = storeSnapshot(scope);
      await assert.rejects(
        retainTree(scope, { kind: "capture", key: "nightly", source }),
        (error: any) => error.code === "integrity-mismatch",
      );
      assert.deepEqual(storeSnapshot(scope), before);
      assert.equal(readFileSync(join(receipt.dir, "data.txt"), "utf8"), "tampered\n");
    },
  );

  test(
    "Given a damaged revision, When repairing from a package tarball or from " +
      "a bundle exported elsewhere, Then each is repaired",
    async () => {
      const { scope, source, ref, receipt } = await damagedCapture();
      const pack = tempDir("oats-repair-tgz-");
      cpSync(source, join(pack, "package"), { recursive: true });
      execFileSync("tar", ["-czf", join(pack, "tool.tgz"), "-C", pack, "package"]);
      assert.equal(repairJson(scope, ref, "--from", join(pack, "tool.tgz")).envelope.result.from.type, "tarball");
      damage(join(receipt.dir, "data.txt"), "again\n");
      const other = tempDir("oats-repair-other-");
      await retainTree(other, { kind: "capture", key: "nightly", source });
      const bundle = join(tempDir("oats-repair-bundle-"), "b.tar");
      assert.equal(runOats(["--scope", other, "export", ref, "-o", bundle]).status, 0);
      const fromBundle = repairJson(scope, ref, "--from", bundle);
      assert.equal(fromBundle.run.status, 0, fromBundle.run.stdout);
      assert.equal(fromBundle.envelope.result.from.type, "bundle");
      assert.equal(readdirSync(join(scope, ".agents/quarantine")).filter((name) => name !== ".gitignore").length, 2);
    },
  );
});

async function damagedLegacy() {
  const scope = tempDir("oats-repair-legacy-");
  const receipt = await retainCapabilityArtifact(scope, FIXTURE_PAYLOAD, "demo.hello", fixtureLock());
  damage(join(receipt.dir, "oats.json"), "{}\n");
  return { scope, receipt, ref: `capability:demo.hello@${receipt.integrity.value}` };
}

describe("repair of a legacy-named capability", () => {
  test(
    "Given a damaged legacy revision, When repairing with its lock, Then it " +
      "is repaired; without the lock it is a usage error",
    async () => {
      const { scope, ref } = await damagedLegacy();
      const before = storeSnapshot(scope);
      const missingLock = repairJson(scope, ref, "--from", FIXTURE_PAYLOAD);
      assert.equal(missingLock.run.status, 2, missingLock.run.stdout);
      assert.equal(missingLock.envelope.error.details.reason, "lock-required");
      assert.deepEqual(storeSnapshot(scope), before);
      const { run } = repairJson(scope, ref, "--from", FIXTURE_PAYLOAD, "--lock", FIXTURE_LOCK);
      assert.equal(run.status, 0, run.stdout);
    },
  );

  test(
    "Given a lock whose rows disagree with the tree's provenance, When " +
      "repairing, Then provenance-mismatch (exit 5) and the store is as it was",
    async () => {
      const { scope, ref } = await damagedLegacy();
      const lock = fixtureLock() as any;
      for (const row of Object.values(lock.packages) as any[]) row.source = `${row.source}-elsewhere`;
      const path = join(tempDir("oats-repair-lock-"), "oats-lock.json");
      writeFileSync(path, JSON.stringify(lock));
      const before = storeSnapshot(scope);
      const { run, envelope } = repairJson(scope, ref, "--from", FIXTURE_PAYLOAD, "--lock", path);
      assert.equal(run.status, 5, run.stdout);
      assert.equal(envelope.error.code, "provenance-mismatch");
      assert.deepEqual(storeSnapshot(scope), before);
    },
  );

  test("Given a lock that names another revision, When repairing, Then invalid-lock and nothing changes", async () => {
    const { scope } = await damagedLegacy();
    const before = storeSnapshot(scope);
    const { run, envelope } = repairJson(
      scope,
      `capability:demo.hello@sha256-${"3".repeat(64)}`,
      "--from",
      FIXTURE_PAYLOAD,
      "--lock",
      FIXTURE_LOCK,
    );
    assert.equal(run.status, 4, run.stdout);
    assert.equal(envelope.error.code, "invalid-lock");
    assert.deepEqual(storeSnapshot(scope), before);
    assert.ok(!existsSync(join(scope, ".agents/quarantine")));
  });
});

describe("repair against a local attacker", () => {
  test(
    "Given a damaged legacy revision and a source from another user whose bytes verify for its name with another " +
      "exec bit, When repairing, Then integrity-mismatch (repair-modes-differ) and the store is as it was",
    async () => {
      const { scope, receipt, ref } = await damagedLegacy();
      const before = storeSnapshot(scope);
      const source = join(tempDir("oats-repair-other-"), "payload");
      cpSync(FIXTURE_PAYLOAD, source, { recursive: true, verbatimSymlinks: true });
      chmodSync(join(source, "bin/hello.mjs"), 0o644);
      if (process.getuid?.() === 0) execFileSync("chown", ["-R", "65534:65534", source]);
      const { run, envelope } = repairJson(scope, ref, "--from", source, "--lock", FIXTURE_LOCK);
      assert.equal(run.status, 5, run.stdout);
      assert.equal(envelope.error.details.reason, "repair-modes-differ");
      assert.equal(envelope.error.details.path, "bin/hello.mjs");
      assert.deepEqual(storeSnapshot(scope), before, "the damaged revision, its manifest and quarantine as they were");
      assert.equal(readFileSync(join(receipt.dir, "oats.json"), "utf8"), "{}\n");
    },
  );

  test(
    "Given a damaged revision and a bundle that holds another tree of the same key, When repairing from it, " +
      "Then integrity-mismatch (repair-source-differs) and the store is as it was",
    async () => {
      const { scope, ref } = await damagedCapture();
      const elsewhere = tempDir("oats-repair-elsewhere-");
      const other = await retainTree(elsewhere, { kind: "capture", key: "nightly", source: tool("other") });
      const bundle = join(tempDir("oats-repair-bundle-"), "other.tar");
      const exported = runOats([
        "--scope",
        elsewhere,
        "export",
        `capture:nightly@oats.tree-exec.v1:${other.execIntegrity.value}`,
        "--output",
        bundle,
      ]);
      assert.equal(exported.status, 0, exported.stdout + exported.stderr);
      const before = storeSnapshot(scope);
      const { run, envelope } = repairJson(scope, ref, "--from", bundle);
      assert.equal(run.status, 5, run.stdout);
      assert.equal(envelope.error.details.reason, "repair-source-differs");
      assert.deepEqual(storeSnapshot(scope), before);
    },
  );

  test("Given a repair source owned by another user who keeps swapping a file " +
    "in it, When repairing repeatedly, Then each repair either publishes " +
    "verified bytes or is refused with the damaged tree back in place", {
    timeout: 180_000,
  }, async (t) => {
    if (process.getuid?.() !== 0) {
      t.skip("needs root to run the attacker as nobody (uid 65534)");
      return;
    }
    // A tree large enough that the check of the source and the copy of it are far apart.
    const shared = tempDir("oats-repair-attack-");
    chmodSync(shared, 0o755);
    const source = join(shared, "nightly");
    mkdirSync(join(source, "bin"), { recursive: true });
    mkdirSync(join(source, "lib"), { recursive: true });
    writeFileSync(join(source, "bin/run"), "#!/bin/sh\necho run\n", { mode: 0o755 });
    writeFileSync(join(source, "data.txt"), "nightly\n");
    for (let index = 0; index < 1500; index++)
      writeFileSync(join(source, "lib", `f-${index}.js`), `module.exports = ${index};\n`);
    const scope = tempDir("oats-repair-scope-");
    const receipt = await retainTree(scope, { kind: "capture", key: "nightly", source });
    const ref = `capture:nightly@oats.tree-exec.v1:${receipt.execIntegrity.value}`;
    damage(join(receipt.dir, "data.txt"));
    execFileSync("chown", ["-R", "65534:65534", source]);
    const { spawn } = await import("node:child_process");
    const script =
      `const fs=require("fs");const ` +
      `p=${JSON.stringify(join(source, "data.txt"))};const s=p+".swap";const ` +
      `end=Date.now()+120000;let i=0;const pause=new Int32Array(new ` +
      `SharedArrayBuffer(4));while(Date.now()<end){` +
      `fs.writeFileSync(s,(i++%2)?"nightly\\n":"evil\\n");fs.renameSync(s,p);Atomics.wait(pause,0,0,7);}`;
    const child = spawn(process.execPath, ["-e", script], { uid: 65534, gid: 65534, stdio: "ignore" });
    const outcomes: string[] = [];
    try {
      for (let attempt = 0; attempt < 12; attempt++) {
        const { run, envelope } = repairJson(scope, ref, "--from", source);
        outcomes.push(`${run.status}${envelope.ok ? "" : `:${envelope.error.details.reason ?? envelope.error.code}`}`);
        assert.ok([0, 4, 5].includes(run.status!), run.stdout);
        assert.ok(existsSync(receipt.dir), "the revision is never left missing");
        if (run.status === 0) {
          await verifyTree(scope, { kind: "capture", key: "nightly", integrity: receipt.execIntegrity });
          damage(join(receipt.dir, "data.txt"));
        } else {
          assert.equal(
            readFileSync(join(receipt.dir, "data.txt"), "utf8"),
            "tampered\n",
            "a refused repair leaves the damaged tree in place",
          );
          assert.equal(readFileSync(join(receipt.dir, "bin/run"), "utf8"), "#!/bin/sh\necho run\n");
        }
      }
    } finally {
      child.kill();
    }
    console.log(`repair outcomes under attack: ${outcomes.join(",")}`);
  });
});

describe("repair of a legacy-named capability holds its exec bits", () => {
  const HELLO = "demo.hello";
  const genuineExec = () => digestTree(FIXTURE_PAYLOAD, [TREE_EXEC]).then((digests) => digests[TREE_EXEC]!);

  /**
   * The fixture capability retained under its lock's legacy name (through `prepare`, so a record names it beside its
   * exec-named copy, when `record`), its oats.json damaged, its manifest removed unless `manifest`.
   */
  async function legacyScene(options: { record: boolean; manifest: boolean }) {
    const scope = tempDir("oats-repair-modes-");
    let dir: string;
    let value: string;
    if (options.record) {
      const prepared = await prepare(scope, {
        schemaVersion: 1,
        instance: "demo",
        capabilities: [{ id: HELLO, dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
        entrypoints: { hello: { capability: HELLO, path: "bin/hello.mjs", role: "command" } },
      });
      const { record } = readRecordBytes(scope, prepared.id);
      value = record.artifacts[HELLO]!.legacyIntegrity!.value;
      dir = retainedTreeDir(scope, { kind: "capability", key: HELLO, integrity: { format: TREE_LEGACY, value } });
    } else {
      const receipt = await retainCapabilityArtifact(scope, FIXTURE_PAYLOAD, HELLO, fixtureLock());
      dir = receipt.dir;
      value = receipt.integrity.value;
    }
    if (!options.manifest) unlinkSync(join(dir, "..", `.manifest-${basename(dir)}.json`));
    damage(join(dir, "oats.json"), "{}\n");
    return { scope, dir, ref: `capability:${HELLO}@${value}` };
  }

  /** A copy of the genuine install; `flip` turns the entry to 644 and package.json to 755 (bytes unchanged). */
  function copyOfInstall(flip: boolean, owner?: number): string {
    const dir = join(tempDir("oats-repair-from-"), "hello");
    cpSync(FIXTURE_PAYLOAD, dir, { recursive: true, verbatimSymlinks: true });
    if (flip) {
      chmodSync(join(dir, "bin/hello.mjs"), 0o644);
      chmodSync(join(dir, "package.json"), 0o755);
    }
    if (owner !== undefined) execFileSync("chown", ["-R", `${owner}:${owner}`, join(dir, "..")]);
    return dir;
  }

  const refusedModes = (reason: string) => (error: any) => {
    assert.equal(error.details?.reason, reason, `${error.code}: ${error.message}`);
    return true;
  };

  for (const evidence of [
    { name: "its manifest", record: false, manifest: true, by: "the revision's manifest" },
    { name: "a record's exec digest", record: true, manifest: false, by: "record " },
    { name: "the damaged tree's undamaged files", record: false, manifest: false, by: "the damaged tree" },
  ]) {
    test(
      `Given a damaged legacy revision known by ${evidence.name}, When repairing from a copy whose modes ` +
        "were flipped (same bytes, same legacy digest), Then integrity-mismatch repair-modes-differ and the store " +
        "is as it was",
      async () => {
        const { scope, ref } = await legacyScene(evidence);
        const before = storeSnapshot(scope);
        await assert.rejects(
          repair(scope, ref, { from: copyOfInstall(true), lock: FIXTURE_LOCK }),
          (error: any) =>
            refusedModes("repair-modes-differ")(error) &&
            error.code === "integrity-mismatch" &&
            String(error.details.evidence).startsWith(evidence.by),
        );
        assert.deepEqual(storeSnapshot(scope), before);
      },
    );
  }

  test(
    "Given a damaged legacy revision with a manifest, When repaired from the genuine install, Then it is " +
      "repaired with the install's exec bits, and a prepare of that install is kept, not refused",
    async () => {
      const { scope, ref, dir } = await legacyScene({ record: true, manifest: true });
      const result = await repair(scope, ref, { from: copyOfInstall(false), lock: FIXTURE_LOCK });
      assert.equal(result.status, "repaired");
      assert.equal((await digestTree(dir, [TREE_EXEC]))[TREE_EXEC], await genuineExec());
      await prepare(scope, {
        schemaVersion: 1,
        instance: "again",
        capabilities: [{ id: HELLO, dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
        entrypoints: { hello: { capability: HELLO, path: "bin/hello.mjs", role: "command" } },
      });
    },
  );

  test(
    "Given a damaged legacy revision with no manifest and no record naming it, When repaired even from the " +
      "genuine install, Then invalid-input repair-modes-undecided: the damaged file's exec bit is known to nothing",
    async () => {
      const { scope, ref } = await legacyScene({ record: false, manifest: false });
      const before = storeSnapshot(scope);
      await assert.rejects(
        repair(scope, ref, { from: copyOfInstall(false), lock: FIXTURE_LOCK }),
        (error: any) =>
          refusedModes("repair-modes-undecided")(error) &&
          error.code === "invalid-input" &&
          error.details.undecided.includes("oats.json"),
      );
      assert.deepEqual(storeSnapshot(scope), before);
    },
  );

  test(
    "Given a legacy revision whose exec bits were changed in the store, When fsck runs, Then it reports the " +
      "revision against its manifest, or without one against the record that names it",
    async () => {
      for (const manifest of [true, false]) {
        const { scope, dir } = await legacyScene({ record: true, manifest });
        // Undo the damage the scene made: only the mode differs now, which the legacy digest does not see.
        writeFileSync(join(dir, "oats.json"), readFileSync(join(FIXTURE_PAYLOAD, "oats.json")));
        unshare(join(dir, "bin/hello.mjs"));
        chmodSync(join(dir, "bin/hello.mjs"), 0o644);
        const report = await fsckScope(scope);
        const found = report.classes.revisions.filter((finding) => finding.kind !== "notice");
        assert.deepEqual(
          found.map((finding) => [finding.code, finding.details["reason"]]),
          [["integrity-mismatch", manifest ? "modes-differ-from-manifest" : "exec-digest-differs"]],
          JSON.stringify(found),
        );
        assert.equal(report.exitCode, 5);
      }
    },
  );

  test("Given a repair source owned by nobody, who flips the entry's exec bit over and over, When repairing " +
    "repeatedly, Then each repair is refused or publishes the install's exec bits", {
    timeout: 180_000,
  }, async (t) => {
    if (process.getuid?.() !== 0) {
      t.skip("needs root to run the attacker as nobody (uid 65534)");
      return;
    }
    const { scope, ref, dir } = await legacyScene({ record: false, manifest: true });
    const from = copyOfInstall(false, 65534);
    const entry = join(from, "bin/hello.mjs");
    const { spawn } = await import("node:child_process");
    const script =
      `const fs=require("fs");const p=${JSON.stringify(entry)};const end=Date.now()+120000;let i=0;` +
      "const pause=new Int32Array(new SharedArrayBuffer(4));" +
      "while(Date.now()<end){fs.chmodSync(p,(i++%2)?0o755:0o644);Atomics.wait(pause,0,0,1);}";
    const child = spawn(process.execPath, ["-e", script], { uid: 65534, gid: 65534, stdio: "ignore" });
    const genuine = await genuineExec();
    const outcomes: string[] = [];
    try {
      for (let attempt = 0; attempt < 12; attempt++) {
        try {
          await repair(scope, ref, { from, lock: FIXTURE_LOCK });
          outcomes.push("repaired");
          assert.equal((await digestTree(dir, [TREE_EXEC]))[TREE_EXEC], genuine, "the install's exec bits");
          damage(join(dir, "oats.json"), "{}\n");
        } catch (error: any) {
          if (error instanceof assert.AssertionError) throw error;
          outcomes.push(`${error.code}:${error.details?.reason}`);
          // A flip during the source's own read is a source that changed while read: it hashes to nothing.
          const changedWhileRead = error.details?.reason === "repair-source-differs" && error.details?.actual === null;
          assert.ok(
            ["repair-modes-differ", "source-differs"].includes(error.details?.reason) || changedWhileRead,
            error.message,
          );
          assert.equal(readFileSync(join(dir, "oats.json"), "utf8"), "{}\n", "the damaged tree is back in place");
        }
      }
    } finally {
      child.kill();
    }
    console.log(`repair outcomes under mode flips: ${outcomes.join(",")}`);
  });
});
