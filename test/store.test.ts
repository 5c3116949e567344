/**
 * The store (contract sections 3 and 5): where revisions live, what a
 * retained tree keeps, receipts, verification that reads only the stored
 * revision, listing and fsck.
 */
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { spawnSync } from "node:child_process";
import {
  appendFileSync,
  chmodSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import {
  TREE_EXEC,
  TREE_LEGACY,
  digestTree,
  fsck,
  jsonDigest,
  listRetained,
  listStore,
  readLockFile,
  retainCapabilityArtifact,
  retainTree,
  retainedCapabilityDir,
  retainedTreeDir,
  sourceIdentityKey,
  verifyRetainedCapability,
  verifyTree,
  type ArtifactReceipt,
} from "../src/index.js";
import { setFaultHook } from "../src/retention/store/faults.js";
import { hostTag } from "../src/retention/store/layout.js";
import { FIXTURE_LOCK, fixtureCopy, fixtureLock, snapshotTree, tempDir } from "./helpers.js";
import { ofKind, refusal } from "./support/refusals.js";
import type { ArtifactKind, IntegrityInput } from "../src/retention/index.js";

const CAPABILITY = "demo.hello";
const LOCK_INTEGRITY = (fixtureLock() as any).capabilities[CAPABILITY].integrity as string;
const HEX = "0123456789abcdef".repeat(4);

const capabilitiesRoot = (scope: string) => join(realpathSync(scope), ".agents/capabilities/artifacts");
const sourcesRoot = (scope: string) => join(realpathSync(scope), ".agents/sources/artifacts");
const capturesRoot = (scope: string) => join(realpathSync(scope), ".agents/captures/artifacts");

async function execDigest(dir: string): Promise<string> {
  return (await digestTree(dir, [TREE_EXEC]))[TREE_EXEC]!;
}

/** A source tree with distinctive modes, a verbatim relative link spelling and a 0750 directory. */
function modedTree(): string {
  const source = fixtureCopy();
  chmodSync(join(source, "skills/greeting.md"), 0o640);
  chmodSync(join(source, "bin/hello.mjs"), 0o755);
  writeFileSync(join(source, "secret.txt"), "owner only\n", { mode: 0o600 });
  chmodSync(join(source, "secret.txt"), 0o600);
  symlinkSync("./bin/../bin/hello.mjs", join(source, "odd-link.mjs"));
  mkdirSync(join(source, "private"));
  writeFileSync(join(source, "private/notes.txt"), "private notes\n");
  chmodSync(join(source, "private/notes.txt"), 0o640);
  chmodSync(join(source, "private"), 0o750);
  return source;
}

/** A kept receipt is a retained one without `files`: nothing was published. */
function withoutFiles(receipt: ArtifactReceipt): ArtifactReceipt {
  const { files: _files, ...rest } = receipt;
  return rest;
}

function receiptKeys(receipt: ArtifactReceipt): string[] {
  return Object.keys(receipt).sort();
}

// ------------------------------------------------------------------- layout

test(
  "a capability is retained at " + ".agents/capabilities/artifacts/<id>/sha256-<hex>/ named by its lock row",
  async () => {
    const scope = tempDir();
    const receipt = await retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, fixtureLock());
    const root = capabilitiesRoot(scope);
    assert.equal(receipt.dir, join(root, CAPABILITY, LOCK_INTEGRITY));
    assert.ok(lstatSync(receipt.dir).isDirectory());
    assert.equal(readFileSync(join(root, ".gitignore"), "utf8"), "*\n");
    assert.deepEqual(readdirSync(root).sort(), [".gitignore", CAPABILITY]);
    // The revision and its diagnostic manifest (never selectable: dot-prefixed).
    assert.deepEqual(readdirSync(join(root, CAPABILITY)).sort(), [`.manifest-${LOCK_INTEGRITY}.json`, LOCK_INTEGRITY]);
    // Nothing else is created in the scope.
    assert.deepEqual(readdirSync(scope), [".agents"]);
    // And the shared file layer its files are hard links into.
    assert.deepEqual(readdirSync(join(scope, ".agents")).sort(), ["capabilities", "files"]);
    assert.equal(retainedCapabilityDir(scope, CAPABILITY, LOCK_INTEGRITY), receipt.dir);
  },
);

