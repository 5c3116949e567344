/**
 * Bad input (missing, unreadable, malformed and hostile inputs), lock refusals, provenance and prototype
 * safety. Every refusal is checked for its typed code, kind and details, and
 * for leaving the store byte-for-byte as it was: a snapshot of every entry's
 * type, mode, content hash and link text before and after, no staging
 * anywhere, and nothing at all created for a refused first request.
 */
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
  cpSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { OatsError } from "../src/core/errors.js";
import type { JsonValue } from "../src/core/index.js";
import {
  TREE_EXEC,
  TREE_LEGACY,
  digestTree,
  listRetained,
  retainCapabilityArtifact,
  retainTree,
  retainedCapabilityDir,
  retainedTreeDir,
  verifyRetainedCapability,
  verifyTree,
  type ArtifactReceipt,
  type IntegrityInput,
} from "../src/retention/index.js";
import { fixtureCopy, fixtureLock, snapshotTree, tempDir } from "./helpers.js";
import { contractKind, hasMessage, refusal, type Details } from "./support/refusals.js";

const ID = "demo.hello";
const PKG = "demo.hello-pkg";
const FIXTURE_LEGACY = "sha256-a79ca625eee1167f6d71dc500d966693a57225fa92e0bb5187973f3ca7695814";

function stagingRows(scope: string): string[] {
  return snapshotTree(scope).filter((row) => /(^|\/)\.(staging|lock)-/.test(row.split(" ")[1] ?? ""));
}

/** `action` is refused with `code`, and the scope is byte-for-byte what it was, with no staging. */
async function refusedUnchanged(
  scope: string,
  action: () => Promise<unknown>,
  code: string,
  details: Details = {},
): Promise<OatsError> {
  const before = snapshotTree(scope);
  let caught: unknown;
  await assert.rejects(action(), (error) => {
    caught = error;
    return refusal(code, details, contractKind, hasMessage)(error);
  });
  assert.deepEqual(snapshotTree(scope), before, "the store changed although the request was refused");
  assert.deepEqual(stagingRows(scope), []);
  return caught as OatsError;
}

/** A refused request on a scope that has nothing yet creates nothing. */
async function refusedOnFreshScope(
  action: (scope: string) => Promise<unknown>,
  code: string,
  details: Details = {},
): Promise<OatsError> {
  const scope = tempDir("oats-scope-");
  const error = await refusedUnchanged(scope, () => action(scope), code, details);
  assert.deepEqual(snapshotTree(scope), [], "a refused first request created something");
  return error;
}

function refusedSync(action: () => unknown, code: string, details: Details = {}): void {
  assert.throws(action, refusal(code, details, contractKind, hasMessage));
}

// ---------------------------------------------------------------------------
// Locks and sources

type LockObject = {
  lockfileVersion?: JsonValue;
  packages: Record<string, Record<string, JsonValue>>;
  capabilities: Record<string, Record<string, JsonValue>>;
  [key: string]: JsonValue | undefined;
};

const lock = (): LockObject => fixtureLock() as LockObject;

/** A lock whose capability row `id` carries the legacy digest of `source`. */
async function lockFor(source: string, base: LockObject = lock(), id = ID): Promise<LockObject> {
  const digest = (await digestTree(source, [TREE_LEGACY]))[TREE_LEGACY]!;
  base.capabilities[id]!.integrity = digest;
  return base;
}

function provenanceOf(source: string): Record<string, unknown> {
  return JSON.parse(readFileSync(join(source, ".oats-installation.json"), "utf8")) as Record<string, unknown>;
}

function writeProvenance(source: string, fields: Record<string, unknown>): void {
  writeFileSync(
    join(source, ".oats-installation.json"),
    `${JSON.stringify({ ...provenanceOf(source), ...fields }, null, 2)}\n`,
  );
}

interface Populated {
  scope: string;
  legacy: ArtifactReceipt;
  exec: ArtifactReceipt;
  capture: ArtifactReceipt;
}

/** A scope holding the fixture as a lock-named capability revision, a tree-exec capability revision and a capture. */
async function populatedScope(): Promise<Populated> {
  const scope = tempDir("oats-scope-");
  const legacy = await retainCapabilityArtifact(scope, fixtureCopy(), ID, lock());
  const exec = await retainTree(scope, { kind: "capability", key: ID, source: fixtureCopy() });
  const capture = await retainTree(scope, { kind: "capture", key: "cap", source: fixtureCopy() });
  return { scope, legacy, exec, capture };
}

/** Give every regular file under `dir` an inode of its own (same bytes and mode), and the directories owner write. */
function unshareTree(dir: string): void {
  chmodSync(dir, 0o755);
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const stats = lstatSync(path);
    if (stats.isDirectory()) unshareTree(path);
    else if (stats.isFile()) {
      const bytes = readFileSync(path);
      unlinkSync(path);
      writeFileSync(path, bytes, { mode: stats.mode & 0o7777 });
      chmodSync(path, stats.mode & 0o7777);
    }
  }
}

const artifacts = (scope: string, kind = "capabilities") => join(scope, ".agents", kind, "artifacts");

// ---------------------------------------------------------------------------

describe("baseline: the fixture retains and verifies", () => {
  test("retain, keep, verify, with their receipts", async () => {
    const { scope, legacy, exec, capture } = await populatedScope();
    assert.equal(legacy.status, "retained");
    assert.deepEqual(legacy.integrity, { format: TREE_LEGACY, value: FIXTURE_LEGACY });
    assert.equal(legacy.dir, join(artifacts(scope), ID, FIXTURE_LEGACY));
    assert.deepEqual(legacy.execIntegrity, exec.integrity);
    assert.equal(exec.dir, join(artifacts(scope), ID, "tree-exec-v1", exec.integrity.value));
    assert.equal(capture.dir, join(artifacts(scope, "captures"), "cap", "tree-exec-v1", exec.integrity.value));
    assert.equal(readFileSync(join(artifacts(scope), ".gitignore"), "utf8"), "*\n");
    const before = snapshotTree(scope);
    assert.equal((await retainCapabilityArtifact(scope, fixtureCopy(), ID, lock())).status, "kept");
    assert.equal(
      (await retainTree(scope, { kind: "capture", key: "cap", source: fixtureCopy(), expect: capture.integrity }))
        .status,
      "kept",
    );
    const { files: _files, ...published } = capture;
    assert.deepEqual(await retainTree(scope, { kind: "capture", key: "cap", source: fixtureCopy() }), {
      ...published,
      status: "kept",
    });
    assert.equal((await verifyRetainedCapability(scope, ID, lock())).status, "verified");
    assert.equal(
      (await verifyTree(scope, { kind: "capture", key: "cap", integrity: capture.integrity })).status,
      "verified",
    );
    assert.deepEqual(snapshotTree(scope), before);
    assert.deepEqual(stagingRows(scope), []);
  });
});