test(
  "tree-exec revisions live at <kind " +
    "dir>/artifacts/<key>/tree-exec-v1/sha256-<hex>/ for capability, source " +
    "and capture",
  async () => {
    const scope = tempDir();
    const source = fixtureCopy();
    const value = await execDigest(source);
    const sourceKey = sourceIdentityKey("git:https://host/org/repo#souls/a");
    const cases = [
      { kind: "capability" as const, key: CAPABILITY, root: capabilitiesRoot(scope) },
      { kind: "source" as const, key: sourceKey, root: sourcesRoot(scope) },
      { kind: "capture" as const, key: "nightly-report", root: capturesRoot(scope) },
    ];
    for (const { kind, key, root } of cases) {
      const receipt = await retainTree(scope, { kind, key, source });
      assert.equal(receipt.dir, join(root, key, "tree-exec-v1", value));
      assert.equal(receipt.dir, retainedTreeDir(scope, { kind, key, integrity: `${TREE_EXEC}:${value}` }));
      assert.equal(readFileSync(join(root, ".gitignore"), "utf8"), "*\n");
      assert.deepEqual(readdirSync(root).sort(), [".gitignore", key]);
      assert.deepEqual(readdirSync(join(root, key)), ["tree-exec-v1"]);
      assert.deepEqual(readdirSync(join(root, key, "tree-exec-v1")).sort(), [`.manifest-${value}.json`, value]);
    }
    assert.deepEqual(readdirSync(join(scope, ".agents")).sort(), ["capabilities", "captures", "files", "sources"]);
  },
);

test('the managed .gitignore is in place, with exactly "*\\n", before the first payload byte is written', async () => {
  for (const kind of ["capability", "source", "capture"] as const) {
    const scope = tempDir();
    const root = { capability: capabilitiesRoot, source: sourcesRoot, capture: capturesRoot }[kind](scope);
    const seen: (string | null)[] = [];
    setFaultHook((step) => {
      if (step === "copy")
        seen.push(existsSync(join(root, ".gitignore")) ? readFileSync(join(root, ".gitignore"), "latin1") : null);
    });
    try {
      const key = kind === "source" ? HEX : "first";
      await retainTree(scope, { kind, key, source: fixtureCopy() });
    } finally {
      setFaultHook(null);
    }
    assert.ok(seen.length > 0, "the copy step ran");
    assert.deepEqual(
      new Set(seen),
      new Set(["*\n"]),
      `${kind}: .gitignore must exist with "*\\n" before any payload is written`,
    );
    assert.equal(lstatSync(join(root, ".gitignore")).isFile(), true);
  }
});

test(
  "retainedCapabilityDir and retainedTreeDir are lexical: computed for a " +
    "scope that does not exist, touching nothing",
  () => {
    const parent = tempDir();
    const scope = join(parent, "no-such-scope");
    const value = `sha256-${HEX}`;
    assert.equal(
      retainedCapabilityDir(scope, CAPABILITY, value),
      join(scope, ".agents/capabilities/artifacts", CAPABILITY, value),
    );
    assert.equal(
      retainedCapabilityDir(scope, CAPABILITY, `${TREE_LEGACY}:${value}`),
      join(scope, ".agents/capabilities/artifacts", CAPABILITY, value),
    );
    assert.equal(
      retainedCapabilityDir(scope, CAPABILITY, { format: TREE_EXEC, value }),
      join(scope, ".agents/capabilities/artifacts", CAPABILITY, "tree-exec-v1", value),
    );
    assert.equal(
      retainedTreeDir(scope, { kind: "capture", key: "nightly", integrity: `${TREE_EXEC}:${value}` }),
      join(scope, ".agents/captures/artifacts/nightly/tree-exec-v1", value),
    );
    assert.equal(
      retainedTreeDir(scope, { kind: "source", key: HEX, integrity: `${TREE_EXEC}:${value}` }),
      join(scope, ".agents/sources/artifacts", HEX, "tree-exec-v1", value),
    );
    // Prototype-looking ids are ordinary ids.
    assert.equal(
      retainedCapabilityDir(scope, "constructor", value),
      join(scope, ".agents/capabilities/artifacts/constructor", value),
    );
    assert.equal(existsSync(scope), false, "computing a path creates nothing");
    assert.deepEqual(readdirSync(parent), []);

    // Malformed on purpose, a number and null among them: the refusal is what is tested.
    for (const id of ["../x", "X", "a/b", "", "a".repeat(215), ".hidden", "__proto__", "a b", 42, null] as string[]) {
      assert.throws(
        () => retainedCapabilityDir(scope, id, value),
        refusal("invalid-artifact-reference", ofKind("invalid")),
        `id ${JSON.stringify(id)}`,
      );
      assert.throws(
        () => retainedTreeDir(scope, { kind: "capture", key: id, integrity: `${TREE_EXEC}:${value}` }),
        refusal("invalid-artifact-reference", ofKind("invalid")),
      );
    }
    assert.equal(retainedCapabilityDir(scope, "a".repeat(214), value).endsWith(`${"a".repeat(214)}/${value}`), true);
    for (const integrity of [
      "sha256-abc",
      `sha256-${HEX.slice(1)}`,
      `sha256-${HEX.toUpperCase()}`,
      `sha512-${HEX}`,
      `oats.nope:${value}`,
      `${TREE_LEGACY}:sha256-${HEX}0`,
      HEX,
      "",
      { format: TREE_EXEC },
      { format: TREE_EXEC, value, extra: 1 },
      `oats.json.v1:${value}`,
    ] as IntegrityInput[]) {
      assert.throws(
        () => retainedCapabilityDir(scope, CAPABILITY, integrity),
        refusal("invalid-artifact-reference", ofKind("invalid")),
        `integrity ${JSON.stringify(integrity)}`,
      );
    }
    // Capture and source revisions are named by oats.tree-exec.v1 only.
    assert.throws(
      () => retainedTreeDir(scope, { kind: "capture", key: "nightly", integrity: value }),
      refusal("invalid-artifact-reference", ofKind("invalid")),
    );
    assert.throws(
      () => retainedTreeDir(scope, { kind: "source", key: "souls-a", integrity: `${TREE_EXEC}:${value}` }),
      refusal("invalid-artifact-reference", ofKind("invalid")),
    );
    assert.throws(
      () => retainedTreeDir(scope, { kind: "blob" as ArtifactKind, key: "x", integrity: `${TREE_EXEC}:${value}` }),
      refusal("invalid-artifact-reference", ofKind("invalid")),
    );
    assert.equal(existsSync(scope), false);
  },
);

test(
  "a retained tree keeps file bytes, exec bits and verbatim relative link text; its files are read-only links " +
    "into the shared layer, never to the source",
  async () => {
    const scope = tempDir();
    const source = modedTree();
    // The layer's modes: files 0444, or 0555 with the owner-exec bit; directories 0555.
    const expected = snapshotTree(source).map((row) => {
      const [type, path, mode, rest] = row.split(" ");
      if (type === "D") return `D ${path} 555`;
      if (type === "F") return `F ${path} ${(Number.parseInt(mode!, 8) & 0o100) !== 0 ? "555" : "444"} ${rest}`;
      return row;
    });
    const dirs: string[] = [];
    for (const kind of ["capture", "capability"] as const) {
      const receipt = await retainTree(scope, { kind, key: "moded", source });
      dirs.push(receipt.dir);
      assert.deepEqual(snapshotTree(receipt.dir), expected);
      // Spot checks of what the snapshot covers, so a failure says which property broke.
      assert.equal(lstatSync(join(receipt.dir, "skills/greeting.md")).mode & 0o7777, 0o444);
      assert.equal(lstatSync(join(receipt.dir, "bin/hello.mjs")).mode & 0o7777, 0o555);
      assert.equal(lstatSync(join(receipt.dir, "secret.txt")).mode & 0o7777, 0o444);
      assert.equal(lstatSync(join(receipt.dir, "private")).mode & 0o7777, 0o555);
      assert.equal(lstatSync(receipt.dir).mode & 0o7777, 0o555);
      assert.equal(lstatSync(join(receipt.dir, "odd-link.mjs")).isSymbolicLink(), true);
      assert.equal(
        spawnSync("readlink", [join(receipt.dir, "odd-link.mjs")], { encoding: "utf8" }).stdout.trim(),
        "./bin/../bin/hello.mjs",
      );
      assert.equal(
        spawnSync("readlink", [join(receipt.dir, "current.mjs")], { encoding: "utf8" }).stdout.trim(),
        "bin/hello.mjs",
      );
      // Never hard-linked to or moved from the source.
      for (const file of [
        "bin/hello.mjs",
        "skills/greeting.md",
        "private/notes.txt",
        "package.json",
        ".oats-installation.json",
      ]) {
        const stored = lstatSync(join(receipt.dir, file));
        const original = lstatSync(join(source, file));
        assert.notEqual(stored.ino, original.ino, `${file} must not be the source's file`);
        assert.equal(original.nlink, 1, `${file}'s source must not gain a link`);
        assert.deepEqual(readFileSync(join(receipt.dir, file)), readFileSync(join(source, file)));
      }
      assert.ok(existsSync(join(source, "bin/hello.mjs")), "the source is left in place");
    }
    // The two revisions share each file: the held file and one link per revision.
    const first = lstatSync(join(dirs[0]!, "bin/hello.mjs"));
    const second = lstatSync(join(dirs[1]!, "bin/hello.mjs"));
    assert.equal(first.ino, second.ino);
    assert.equal(first.nlink, 3);
  },
);