// ---------------------------------------------------------------------------

describe("identifiers", () => {
  const bad: [string, string][] = [
    ["../x", "../x"],
    ["X", "X"],
    ["a/b", "a/b"],
    ["empty", ""],
    ["215 characters", "a".repeat(215)],
    [".hidden", ".staging-x"],
    ["leading dash", "-x"],
    ["space", "a b"],
    ["non-ASCII", "é"],
    ["..", ".."],
  ];
  for (const [name, id] of bad) {
    test(`id ${name} is refused everywhere, creating nothing`, async () => {
      await refusedOnFreshScope(
        (scope) => retainCapabilityArtifact(scope, fixtureCopy(), id, lock()),
        "invalid-artifact-reference",
        { "capability id": id },
      );
      for (const kind of ["capability", "capture"] as const) {
        await refusedOnFreshScope(
          (scope) => retainTree(scope, { kind, key: id, source: fixtureCopy() }),
          "invalid-artifact-reference",
        );
      }
      // A lock that carries a row under the bad id is refused as a lock, before the id could name a path.
      const withRow = lock();
      withRow.capabilities[id] = { ...withRow.capabilities[ID]! };
      await refusedOnFreshScope((scope) => retainCapabilityArtifact(scope, fixtureCopy(), ID, withRow), "invalid-lock");

      const { scope, capture } = await populatedScope();
      await refusedUnchanged(
        scope,
        () => verifyTree(scope, { kind: "capture", key: id, integrity: capture.integrity }),
        "invalid-artifact-reference",
      );
      await refusedUnchanged(
        scope,
        () => verifyTree(scope, { kind: "capability", key: id, integrity: FIXTURE_LEGACY }),
        "invalid-artifact-reference",
      );
      await refusedUnchanged(scope, () => verifyRetainedCapability(scope, id, lock()), "invalid-artifact-reference");
      refusedSync(() => retainedCapabilityDir(scope, id, FIXTURE_LEGACY), "invalid-artifact-reference");
      refusedSync(
        () => retainedTreeDir(scope, { kind: "capture", key: id, integrity: capture.integrity }),
        "invalid-artifact-reference",
      );
    });
  }

  test("an id of 214 characters is accepted, in a lock and in the store", async () => {
    const id = `${"a".repeat(213)}z`;
    assert.equal(id.length, 214);
    const scope = tempDir("oats-scope-");
    const receipt = await retainTree(scope, { kind: "capture", key: id, source: fixtureCopy() });
    assert.equal(receipt.status, "retained");
    assert.equal(receipt.dir, join(artifacts(scope, "captures"), id, "tree-exec-v1", receipt.integrity.value));
    assert.equal(
      (await verifyTree(scope, { kind: "capture", key: id, integrity: receipt.integrity })).status,
      "verified",
    );

    const source = fixtureCopy();
    writeProvenance(source, { capability: id });
    const locked = lock();
    locked.capabilities[id] = locked.capabilities[ID]!;
    delete locked.capabilities[ID];
    await lockFor(source, locked, id);
    const capability = await retainCapabilityArtifact(scope, source, id, locked);
    assert.equal(capability.status, "retained");
    assert.equal((await verifyRetainedCapability(scope, id, locked)).status, "verified");
  });

  test("a source key must be the 64-hex identity key", async () => {
    for (const key of ["../x", "a".repeat(63), "A".repeat(64), "demo"]) {
      await refusedOnFreshScope(
        (scope) => retainTree(scope, { kind: "source", key, source: fixtureCopy() }),
        "invalid-artifact-reference",
      );
    }
  });

  test("an unknown kind is refused", async () => {
    await refusedOnFreshScope(
      (scope) => retainTree(scope, { kind: "blob" as never, key: "x", source: fixtureCopy() }),
      "invalid-artifact-reference",
    );
  });
});

// ---------------------------------------------------------------------------

describe("integrities", () => {
  test(
    "abbreviated, uppercase, unknown-format or wrong-format integrities are " + "refused by retainTree and verifyTree",
    async () => {
      const { scope, capture } = await populatedScope();
      const value = capture.integrity.value;
      const hex = value.slice("sha256-".length);
      // Malformed on purpose, some of them not even of IntegrityInput's shape: the refusal is what is tested.
      const bad = [
        `${TREE_EXEC}:sha256-${hex.slice(0, 16)}`, // a true prefix of the stored revision
        `${TREE_EXEC}:sha256-${hex.slice(0, 63)}`,
        `${TREE_EXEC}:sha256-${hex.toUpperCase()}`,
        `${TREE_EXEC}:SHA256-${hex}`,
        `oats.tree-exec.v2:${value}`,
        { format: "oats.tree.v9", value },
        { format: TREE_EXEC, value: `sha256-${hex.slice(0, 7)}` },
        `oats.json.v1:${value}`, // a real format, but not one that names a tree
        `${TREE_LEGACY}:${value}`, // legacy names only lock-named capability revisions
        value, // bare means legacy
        "",
        null,
      ];
      for (const integrity of bad) {
        await refusedUnchanged(
          scope,
          () => verifyTree(scope, { kind: "capture", key: "cap", integrity: integrity as IntegrityInput }),
          "invalid-artifact-reference",
        );
        await refusedOnFreshScope(
          (fresh) =>
            retainTree(fresh, {
              kind: "capture",
              key: "cap",
              source: fixtureCopy(),
              expect: integrity as IntegrityInput,
            }),
          "invalid-artifact-reference",
        );
        await refusedUnchanged(
          scope,
          () =>
            retainTree(scope, {
              kind: "capture",
              key: "cap",
              source: fixtureCopy(),
              expect: integrity as IntegrityInput,
            }),
          "invalid-artifact-reference",
        );
      }
      // Capabilities may be named by a legacy integrity, but abbreviated or uppercase ones are refused all the same.
      for (const integrity of [
        FIXTURE_LEGACY.slice(0, 20),
        FIXTURE_LEGACY.toUpperCase(),
        `${TREE_LEGACY}:${FIXTURE_LEGACY.slice(0, 70)}`,
      ]) {
        await refusedUnchanged(
          scope,
          () => verifyTree(scope, { kind: "capability", key: ID, integrity }),
          "invalid-artifact-reference",
        );
        refusedSync(() => retainedCapabilityDir(scope, ID, integrity), "invalid-artifact-reference");
      }
    },
  );
});

// ---------------------------------------------------------------------------

interface SourceDefect {
  name: string;
  make: (source: string) => void;
  code: string;
  details: Details;
  /** Whether the defective tree can still be digested (so a lock can name it exactly). */
  digestible: boolean;
}

const SOURCE_DEFECTS: SourceDefect[] = [
  {
    name: "absolute symlink pointing into the source itself",
    make: (source) => symlinkSync(join(source, "bin/hello.mjs"), join(source, "abs.mjs")),
    code: "artifact-not-contained",
    details: { reason: "absolute-symlink", path: "abs.mjs" },
    digestible: true,
  },
  {
    name: "absolute symlink pointing outside",
    make: (source) => symlinkSync("/etc/hostname", join(source, "skills/host")),
    code: "artifact-not-contained",
    details: { reason: "absolute-symlink", path: "skills/host" },
    digestible: true,
  },
  {
    name: "escaping relative symlink",
    make: (source) => symlinkSync("../../outside.txt", join(source, "skills/out.md")),
    code: "artifact-not-contained",
    details: { reason: "escaping-symlink", path: "skills/out.md", target: "../../outside.txt" },
    digestible: true,
  },
  {
    name: "relative symlink that leaves and re-enters the tree",
    make: (source) => symlinkSync("../payload/oats.json", join(source, "reenter.json")),
    code: "artifact-not-contained",
    details: { reason: "escaping-symlink", path: "reenter.json" },
    digestible: true,
  },
  {
    name: "broken symlink",
    make: (source) => symlinkSync("bin/missing.mjs", join(source, "broken.mjs")),
    code: "invalid-artifact",
    details: { reason: "broken-symlink", path: "broken.mjs" },
    digestible: true,
  },
  {
    name: "symlink loop",
    make: (source) => {
      symlinkSync("loop-b", join(source, "loop-a"));
      symlinkSync("loop-a", join(source, "loop-b"));
    },
    code: "invalid-artifact",
    details: { reason: "symlink-loop" },
    digestible: true,
  },
  {
    name: "symlink to itself",
    make: (source) => symlinkSync("self", join(source, "bin/self")),
    code: "invalid-artifact",
    details: { reason: "symlink-loop", path: "bin/self" },
    digestible: true,
  },
  {
    name: "FIFO",
    make: (source) => execFileSync("mkfifo", [join(source, "skills/pipe")]),
    code: "invalid-artifact",
    details: { reason: "special-file", path: "skills/pipe" },
    digestible: false,
  },
  {
    name: "non-UTF-8 file name",
    make: (source) => writeFileSync(Buffer.concat([Buffer.from(`${source}/skills/`), Buffer.from([0xff, 0xfe])]), "x"),
    code: "invalid-artifact",
    details: { reason: "non-utf8-name" },
    digestible: false,
  },
  {
    name: "non-UTF-8 symlink target",
    make: (source) => symlinkSync(Buffer.from([0x78, 0xff]), join(source, "bad-target")),
    code: "invalid-artifact",
    details: { reason: "non-utf8-name" },
    digestible: false,
  },
];

/** snapshotTree cannot name a non-UTF-8 entry; find(1) can, by type, mode, size and link text. */
function sourceSnapshot(dir: string): string[] {
  try {
    return snapshotTree(dir);
  } catch {
    return execFileSync("find", [dir, "-printf", "%P %y %m %s %l\\n"]).toString("latin1").split("\n").sort();
  }
}

describe("source trees", () => {
  for (const defect of SOURCE_DEFECTS) {
    test(`${defect.name} is refused before anything is written`, async () => {
      const source = fixtureCopy();
      defect.make(source);
      const before = sourceSnapshot(source);
      // A lock naming exactly this tree, where it can be digested: the refusal can then only come from the source
      // check.
      const named = defect.digestible ? await lockFor(source) : lock();
      await refusedOnFreshScope(
        (scope) => retainCapabilityArtifact(scope, source, ID, named),
        defect.code,
        defect.details,
      );
      await refusedOnFreshScope(
        (scope) => retainTree(scope, { kind: "capture", key: "cap", source }),
        defect.code,
        defect.details,
      );
      await refusedOnFreshScope(
        (scope) => retainTree(scope, { kind: "source", key: "f".repeat(64), source }),
        defect.code,
        defect.details,
      );
      const { scope } = await populatedScope();
      await refusedUnchanged(
        scope,
        () => retainCapabilityArtifact(scope, source, ID, named),
        defect.code,
        defect.details,
      );
      await refusedUnchanged(
        scope,
        () => retainTree(scope, { kind: "capability", key: ID, source }),
        defect.code,
        defect.details,
      );
      assert.deepEqual(sourceSnapshot(source), before, "the source was changed");
    });
  }

  test("relative symlinks that stay inside (also through another link) are retained verbatim", async () => {
    const source = fixtureCopy();
    symlinkSync("skills", join(source, "skills-link"));
    symlinkSync("../skills-link/greeting.md", join(source, "bin/greeting.md"));
    symlinkSync("./bin/../oats.json", join(source, "odd-spelling.json"));
    const scope = tempDir("oats-scope-");
    const receipt = await retainCapabilityArtifact(scope, source, ID, await lockFor(source));
    // Bytes, exec bits and link text as the source has them; the store's modes are the shared layer's, read-only.
    const readOnly = snapshotTree(source).map((row) => {
      const [type, path, mode, rest] = row.split(" ");
      if (type === "D") return `D ${path} 555`;
      if (type === "F") return `F ${path} ${(Number.parseInt(mode!, 8) & 0o100) !== 0 ? "555" : "444"} ${rest}`;
      return row;
    });
    assert.deepEqual(snapshotTree(receipt.dir), readOnly);
  });

  test("a missing source, or a file as source, is invalid-input", async () => {
    const missing = join(tempDir(), "nope");
    await refusedOnFreshScope(
      (scope) => retainTree(scope, { kind: "capture", key: "cap", source: missing }),
      "invalid-input",
    );
    await refusedOnFreshScope((scope) => retainCapabilityArtifact(scope, missing, ID, lock()), "invalid-input");
    const file = join(tempDir(), "file");
    writeFileSync(file, "x");
    await refusedOnFreshScope(
      (scope) => retainTree(scope, { kind: "capture", key: "cap", source: file }),
      "invalid-input",
    );
  });
});