// ------------------------------------------------------------------ receipts

test(
  "a capability receipt: integrity from the lock (tree-legacy), " + "execIntegrity measured; a second retain is kept",
  async () => {
    const scope = tempDir();
    const source = fixtureCopy();
    const first = await retainCapabilityArtifact(scope, source, CAPABILITY, fixtureLock());
    assert.deepEqual(receiptKeys(first), ["dir", "execIntegrity", "files", "integrity", "key", "kind", "status"]);
    assert.equal(first.kind, "capability");
    assert.equal(first.key, CAPABILITY);
    assert.equal(first.status, "retained");
    assert.deepEqual(first.integrity, { format: TREE_LEGACY, value: LOCK_INTEGRITY });
    assert.deepEqual(first.execIntegrity, { format: TREE_EXEC, value: await execDigest(first.dir) });
    assert.deepEqual(first.execIntegrity, { format: TREE_EXEC, value: await execDigest(source) });
    assert.equal((await digestTree(first.dir, [TREE_LEGACY]))[TREE_LEGACY], LOCK_INTEGRITY);

    const before = snapshotTree(scope);
    const second = await retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, fixtureLock());
    assert.deepEqual(second, { ...withoutFiles(first), status: "kept" });
    assert.deepEqual(snapshotTree(scope), before, "keeping changes nothing");
  },
);

test(
  "retainTree without expect names the revision by the measured digest; " + "with the right expect it is kept",
  async () => {
    const scope = tempDir();
    const source = modedTree();
    const measured = await execDigest(source);
    const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
    assert.deepEqual(receiptKeys(first), ["dir", "execIntegrity", "files", "integrity", "key", "kind", "status"]);
    assert.deepEqual(first, {
      kind: "capture",
      key: "nightly",
      integrity: { format: TREE_EXEC, value: measured },
      execIntegrity: { format: TREE_EXEC, value: measured },
      dir: join(capturesRoot(scope), "nightly/tree-exec-v1", measured),
      status: "retained",
      files: { linked: 0, stored: first.files!.stored, copied: 0 },
    });
    assert.ok(first.files!.stored > 0);
    assert.deepEqual(await retainTree(scope, { kind: "capture", key: "nightly", source }), {
      ...withoutFiles(first),
      status: "kept",
    });
    assert.deepEqual(
      await retainTree(scope, { kind: "capture", key: "nightly", source, expect: `${TREE_EXEC}:${measured}` }),
      { ...withoutFiles(first), status: "kept" },
    );
    assert.deepEqual(
      await retainTree(scope, {
        kind: "capture",
        key: "nightly",
        source,
        expect: { format: TREE_EXEC, value: measured },
      }),
      { ...withoutFiles(first), status: "kept" },
    );

    // An exec bit is identity in tree-exec: flipping it makes a new revision.
    chmodSync(join(source, "bin/hello.mjs"), 0o644);
    const flipped = await retainTree(scope, { kind: "capture", key: "nightly", source });
    assert.equal(flipped.status, "retained");
    assert.notEqual(flipped.integrity.value, measured);
  },
);