// ---------------------------------------------------------------------------

describe("a source that is or contains the store", () => {
  test("source = scope, scope/.agents, the store root, or the capability id directory", async () => {
    const { scope } = await populatedScope();
    cpSync(fixtureCopy(), scope, { recursive: true, verbatimSymlinks: true }); // the scope looks like a payload too
    const sources = [
      scope,
      join(scope, ".agents"),
      join(scope, ".agents/capabilities"),
      artifacts(scope),
      join(artifacts(scope), ID),
    ];
    for (const source of sources) {
      const details = { reason: "source-contains-store" };
      await refusedUnchanged(
        scope,
        () => retainCapabilityArtifact(scope, source, ID, lock()),
        "invalid-input",
        details,
      );
      await refusedUnchanged(
        scope,
        () => retainTree(scope, { kind: "capability", key: ID, source }),
        "invalid-input",
        details,
      );
    }
    // The tree-exec revisions directory of the key being written.
    const execParent = join(artifacts(scope, "captures"), "cap", "tree-exec-v1");
    await refusedUnchanged(
      scope,
      () => retainTree(scope, { kind: "capture", key: "cap", source: execParent }),
      "invalid-input",
      { reason: "source-contains-store" },
    );
    // Reached through a symlink, it is the same directory.
    const viaLink = join(tempDir(), "link-to-scope");
    symlinkSync(scope, viaLink);
    await refusedUnchanged(
      scope,
      () => retainTree(scope, { kind: "capture", key: "cap", source: viaLink }),
      "invalid-input",
      { reason: "source-contains-store" },
    );
    await refusedUnchanged(
      scope,
      () => retainTree(viaLink, { kind: "capture", key: "cap", source: scope }),
      "invalid-input",
      { reason: "source-contains-store" },
    );
  });

  test("source = scope before any store exists: refused, nothing created", async () => {
    const scope = tempDir("oats-scope-");
    cpSync(fixtureCopy(), scope, { recursive: true, verbatimSymlinks: true });
    await refusedUnchanged(scope, () => retainCapabilityArtifact(scope, scope, ID, lock()), "invalid-input", {
      reason: "source-contains-store",
    });
    await refusedUnchanged(
      scope,
      () => retainTree(scope, { kind: "capture", key: "cap", source: scope }),
      "invalid-input",
      { reason: "source-contains-store" },
    );
    assert.equal(existsSync(join(scope, ".agents")), false);
  });
});

// ---------------------------------------------------------------------------

describe("the scope and the store's own components", () => {
  test("a missing scope is artifact-not-found (reason scope-missing) and is not created", async () => {
    const scope = join(tempDir(), "missing-scope");
    const { capture } = await populatedScope();
    const attempts: (() => Promise<unknown>)[] = [
      () => retainCapabilityArtifact(scope, fixtureCopy(), ID, lock()),
      () => retainTree(scope, { kind: "capture", key: "cap", source: fixtureCopy() }),
      () => verifyTree(scope, { kind: "capture", key: "cap", integrity: capture.integrity }),
      () => verifyRetainedCapability(scope, ID, lock()),
      async () => listRetained(scope),
    ];
    for (const attempt of attempts) {
      await assert.rejects(
        attempt(),
        refusal("artifact-not-found", { scope, reason: "scope-missing" }, contractKind, hasMessage),
      );
      assert.equal(existsSync(scope), false);
    }
    const file = join(tempDir(), "scope-file");
    writeFileSync(file, "x");
    await assert.rejects(
      retainTree(file, { kind: "capture", key: "cap", source: fixtureCopy() }),
      refusal("invalid-artifact-store", contractKind, hasMessage),
    );
  });

  const COMPONENTS = [
    ".agents",
    ".agents/capabilities",
    ".agents/capabilities/artifacts",
    `.agents/capabilities/artifacts/${ID}`,
    `.agents/capabilities/artifacts/${ID}/tree-exec-v1`,
  ];
  for (const component of COMPONENTS) {
    for (const replacement of ["symlink", "file"] as const) {
      test(`${component} replaced by a ${replacement} is invalid-artifact-store`, async () => {
        const { scope, exec } = await populatedScope();
        const path = join(scope, component);
        const moved = `${path}-real`;
        renameSync(path, moved);
        // A symlink to the real (intact) directory: following it would find a valid store.
        if (replacement === "symlink") symlinkSync(moved.slice(dirname(path).length + 1), path);
        else writeFileSync(path, "not a directory\n");
        const details = { path, reason: replacement === "symlink" ? "symlink" : "not-a-directory" };

        const execRef = { kind: "capability" as const, key: ID, integrity: exec.integrity };
        await refusedUnchanged(
          scope,
          () => retainTree(scope, { kind: "capability", key: ID, source: fixtureCopy(), expect: exec.integrity }),
          "invalid-artifact-store",
          details,
        );
        await refusedUnchanged(
          scope,
          () => retainTree(scope, { kind: "capability", key: ID, source: fixtureCopy() }),
          "invalid-artifact-store",
          details,
        );
        await refusedUnchanged(scope, () => verifyTree(scope, execRef), "invalid-artifact-store", details);
        if (!component.endsWith("tree-exec-v1")) {
          // The lock-named revision lives directly under <id>; tree-exec-v1 is not on its path.
          await refusedUnchanged(
            scope,
            () => retainCapabilityArtifact(scope, fixtureCopy(), ID, lock()),
            "invalid-artifact-store",
            details,
          );
          await refusedUnchanged(
            scope,
            () => verifyRetainedCapability(scope, ID, lock()),
            "invalid-artifact-store",
            details,
          );
          await refusedUnchanged(
            scope,
            () => verifyTree(scope, { kind: "capability", key: ID, integrity: FIXTURE_LEGACY }),
            "invalid-artifact-store",
            details,
          );
        }
      });
    }
  }

  test("a store component replaced on the way to a key not yet retained is refused too", async () => {
    const { scope } = await populatedScope();
    const path = join(scope, ".agents/capabilities");
    renameSync(path, `${path}-real`);
    symlinkSync("capabilities-real", path);
    await refusedUnchanged(
      scope,
      () => retainTree(scope, { kind: "capability", key: "other", source: fixtureCopy() }),
      "invalid-artifact-store",
      { path },
    );
  });

  const GITIGNORES: [string, (path: string) => void][] = [
    ["empty", (path) => writeFileSync(path, "")],
    ["without newline", (path) => writeFileSync(path, "*")],
    ["with a comment", (path) => writeFileSync(path, "# mine\n*\n")],
    ["with CRLF", (path) => writeFileSync(path, "*\r\n")],
    ["with an extra line", (path) => writeFileSync(path, "*\n!keep\n")],
    ["a directory", (path) => mkdirSync(path)],
    // Opened non-blocking: a FIFO is refused, not waited on.
    ["a FIFO", (path) => execFileSync("mkfifo", [path])],
    [
      "a symlink to a file of the right bytes",
      (path) => {
        writeFileSync(`${path}-elsewhere`, "*\n");
        symlinkSync(".gitignore-elsewhere", path);
      },
    ],
  ];
  for (const [name, make] of GITIGNORES) {
    test(`a .gitignore ${name} is invalid-artifact-store`, async () => {
      const { scope, exec } = await populatedScope();
      const path = join(artifacts(scope), ".gitignore");
      unlinkSync(path);
      make(path);
      await refusedUnchanged(
        scope,
        () => retainCapabilityArtifact(scope, fixtureCopy(), ID, lock()),
        "invalid-artifact-store",
        { path },
      );
      await refusedUnchanged(
        scope,
        () => retainTree(scope, { kind: "capability", key: "other", source: fixtureCopy() }),
        "invalid-artifact-store",
        { path },
      );
      await refusedUnchanged(scope, () => verifyRetainedCapability(scope, ID, lock()), "invalid-artifact-store", {
        path,
      });
      await refusedUnchanged(
        scope,
        () => verifyTree(scope, { kind: "capability", key: ID, integrity: exec.integrity }),
        "invalid-artifact-store",
        { path },
      );
      // The captures store has its own .gitignore and is unaffected.
      assert.equal(
        (await verifyTree(scope, { kind: "capture", key: "cap", integrity: exec.integrity })).status,
        "verified",
      );
    });
  }
});

// ---------------------------------------------------------------------------

describe("something already at the destination", () => {
  /** A store whose only content is the managed .gitignore and an empty directory at `dir`. */
  function storeWithEmptyDir(kindDir: string, relative: string): { scope: string; dir: string } {
    const scope = tempDir("oats-scope-");
    mkdirSync(artifacts(scope, kindDir), { recursive: true });
    writeFileSync(join(artifacts(scope, kindDir), ".gitignore"), "*\n");
    const dir = join(artifacts(scope, kindDir), relative);
    mkdirSync(dir, { recursive: true });
    return { scope, dir };
  }

  test("an empty directory where the lock-named revision goes is refused, never replaced", async () => {
    const { scope, dir } = storeWithEmptyDir("capabilities", `${ID}/${FIXTURE_LEGACY}`);
    const error = await refusedUnchanged(
      scope,
      () => retainCapabilityArtifact(scope, fixtureCopy(), ID, lock()),
      "integrity-mismatch",
      {
        expected: FIXTURE_LEGACY,
        dir,
        reason: "damaged-revision",
      },
    );
    assert.equal(error.details.actual, (await digestTree(dir, [TREE_LEGACY]))[TREE_LEGACY]);
    await refusedUnchanged(scope, () => verifyRetainedCapability(scope, ID, lock()), "integrity-mismatch", {
      expected: FIXTURE_LEGACY,
      dir,
    });
  });

  test("an empty directory where a tree-exec revision goes is refused, with or without expect", async () => {
    const exec = (await digestTree(fixtureCopy(), [TREE_EXEC]))[TREE_EXEC]!;
    for (const kind of ["capture", "capability"] as const) {
      const { scope, dir } = storeWithEmptyDir(
        kind === "capture" ? "captures" : "capabilities",
        `k/tree-exec-v1/${exec}`,
      );
      const details = { expected: exec, dir, reason: "damaged-revision" };
      await refusedUnchanged(
        scope,
        () => retainTree(scope, { kind, key: "k", source: fixtureCopy(), expect: `${TREE_EXEC}:${exec}` }),
        "integrity-mismatch",
        details,
      );
      await refusedUnchanged(
        scope,
        () => retainTree(scope, { kind, key: "k", source: fixtureCopy() }),
        "integrity-mismatch",
        details,
      );
      await refusedUnchanged(
        scope,
        () => verifyTree(scope, { kind, key: "k", integrity: `${TREE_EXEC}:${exec}` }),
        "integrity-mismatch",
        details,
      );
    }
  });

  test("a symlink or a file at the destination is refused, not followed", async () => {
    const { scope, legacy, capture } = await populatedScope();
    // Point a second key's revision name at the first key's intact revision.
    const linked = join(artifacts(scope, "captures"), "other", "tree-exec-v1", capture.integrity.value);
    mkdirSync(dirname(linked), { recursive: true });
    symlinkSync(capture.dir, linked);
    await refusedUnchanged(
      scope,
      () => retainTree(scope, { kind: "capture", key: "other", source: fixtureCopy(), expect: capture.integrity }),
      "invalid-artifact",
      { dir: linked },
    );
    await refusedUnchanged(
      scope,
      () => verifyTree(scope, { kind: "capture", key: "other", integrity: capture.integrity }),
      "invalid-artifact",
      { dir: linked },
    );
    // A file where the lock-named revision goes.
    rmSync(legacy.dir, { recursive: true });
    writeFileSync(legacy.dir, "");
    await refusedUnchanged(
      scope,
      () => retainCapabilityArtifact(scope, fixtureCopy(), ID, lock()),
      "invalid-artifact",
      { dir: legacy.dir },
    );
    await refusedUnchanged(scope, () => verifyRetainedCapability(scope, ID, lock()), "invalid-artifact", {
      dir: legacy.dir,
    });
  });
});

// ---------------------------------------------------------------------------

const DAMAGES: [string, (dir: string) => void, { legacyVisible: boolean }][] = [
  [
    "a byte changed",
    (dir) => {
      const path = join(dir, "oats.json");
      const bytes = readFileSync(path);
      bytes[3] = bytes[3]! ^ 0x20;
      writeFileSync(path, bytes);
    },
    { legacyVisible: true },
  ],
  ["a file added", (dir) => writeFileSync(join(dir, "skills/extra.md"), ""), { legacyVisible: true }],
  ["a file removed", (dir) => unlinkSync(join(dir, "skills/greeting.md")), { legacyVisible: true }],
  ["a file truncated", (dir) => writeFileSync(join(dir, "package.json"), ""), { legacyVisible: true }],
  [
    "a symlink retargeted",
    (dir) => {
      unlinkSync(join(dir, "current.mjs"));
      symlinkSync("oats.json", join(dir, "current.mjs"));
    },
    { legacyVisible: true },
  ],
  [
    "a file replaced by a symlink to identical bytes",
    (dir) => {
      renameSync(join(dir, "package.json"), join(dir, "skills/package.json"));
      symlinkSync("skills/package.json", join(dir, "package.json"));
    },
    { legacyVisible: true },
  ],
  [
    "an exec bit flipped",
    (dir) => {
      const path = join(dir, "bin/hello.mjs");
      chmodSync(path, statSync(path).mode ^ 0o100);
    },
    { legacyVisible: false },
  ],
];