test(
  "retainTree with a wrong expect refuses with integrity-mismatch " + "(expected and actual) and publishes nothing",
  async () => {
    const scope = tempDir();
    const source = fixtureCopy();
    const actual = await execDigest(source);
    const wrong = `sha256-${HEX}`;
    await assert.rejects(
      retainTree(scope, { kind: "capture", key: "nightly", source, expect: `${TREE_EXEC}:${wrong}` }),
      refusal("integrity-mismatch", ofKind("mismatch"), (error) => {
        assert.equal(error.details.expected, wrong);
        assert.equal(error.details.actual, actual);
        assert.match(error.message, /nightly/);
      }),
    );
    assert.deepEqual(listRetained(scope), []);
    assert.deepEqual(listStore(scope).staging, []);
    assert.equal(existsSync(join(capturesRoot(scope), "nightly/tree-exec-v1", wrong)), false);
    assert.equal(existsSync(join(capturesRoot(scope), "nightly/tree-exec-v1", actual)), false);

    // A capability whose lock row names another tree: the same refusal, nothing published.
    const lock = fixtureLock() as any;
    lock.capabilities[CAPABILITY].integrity = wrong;
    await assert.rejects(
      retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, lock),
      refusal("integrity-mismatch", ofKind("mismatch"), (error) => {
        assert.equal(error.details.expected, wrong);
        assert.equal(error.details.actual, LOCK_INTEGRITY);
      }),
    );
    assert.deepEqual(listRetained(scope), []);
    assert.deepEqual(listStore(scope).staging, []);
  },
);

// -------------------------------------------------------------- verification

test(
  "verification reads only the stored revision: it passes after the source " + "and the lock file are deleted",
  async () => {
    const scope = tempDir();
    const lockDir = tempDir("oats-lockfile-");
    const lockFile = join(lockDir, "oats-lock.json");
    copyFileSync(FIXTURE_LOCK, lockFile);
    const lock = readLockFile(lockFile);
    const capabilitySource = fixtureCopy();
    const captureSource = modedTree();
    const capability = await retainCapabilityArtifact(scope, capabilitySource, CAPABILITY, lock);
    const capture = await retainTree(scope, { kind: "capture", key: "nightly", source: captureSource });
    rmSync(capabilitySource, { recursive: true, force: true });
    rmSync(captureSource, { recursive: true, force: true });
    unlinkSync(lockFile);

    const verified = await verifyRetainedCapability(scope, CAPABILITY, lock);
    assert.deepEqual(verified, { ...withoutFiles(capability), status: "verified" });
    assert.deepEqual(await verifyTree(scope, { kind: "capability", key: CAPABILITY, integrity: LOCK_INTEGRITY }), {
      ...withoutFiles(capability),
      status: "verified",
    });
    assert.deepEqual(await verifyTree(scope, { kind: "capture", key: "nightly", integrity: capture.integrity }), {
      ...withoutFiles(capture),
      status: "verified",
    });
    assert.deepEqual(
      await verifyTree(scope, {
        kind: "capture",
        key: "nightly",
        integrity: `${TREE_EXEC}:${capture.integrity.value}`,
      }),
      { ...withoutFiles(capture), status: "verified" },
    );
  },
);