describe("a damaged existing revision", () => {
  for (const [name, damage, { legacyVisible }] of DAMAGES) {
    test(`tree-exec revision with ${name}: refused on retain and verify, never repaired`, async () => {
      const { scope, exec, capture } = await populatedScope();
      for (const receipt of [exec, capture]) {
        // The two revisions share their files (the shared file layer): each is damaged in copies of its own.
        unshareTree(receipt.dir);
        damage(receipt.dir);
        const actual = (await digestTree(receipt.dir, [TREE_EXEC]))[TREE_EXEC];
        assert.notEqual(actual, receipt.integrity.value);
        const details = {
          kind: receipt.kind,
          key: receipt.key,
          expected: receipt.integrity.value,
          actual,
          dir: receipt.dir,
          reason: "damaged-revision",
        };
        const source = fixtureCopy();
        await refusedUnchanged(
          scope,
          () => retainTree(scope, { kind: receipt.kind, key: receipt.key, source, expect: receipt.integrity }),
          "integrity-mismatch",
          details,
        );
        await refusedUnchanged(
          scope,
          () => retainTree(scope, { kind: receipt.kind, key: receipt.key, source }),
          "integrity-mismatch",
          details,
        );
        await refusedUnchanged(scope, () => verifyTree(scope, receipt), "integrity-mismatch", details);
      }
    });

    test(
      `lock-named revision with ${name}: ` +
        (legacyVisible
          ? "refused on retain and verify, never repaired"
          : "outside legacy identity (execIntegrity shows it)"),
      async () => {
        const { scope, legacy } = await populatedScope();
        damage(legacy.dir);
        if (!legacyVisible) {
          // oats.tree-legacy.v0 does not cover modes (contract section 2); the receipt's execIntegrity does.
          const verified = await verifyRetainedCapability(scope, ID, lock());
          assert.deepEqual(verified.integrity, legacy.integrity);
          assert.notDeepEqual(verified.execIntegrity, legacy.execIntegrity);
          return;
        }
        const actual = (await digestTree(legacy.dir, [TREE_LEGACY]))[TREE_LEGACY];
        const details = {
          kind: "capability",
          key: ID,
          format: TREE_LEGACY,
          expected: FIXTURE_LEGACY,
          actual,
          dir: legacy.dir,
          reason: "damaged-revision",
        };
        await refusedUnchanged(
          scope,
          () => retainCapabilityArtifact(scope, fixtureCopy(), ID, lock()),
          "integrity-mismatch",
          details,
        );
        await refusedUnchanged(scope, () => verifyRetainedCapability(scope, ID, lock()), "integrity-mismatch", details);
        await refusedUnchanged(
          scope,
          () => verifyTree(scope, { kind: "capability", key: ID, integrity: FIXTURE_LEGACY }),
          "integrity-mismatch",
          details,
        );
      },
    );
  }

  test("an empty directory added to a revision is not damage (empty directories are outside identity)", async () => {
    const { scope, legacy, exec } = await populatedScope();
    mkdirSync(join(legacy.dir, "empty"));
    mkdirSync(join(exec.dir, "empty"));
    assert.equal((await verifyRetainedCapability(scope, ID, lock())).status, "verified");
    assert.equal((await verifyTree(scope, exec)).status, "verified");
  });

  test("a revision that was never retained is artifact-not-found", async () => {
    const { scope, capture } = await populatedScope();
    const other = `sha256-${"0".repeat(64)}`;
    await refusedUnchanged(
      scope,
      () => verifyTree(scope, { kind: "capture", key: "cap", integrity: `${TREE_EXEC}:${other}` }),
      "artifact-not-found",
    );
    await refusedUnchanged(
      scope,
      () => verifyTree(scope, { kind: "capture", key: "nobody", integrity: capture.integrity }),
      "artifact-not-found",
    );
    const fresh = tempDir("oats-scope-");
    await refusedUnchanged(fresh, () => verifyRetainedCapability(fresh, ID, lock()), "artifact-not-found");
    assert.deepEqual(snapshotTree(fresh), []);
  });
});

// ---------------------------------------------------------------------------