test(
  "verification refuses an unknown id or integrity with " +
    "artifact-not-found, and a symlink at a revision path with invalid-artifact",
  async () => {
    const scope = tempDir();
    const empty = tempDir();
    await assert.rejects(
      verifyRetainedCapability(empty, CAPABILITY, fixtureLock()),
      refusal("artifact-not-found", ofKind("missing")),
    );
    await assert.rejects(
      verifyTree(empty, { kind: "capture", key: "nightly", integrity: `${TREE_EXEC}:sha256-${HEX}` }),
      refusal("artifact-not-found", ofKind("missing")),
    );
    assert.deepEqual(readdirSync(empty), [], "verification creates nothing");

    const capability = await retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, fixtureLock());
    const capture = await retainTree(scope, { kind: "capture", key: "nightly", source: fixtureCopy() });
    const other = `sha256-${HEX}`;

    await assert.rejects(
      verifyTree(scope, { kind: "capability", key: "demo.other", integrity: LOCK_INTEGRITY }),
      refusal("artifact-not-found", ofKind("missing")),
    );
    await assert.rejects(
      verifyTree(scope, { kind: "capture", key: "other", integrity: capture.integrity }),
      refusal("artifact-not-found", ofKind("missing")),
    );
    await assert.rejects(
      verifyTree(scope, { kind: "capability", key: CAPABILITY, integrity: other }),
      refusal("artifact-not-found", ofKind("missing"), (error) => assert.equal(error.details.expected, other)),
    );
    await assert.rejects(
      verifyTree(scope, { kind: "capture", key: "nightly", integrity: `${TREE_EXEC}:${other}` }),
      refusal("artifact-not-found", ofKind("missing")),
    );
    // The tree-exec revision of a legacy-retained capability was never published.
    await assert.rejects(
      verifyTree(scope, { kind: "capability", key: CAPABILITY, integrity: capability.execIntegrity }),
      refusal("artifact-not-found", ofKind("missing")),
    );
    const lock = fixtureLock() as any;
    lock.capabilities[CAPABILITY].integrity = other;
    await assert.rejects(
      verifyRetainedCapability(scope, CAPABILITY, lock),
      refusal("artifact-not-found", ofKind("missing")),
    );

    // A symlink where a revision should be is never followed, even to a good revision.
    symlinkSync(capability.dir, join(capabilitiesRoot(scope), CAPABILITY, other));
    symlinkSync(capture.dir, join(capturesRoot(scope), "nightly/tree-exec-v1", other));
    await assert.rejects(
      verifyRetainedCapability(scope, CAPABILITY, lock),
      refusal("invalid-artifact", ofKind("invalid")),
    );
    await assert.rejects(
      verifyTree(scope, { kind: "capability", key: CAPABILITY, integrity: other }),
      refusal("invalid-artifact", ofKind("invalid")),
    );
    await assert.rejects(
      verifyTree(scope, { kind: "capture", key: "nightly", integrity: `${TREE_EXEC}:${other}` }),
      refusal("invalid-artifact", ofKind("invalid")),
    );
    assert.deepEqual(
      listRetained(scope)
        .map((entry) => entry.dir)
        .sort(),
      [capability.dir, capture.dir].sort(),
      "a symlinked revision is not listed",
    );
  },
);

// ----------------------------------------------------------- listing, fsck

async function populated(scope: string) {
  const capability = await retainCapabilityArtifact(scope, fixtureCopy(), CAPABILITY, fixtureLock());
  const execCapability = await retainTree(scope, { kind: "capability", key: CAPABILITY, source: modedTree() });
  const source = await retainTree(scope, {
    kind: "source",
    key: sourceIdentityKey("git:https://host/org/repo#souls/a"),
    source: fixtureCopy(),
  });
  const capture = await retainTree(scope, { kind: "capture", key: "nightly", source: modedTree() });
  const other = fixtureCopy();
  writeFileSync(join(other, "extra.txt"), "a second capture revision\n");
  const capture2 = await retainTree(scope, { kind: "capture", key: "nightly", source: other });
  return { capability, execCapability, source, capture, capture2 };
}

test("listRetained lists every revision across kinds and formats", async () => {
  const scope = tempDir();
  const receipts = await populated(scope);
  const entry = (receipt: ArtifactReceipt) => ({
    kind: receipt.kind,
    key: receipt.key,
    integrity: receipt.integrity,
    dir: receipt.dir,
  });
  const expected = Object.values(receipts).map(entry);
  const listed = listRetained(scope);
  const byDir = (a: { dir: string }, b: { dir: string }) => a.dir.localeCompare(b.dir);
  assert.deepEqual([...listed].sort(byDir), [...expected].sort(byDir));
  assert.equal(listed.length, 5);
  assert.deepEqual(listRetained(tempDir()), [], "an empty scope has nothing retained");
});