describe("lock refusals (invalid-lock)", () => {
  const MUTATIONS: [string, (lock: LockObject) => JsonValue][] = [
    ["an unknown key at the root", (l) => ({ ...l, extra: true })],
    ["an unknown key in a capability row", (l) => ((l.capabilities[ID]!.sha = "x"), l)],
    ["an unknown key in a package row", (l) => ((l.packages[PKG]!.registry = "x"), l)],
    ["a github: source", (l) => ((l.packages[PKG]!.source = "github:demo/hello"), l)],
    ["a git source that is not a URL", (l) => ((l.packages[PKG]!.source = "git:not a url"), l)],
    ["a bare https source", (l) => ((l.packages[PKG]!.source = "https://example.test/demo/hello.git"), l)],
    ["a relative path: source", (l) => ((l.packages[PKG]!.source = "path:relative/dir"), l)],
    ["a capability whose package row is missing", (l) => (delete l.packages[PKG], l)],
    ["a capability naming another, missing, package", (l) => ((l.capabilities[ID]!.package = "demo.other"), l)],
    ["an abbreviated integrity", (l) => ((l.capabilities[ID]!.integrity = FIXTURE_LEGACY.slice(0, 20)), l)],
    ["an uppercase integrity", (l) => ((l.capabilities[ID]!.integrity = FIXTURE_LEGACY.toUpperCase()), l)],
    [
      "a format-prefixed integrity in a v2 row",
      (l) => ((l.capabilities[ID]!.integrity = `${TREE_LEGACY}:${FIXTURE_LEGACY}`), l),
    ],
    ["a missing integrity", (l) => (delete l.capabilities[ID]!.integrity, l)],
    ["a malformed package integrity", (l) => ((l.packages[PKG]!.integrity = "sha256-xyz"), l)],
    ["an abbreviated commit", (l) => ((l.packages[PKG]!.commit = "4b825dc"), l)],
    ["a path with ..", (l) => ((l.capabilities[ID]!.path = "../escape"), l)],
    ["lockfileVersion 1", (l) => ((l.lockfileVersion = 1), l)],
    ['lockfileVersion "2"', (l) => ((l.lockfileVersion = "2"), l)],
    ["no lockfileVersion", (l) => (delete l.lockfileVersion, l)],
    ["no capabilities", (l) => (delete (l as Partial<LockObject>).capabilities, l)],
    ["no row for the capability", (l) => ((l.capabilities = {}), l)],
    [
      "a __proto__ capability key",
      (l) => JSON.parse(JSON.stringify(l).replace('"capabilities":{', '"capabilities":{"__proto__":{"version":"1"},')),
    ],
    [
      "a __proto__ package key",
      (l) =>
        JSON.parse(
          JSON.stringify(l).replace('"packages":{', '"packages":{"__proto__":{"source":"catalog:x","version":"1"},'),
        ),
    ],
    [
      "a __proto__ key at the root",
      (l) => JSON.parse(JSON.stringify(l).replace("{", '{"__proto__":{"lockfileVersion":2},')),
    ],
    [
      "a __proto__ key in a row",
      (l) => JSON.parse(JSON.stringify(l).replace(`"${ID}":{`, `"${ID}":{"__proto__":{"trusted":true},`)),
    ],
    ["null", () => null],
    ["an array", () => []],
    ["a string", () => "lockfileVersion: 2"],
  ];
  for (const [name, mutate] of MUTATIONS) {
    test(`${name}`, async () => {
      const bad = mutate(lock());
      await refusedOnFreshScope((scope) => retainCapabilityArtifact(scope, fixtureCopy(), ID, bad), "invalid-lock");
      const { scope } = await populatedScope();
      await refusedUnchanged(scope, () => retainCapabilityArtifact(scope, fixtureCopy(), ID, bad), "invalid-lock");
      await refusedUnchanged(scope, () => verifyRetainedCapability(scope, ID, bad), "invalid-lock");
    });
  }

  test("the __proto__ key is refused, not silently dropped, even when the rest of the lock is good", async () => {
    const text = JSON.stringify(lock()).replace(
      '"capabilities":{',
      '"capabilities":{"__proto__":{"version":"1.0.0","package":"demo.hello-pkg","integrity":"sha256-' +
        "0".repeat(64) +
        '"},',
    );
    const parsed = JSON.parse(text) as LockObject;
    assert.ok(Object.keys(parsed.capabilities).includes("__proto__"));
    const error = await refusedOnFreshScope(
      (scope) => retainCapabilityArtifact(scope, fixtureCopy(), ID, parsed),
      "invalid-lock",
    );
    assert.match(error.message, /__proto__/);
  });
});

// ---------------------------------------------------------------------------

describe("provenance-mismatch", () => {
  const LOCK_FIELDS: [string, string, (l: LockObject) => void][] = [
    ["source", "source", (l) => (l.packages[PKG]!.source = "git:https://example.test/demo/other.git@v1.2.0")],
    ["commit", "commit", (l) => (l.packages[PKG]!.commit = "0".repeat(40))],
    ["commit (absent from the lock)", "commit", (l) => delete l.packages[PKG]!.commit],
    ["capabilityPath", "capabilityPath", (l) => (l.capabilities[ID]!.path = "capabilities/other")],
    ["version", "version", (l) => (l.capabilities[ID]!.version = "1.2.1")],
    ["packageVersion", "packageVersion", (l) => (l.packages[PKG]!.version = "1.3.0")],
    ["packagePath", "packagePath", (l) => (l.packages[PKG]!.path = "elsewhere")],
    [
      "package",
      "package",
      (l) => {
        l.packages["demo.other-pkg"] = l.packages[PKG]!;
        delete l.packages[PKG];
        l.capabilities[ID]!.package = "demo.other-pkg";
      },
    ],
  ];
  for (const [name, field, mutate] of LOCK_FIELDS) {
    test(`the lock disagrees in ${name}`, async () => {
      const bad = lock();
      mutate(bad);
      const details = { field, actual: provenanceOf(fixtureCopy())[field] };

      // First retain: the staged copy's provenance is checked, and the scope stays empty.
      const fresh = tempDir("oats-scope-");
      await refusedUnchanged(
        fresh,
        () => retainCapabilityArtifact(fresh, fixtureCopy(), ID, bad),
        "provenance-mismatch",
        details,
      );

      // Existing revision: the kept path checks it too, and nothing changes.
      const { scope } = await populatedScope();
      await refusedUnchanged(
        scope,
        () => retainCapabilityArtifact(scope, fixtureCopy(), ID, bad),
        "provenance-mismatch",
        details,
      );
      await refusedUnchanged(scope, () => verifyRetainedCapability(scope, ID, bad), "provenance-mismatch", details);
    });
  }

  const FILE_CHANGES: [string, (source: string) => void, Details][] = [
    ["a missing .oats-installation.json", (source) => unlinkSync(join(source, ".oats-installation.json")), {}],
    [
      "a file naming another capability",
      (source) => writeProvenance(source, { capability: "demo.other" }),
      { field: "capability", expected: ID, actual: "demo.other" },
    ],
    [
      "a file with another commit",
      (source) => writeProvenance(source, { commit: "1".repeat(40) }),
      { field: "commit", actual: "1".repeat(40) },
    ],
    [
      "a file with another source",
      (source) => writeProvenance(source, { source: "catalog:evil" }),
      { field: "source", actual: "catalog:evil" },
    ],
    [
      "a file without capabilityPath",
      (source) => writeProvenance(source, { capabilityPath: undefined }),
      { field: "capabilityPath", actual: null },
    ],
    ["a file of schemaVersion 2", (source) => writeProvenance(source, { schemaVersion: 2 }), {}],
    ["a file with an unknown key", (source) => writeProvenance(source, { installedBy: "x" }), {}],
    ["a file that is not JSON", (source) => writeFileSync(join(source, ".oats-installation.json"), "{"), {}],
    [
      "a directory in place of the file",
      (source) => {
        unlinkSync(join(source, ".oats-installation.json"));
        mkdirSync(join(source, ".oats-installation.json"));
        writeFileSync(join(source, ".oats-installation.json/x"), "");
      },
      {},
    ],
  ];
  for (const [name, change, details] of FILE_CHANGES) {
    test(`the tree carries ${name} (lock integrity matching the tree)`, async () => {
      const source = fixtureCopy();
      change(source);
      const matching = await lockFor(source);
      const fresh = tempDir("oats-scope-");
      await refusedUnchanged(
        fresh,
        () => retainCapabilityArtifact(fresh, source, ID, matching),
        "provenance-mismatch",
        { capability: ID, ...details },
      );
      const { scope } = await populatedScope();
      await refusedUnchanged(
        scope,
        () => retainCapabilityArtifact(scope, source, ID, matching),
        "provenance-mismatch",
        details,
      );
    });
  }
});

describe("integrity-mismatch between the lock and the tree", () => {
  test("the lock names another digest than the tree has", async () => {
    const other = `sha256-${"b".repeat(64)}`;
    const bad = lock();
    bad.capabilities[ID]!.integrity = other;
    const details = { expected: other, actual: FIXTURE_LEGACY, format: TREE_LEGACY, reason: "source-differs" };
    const fresh = tempDir("oats-scope-");
    await refusedUnchanged(
      fresh,
      () => retainCapabilityArtifact(fresh, fixtureCopy(), ID, bad),
      "integrity-mismatch",
      details,
    );
    const { scope } = await populatedScope();
    await refusedUnchanged(
      scope,
      () => retainCapabilityArtifact(scope, fixtureCopy(), ID, bad),
      "integrity-mismatch",
      details,
    );
  });

  test("the tree was changed after the lock was written", async () => {
    const source = fixtureCopy();
    writeFileSync(join(source, "skills/greeting.md"), "tampered\n");
    const actual = (await digestTree(source, [TREE_LEGACY]))[TREE_LEGACY];
    const fresh = tempDir("oats-scope-");
    await refusedUnchanged(fresh, () => retainCapabilityArtifact(fresh, source, ID, lock()), "integrity-mismatch", {
      expected: FIXTURE_LEGACY,
      actual,
      reason: "source-differs",
    });
    // An exec-bit change is outside the legacy lock digest but inside retainTree's expect.
    const modes = fixtureCopy();
    writeFileSync(join(modes, "bin/tool.sh"), "#!/bin/sh\n", { mode: 0o755 });
    const expect = (await digestTree(modes, [TREE_EXEC]))[TREE_EXEC];
    chmodSync(join(modes, "bin/tool.sh"), 0o644);
    const { scope } = await populatedScope();
    const details = { expected: expect, reason: "source-differs" };
    // A key already in the store: byte-for-byte unchanged.
    await refusedUnchanged(
      scope,
      () => retainTree(scope, { kind: "capture", key: "cap", source: modes, expect: `${TREE_EXEC}:${expect}` }),
      "integrity-mismatch",
      details,
    );
    // A new key: the key directories made for staging are taken back too.
    await refusedUnchanged(
      scope,
      () => retainTree(scope, { kind: "capture", key: "other", source: modes, expect: `${TREE_EXEC}:${expect}` }),
      "integrity-mismatch",
      details,
    );
  });

  test("a lock naming a revision already retained still refuses a source that differs from it", async () => {
    const { scope, legacy } = await populatedScope();
    const tampered = fixtureCopy();
    writeFileSync(join(tampered, "skills/greeting.md"), "tampered\n");
    await refusedUnchanged(scope, () => retainCapabilityArtifact(scope, tampered, ID, lock()), "integrity-mismatch", {
      expected: legacy.integrity.value,
      reason: "source-differs",
    });
  });
});

// ---------------------------------------------------------------------------

describe("prototype safety", () => {
  test("capability ids constructor and x.__proto__ are ordinary ids in a lock and in the store", async () => {
    const pollutedBefore = Object.keys(Object.prototype);
    const base = lock();
    const packageRow = base.packages[PKG]!;
    const capabilityRow = base.capabilities[ID]!;
    const twisted: LockObject = JSON.parse(
      JSON.stringify({
        lockfileVersion: 2,
        packages: { "x.__proto__": packageRow, constructor: packageRow },
        capabilities: {
          constructor: { ...capabilityRow, package: "x.__proto__" },
          "x.__proto__": { ...capabilityRow, package: "constructor" },
        },
      }),
    ) as LockObject;
    const scope = tempDir("oats-scope-");
    for (const [id, pkg] of [
      ["constructor", "x.__proto__"],
      ["x.__proto__", "constructor"],
    ] as const) {
      const source = fixtureCopy();
      writeProvenance(source, { capability: id, package: pkg });
      await lockFor(source, twisted, id);
      const receipt = await retainCapabilityArtifact(scope, source, id, twisted);
      assert.equal(receipt.status, "retained");
      assert.equal(receipt.key, id);
      assert.equal(dirname(receipt.dir), join(artifacts(scope), id));
      assert.equal((await verifyRetainedCapability(scope, id, twisted)).status, "verified");
      assert.equal((await retainCapabilityArtifact(scope, source, id, twisted)).status, "kept");
      const tree = await retainTree(scope, { kind: "capture", key: id, source });
      assert.equal(
        (await verifyTree(scope, { kind: "capture", key: id, integrity: tree.integrity })).status,
        "verified",
      );
    }
    const keys = listRetained(scope)
      .map((entry) => `${entry.kind}:${entry.key}`)
      .sort();
    assert.deepEqual(keys, [
      "capability:constructor",
      "capability:x.__proto__",
      "capture:constructor",
      "capture:x.__proto__",
    ]);
    assert.deepEqual(Object.keys(Object.prototype), pollutedBefore);
    assert.equal(({} as Record<string, unknown>).version, undefined);
  });

  test("an id that exists only on Object.prototype has no lock row", async () => {
    // Without a capability row for `constructor`, Object.prototype.constructor must not be taken for one.
    await refusedOnFreshScope(
      (scope) => retainCapabilityArtifact(scope, fixtureCopy(), "constructor", lock()),
      "invalid-lock",
    );
    const { scope } = await populatedScope();
    await refusedUnchanged(scope, () => verifyRetainedCapability(scope, "constructor", lock()), "invalid-lock");
    // A capability row naming package `constructor`, which the lock does not have, is a missing package row.
    const bad = lock();
    bad.capabilities[ID]!.package = "constructor";
    await refusedOnFreshScope((fresh) => retainCapabilityArtifact(fresh, fixtureCopy(), ID, bad), "invalid-lock", {
      package: "constructor",
    });
  });
});