test(
  "fsck verifies every revision, reports counts, outcomes, staging and " + "unexpected entries, and repairs nothing",
  async () => {
    const scope = tempDir();
    const receipts = await populated(scope);
    const clean = await fsck(scope);
    assert.equal(clean.checked, 5);
    assert.equal(clean.ok, 5);
    assert.equal(clean.damaged, 0);
    assert.ok(clean.outcomes.every((outcome) => outcome.ok && outcome.error === undefined));
    assert.deepEqual(clean.staging, []);
    assert.deepEqual(clean.unexpected, []);

    // Damage one revision, leave debris of every sort. Its files are links to held files every revision shares:
    // the damaged file is a copy put in place of the link, so only this revision holds it.
    const damagedFile = join(receipts.capture.dir, "skills/greeting.md");
    chmodSync(join(receipts.capture.dir, "skills"), 0o755);
    const original = readFileSync(damagedFile);
    unlinkSync(damagedFile);
    writeFileSync(damagedFile, original);
    appendFileSync(damagedFile, "tampered\n");
    const removedFrom = join(receipts.source.dir, "package.json");
    unlinkSync(removedFrom);
    const staging = join(
      capturesRoot(scope),
      "nightly/tree-exec-v1",
      `.staging-${hostTag()}-999999999-${randomBytes(6).toString("hex")}`,
    );
    mkdirSync(staging);
    const junkFile = join(capabilitiesRoot(scope), CAPABILITY, "notes.txt");
    writeFileSync(junkFile, "not a revision\n");
    const badKey = join(capturesRoot(scope), "Not-An-Id");
    mkdirSync(badKey);
    const symlinked = join(capabilitiesRoot(scope), CAPABILITY, `sha256-${HEX}`);
    symlinkSync(receipts.capability.dir, symlinked);

    const before = snapshotTree(scope);
    const report = await fsck(scope);
    assert.deepEqual(snapshotTree(scope), before, "fsck changes nothing, repairs nothing");

    assert.equal(report.checked, 5);
    assert.equal(report.ok, 3);
    assert.equal(report.damaged, 2);
    const outcome = (receipt: ArtifactReceipt) => report.outcomes.find((candidate) => candidate.dir === receipt.dir)!;
    for (const receipt of [receipts.capability, receipts.execCapability, receipts.capture2]) {
      assert.equal(outcome(receipt).ok, true);
      assert.deepEqual(outcome(receipt).integrity, receipt.integrity);
      assert.equal(outcome(receipt).kind, receipt.kind);
    }
    for (const receipt of [receipts.capture, receipts.source]) {
      assert.equal(outcome(receipt).ok, false);
      assert.equal(outcome(receipt).error?.code, "integrity-mismatch");
      assert.equal(outcome(receipt).error?.kind, "mismatch");
      assert.equal(outcome(receipt).error?.details.expected, receipt.integrity.value);
      assert.notEqual(outcome(receipt).error?.details.actual, receipt.integrity.value);
    }
    assert.deepEqual(report.staging, [staging]);
    assert.deepEqual([...report.unexpected].sort(), [junkFile, badKey, symlinked].sort());

    // Still damaged afterwards: verify refuses; nothing was repaired.
    await assert.rejects(verifyTree(scope, receipts.capture), refusal("integrity-mismatch", ofKind("mismatch")));
    assert.match(readFileSync(damagedFile, "utf8"), /tampered/);
    assert.equal(existsSync(removedFrom), false);
  },
);

// ------------------------------------------------------------------- sources

test("a source is keyed by the 64 hex of the oats.json.v1 digest of its qualified identity", async () => {
  const identity = "git:https://host/org/repo#souls/a";
  const key = sourceIdentityKey(identity);
  assert.match(key, /^[0-9a-f]{64}$/);
  assert.equal(`sha256-${key}`, jsonDigest(identity));
  // Independently: canonical JSON of a string is its JSON text and one LF.
  assert.equal(
    key,
    createHash("sha256")
      .update(`${JSON.stringify(identity)}\n`)
      .digest("hex"),
  );
  assert.notEqual(sourceIdentityKey("git:https://host/org/repo#souls/b"), key);

  const scope = tempDir();
  const receipt = await retainTree(scope, { kind: "source", key, source: fixtureCopy() });
  assert.equal(receipt.key, key);
  assert.equal(receipt.dir, join(sourcesRoot(scope), key, "tree-exec-v1", receipt.integrity.value));
  assert.deepEqual(await verifyTree(scope, { kind: "source", key, integrity: receipt.integrity }), {
    ...withoutFiles(receipt),
    status: "verified",
  });

  // A source is never keyed by a name, an abbreviated or uppercase key, or the identity itself.
  for (const bad of ["souls-a", key.slice(0, 63), key.toUpperCase(), identity, `sha256-${key}`]) {
    const fresh = tempDir();
    await assert.rejects(
      retainTree(fresh, { kind: "source", key: bad, source: fixtureCopy() }),
      refusal("invalid-artifact-reference", ofKind("invalid")),
    );
    assert.deepEqual(readdirSync(fresh), [], "nothing is created for a refused key");
  }
});
