import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { checkReadiness, readInstanceRef, readResolution, reconstruct, splitCommand } from "../src/resolution/index.js";
import { canonicalJson, listRetained, verifyTree } from "../src/retention/index.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, fixtureLock, snapshotTree, tempDir } from "./helpers.js";
import { rejection } from "./support/refusals.js";

const ID = "demo.hello";
const INSTALLED = `.agents/capabilities/installed/${ID}`;

interface Setup {
  readonly scope: string;
  readonly home: string;
  readonly installed: string;
}

/** A scope with the fixture capability installed, its lock, and an instance home whose instance.json points into the
 * installed store. */
function legacyScope(instance?: unknown, options: { lock?: boolean; installed?: boolean } = {}): Setup {
  const root = tempDir("oats-reconstruct-");
  const scope = join(root, "scope");
  const home = join(root, "home");
  const installed = join(scope, INSTALLED);
  mkdirSync(scope, { recursive: true });
  mkdirSync(home, { recursive: true });
  if (options.installed !== false) cpSync(FIXTURE_PAYLOAD, installed, { recursive: true, verbatimSymlinks: true });
  if (options.lock !== false) cpSync(FIXTURE_LOCK, join(scope, "oats-lock.json"));
  const body = instance ?? {
    name: "alice",
    commands: {
      hello: `node ${INSTALLED}/bin/hello.mjs --greeting "good morning"`,
      current: `${scope}/${INSTALLED}/current.mjs`,
    },
    hooks: { "on-start": `node ./${INSTALLED}/bin/hello.mjs --quiet` },
  };
  writeFileSync(join(home, "instance.json"), typeof body === "string" ? body : JSON.stringify(body, null, 2));
  return { scope, home, installed };
}

function readinessRefusal(record: Parameters<typeof checkReadiness>[0]): OatsError {
  try {
    checkReadiness(record);
  } catch (error) {
    assert.ok(error instanceof OatsError);
    return error;
  }
  assert.fail("a record that is not ready passed checkReadiness");
}

describe("reconstruct: a faithful installation", () => {
  it(
    "Given an instance whose commands and hooks point into a verified " +
      "installation, When reconstructed, Then the record is reconstructed with " +
      "evidence for each input and entry points inside retained artifacts",
    async () => {
      const { scope, home } = legacyScope();
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "reconstructed");
      assert.equal(result.record.status, "reconstructed");
      assert.deepEqual(result.record.unresolved, []);
      assert.deepEqual(result.record.subject, { instance: "alice" });

      // One artifact, named by its exec digest, with the lock's legacy integrity beside it.
      const lock = fixtureLock() as { capabilities: Record<string, { integrity: string }> };
      const entry = result.record.artifacts[ID]!;
      assert.equal(entry.artifact.kind, "capability");
      assert.equal(entry.artifact.integrity.format, "oats.tree-exec.v1");
      assert.deepEqual(entry.legacyIntegrity, {
        format: "oats.tree-legacy.v0",
        value: lock.capabilities[ID]!.integrity,
      });
      assert.equal(entry.package.id, "demo.hello-pkg");
      await verifyTree(scope, entry.artifact);

      // Evidence for every input: the instance file, the lock row (integrity and provenance), the exec revision, each
      // entry point.
      const kinds = result.record.evidence.map((each) => `${each.pointer} ${each.kind}`);
      for (const expected of [
        "/subject legacy-instance",
        `/artifacts/${ID} lock-row-integrity`,
        `/artifacts/${ID} lock-row-provenance`,
        `/artifacts/${ID}/artifact exec-revision`,
        "/entrypoints/hello legacy-command",
        "/entrypoints/current legacy-command",
        "/entrypoints/on-start legacy-hook",
      ]) {
        assert.ok(kinds.includes(expected), `missing evidence ${expected} in ${kinds.join(", ")}`);
      }
      const integrityEvidence = result.record.evidence.find((each) => each.kind === "lock-row-integrity")!;
      assert.match(integrityEvidence.detail, new RegExp(lock.capabilities[ID]!.integrity));
      assert.match(integrityEvidence.detail, /oats-lock\.json/);

      // Entry points: roles, paths relative to the artifact, args split without a shell.
      assert.deepEqual(result.record.entrypoints["hello"], {
        artifact: entry.artifact,
        path: "bin/hello.mjs",
        args: ["--greeting", "good morning"],
        role: "command",
      });
      assert.deepEqual(result.record.entrypoints["current"], {
        artifact: entry.artifact,
        path: "current.mjs",
        args: [],
        role: "command",
      });
      assert.deepEqual(result.record.entrypoints["on-start"], {
        artifact: entry.artifact,
        path: "bin/hello.mjs",
        args: ["--quiet"],
        role: "hook",
      });

      // Readiness passes, and the instance reference names the record.
      checkReadiness(result.record);
      assert.equal(readInstanceRef(scope, "alice").resolution, result.id);
      const read = await readResolution(scope, result.id, { verify: true });
      assert.equal(canonicalJson(read.record), canonicalJson(result.record));
      for (const name of ["hello", "current", "on-start"]) {
        assert.ok(
          read.entrypoints[name]!.startsWith(join(scope, ".agents/capabilities/artifacts", ID, "tree-exec-v1")),
          `${name} resolves inside the retained artifact`,
        );
      }
    },
  );

  it(
    "Given a reconstructed instance, When the installed store, the lock and " +
      "the instance home are deleted, Then the record still reads, verifies " +
      "and resolves every entry point",
    async () => {
      const { scope, home, installed } = legacyScope();
      const result = await reconstruct(scope, home);
      rmSync(installed, { recursive: true });
      rmSync(join(scope, "oats-lock.json"));
      rmSync(home, { recursive: true });
      const read = await readResolution(scope, result.id, { verify: true });
      assert.equal(read.verified, true);
      assert.equal(read.record.status, "reconstructed");
      assert.deepEqual(Object.keys(read.entrypoints).sort(), ["current", "hello", "on-start"]);
      for (const path of Object.values(read.entrypoints)) assert.ok(existsSync(path));
      checkReadiness(read.record);
    },
  );

  it("Given the same instance reconstructed twice, When compared, Then both runs give the same record id", async () => {
    const { scope, home } = legacyScope();
    const first = await reconstruct(scope, home);
    const second = await reconstruct(scope, home);
    assert.equal(second.id, first.id);
  });
});

describe("reconstruct: what cannot be established", () => {
  it(
    "Given an installation with one byte changed, When reconstructed, Then " +
      "it is unknown with integrity-mismatch for the capability, nothing is " +
      "retained and readiness refuses",
    async () => {
      const { scope, home, installed } = legacyScope();
      const script = join(installed, "bin/hello.mjs");
      writeFileSync(script, readFileSync(script, "utf8").replace("hello", "jello"));
      const result = await reconstruct(scope, home);
      assert.ok(result.status === "unknown" || result.status === "partial");
      assert.equal(result.status, "unknown");
      const capability = result.record.unresolved.find((each) => each.pointer === `/artifacts/${ID}`);
      assert.ok(capability, "the capability is named as unresolved");
      assert.match(capability.reason, /^integrity-mismatch/);
      assert.deepEqual(result.record.artifacts, {});
      assert.deepEqual(result.record.entrypoints, {});
      for (const name of ["hello", "current", "on-start"]) {
        assert.ok(
          result.record.unresolved.some(
            (each) => each.pointer === `/entrypoints/${name}` && each.reason.startsWith("capability-unresolved"),
          ),
        );
      }
      // Nothing retained under the drifted bytes.
      assert.deepEqual(
        listRetained(scope).filter((each) => each.kind === "capability"),
        [],
      );
      const refused = readinessRefusal(result.record);
      assert.equal(refused.code, "resolution-incomplete");
      assert.deepEqual(refused.details["unresolved"], result.record.unresolved);
      // The record is written (so the gap is on file) and reads back just as incomplete.
      const read = await readResolution(scope, result.id);
      assert.equal(read.record.status, "unknown");
      assert.equal(readinessRefusal(read.record).code, "resolution-incomplete");
    },
  );

  it(
    "Given an installation whose provenance file disagrees with its lock " +
      "row, When reconstructed, Then the capability is unresolved (the lock " +
      "row is checked, not only the bytes)",
    async () => {
      const { scope, home } = legacyScope();
      const lockPath = join(scope, "oats-lock.json");
      const lock = JSON.parse(readFileSync(lockPath, "utf8"));
      // The same integrity, a different recorded origin.
      lock.packages["demo.hello-pkg"].commit = "0".repeat(40);
      writeFileSync(lockPath, JSON.stringify(lock));
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "unknown");
      assert.match(
        result.record.unresolved.find((each) => each.pointer === `/artifacts/${ID}`)!.reason,
        /^provenance-mismatch/,
      );
    },
  );

  it("Given no lock in the scope, When reconstructed, Then the record is unknown and nothing is retained", async () => {
    const { scope, home } = legacyScope(undefined, { lock: false });
    const result = await reconstruct(scope, home);
    assert.equal(result.status, "unknown");
    assert.match(result.record.unresolved.find((each) => each.pointer === `/artifacts/${ID}`)!.reason, /^lock-missing/);
    assert.deepEqual(listRetained(scope), []);
    assert.equal(readinessRefusal(result.record).code, "resolution-incomplete");
  });

  it(
    "Given a lock without the capability's row, When reconstructed, Then the " +
      "capability is unresolved (lock-row-missing)",
    async () => {
      const { scope, home } = legacyScope();
      const lock = fixtureLock() as { capabilities: Record<string, unknown> };
      lock.capabilities = {};
      writeFileSync(join(scope, "oats-lock.json"), JSON.stringify(lock));
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "unknown");
      assert.match(
        result.record.unresolved.find((each) => each.pointer === `/artifacts/${ID}`)!.reason,
        /^lock-row-missing/,
      );
    },
  );

  it(
    "Given the installed store is gone, When reconstructed, Then the " +
      "capability is unresolved (installed-missing) and never fetched",
    async () => {
      const { scope, home } = legacyScope(undefined, { installed: false });
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "unknown");
      assert.match(
        result.record.unresolved.find((each) => each.pointer === `/artifacts/${ID}`)!.reason,
        /^installed-missing/,
      );
    },
  );

  it(
    "Given one command pointing elsewhere (/usr/bin/env node foo.js), When " +
      "reconstructed, Then that command is unresolved, the rest established, " +
      "status partial",
    async () => {
      const { scope, home } = legacyScope({
        name: "bob",
        commands: { hello: `node ${INSTALLED}/bin/hello.mjs`, other: "/usr/bin/env node foo.js" },
      });
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "partial");
      assert.deepEqual(
        result.record.unresolved.map((each) => each.pointer),
        ["/entrypoints/other"],
      );
      assert.match(result.record.unresolved[0]!.reason, /^not-in-installed-store/);
      assert.ok(result.record.entrypoints["hello"]);
      assert.equal(result.record.entrypoints["other"], undefined);
      // A partial record never passes readiness, read back or not.
      assert.equal(readinessRefusal(result.record).code, "resolution-incomplete");
      const read = await readResolution(scope, result.id, { verify: true });
      assert.equal(readinessRefusal(read.record).code, "resolution-incomplete");
      assert.equal(readInstanceRef(scope, "bob").resolution, result.id);
    },
  );

  it(
    "Given a command whose path climbs out of the installed dir, When " +
      "reconstructed, Then it is unresolved and nothing outside the artifact " +
      "is retained or referenced",
    async () => {
      const { scope, home } = legacyScope({
        name: "carol",
        commands: { escape: `${INSTALLED}/../../../../bin/sh -c id` },
      });
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "unknown");
      assert.equal(result.record.unresolved.length, 1);
      assert.equal(result.record.unresolved[0]!.pointer, "/entrypoints/escape");
      assert.match(result.record.unresolved[0]!.reason, /^path-outside-artifact/);
      assert.deepEqual(result.record.entrypoints, {});
      assert.deepEqual(result.record.artifacts, {});
      assert.deepEqual(listRetained(scope), []);
    },
  );

  it(
    "Given an entry point naming a file the verified artifact does not have, " +
      "When reconstructed, Then it is unresolved, never recorded",
    async () => {
      // (A symlink leaving the tree is refused by retention itself, so such a tree never verifies against a lock row.)
      const { scope, home } = legacyScope({
        name: "dave",
        commands: { hello: `node ${INSTALLED}/bin/hello.mjs`, missing: `node ${INSTALLED}/bin/absent.mjs` },
      });
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "partial");
      const missing = result.record.unresolved.find((each) => each.pointer === "/entrypoints/missing");
      assert.ok(missing);
      assert.match(missing.reason, /^artifact-not-found/);
    },
  );

  it(
    "Given a command in another scope's installed store, shell syntax, or an " +
      "unrepresentable launcher, When reconstructed, Then each is unresolved " +
      "with its reason",
    async () => {
      const { scope, home } = legacyScope({
        name: "erin",
        commands: {
          foreign: `node /elsewhere/.agents/capabilities/installed/${ID}/bin/hello.mjs`,
          piped: `node ${INSTALLED}/bin/hello.mjs | tee log`,
          expand: `node ${INSTALLED}/bin/hello.mjs "$HOME"`,
          launcher: `python3 ${INSTALLED}/bin/hello.mjs`,
          token: `node ${INSTALLED}/bin/hello.mjs --token=abc123`,
          ok: `node ${INSTALLED}/bin/hello.mjs 'it''s'`,
        },
      });
      const result = await reconstruct(scope, home);
      assert.equal(result.status, "partial");
      const reasons = Object.fromEntries(
        result.record.unresolved.map((each) => [each.pointer, each.reason.split(":")[0]]),
      );
      assert.deepEqual(reasons, {
        "/entrypoints/foreign": "installed-store-of-another-scope",
        "/entrypoints/piped": "shell-syntax",
        "/entrypoints/expand": "shell-syntax",
        "/entrypoints/launcher": "launcher-not-representable",
        "/entrypoints/token": "secret-in-record",
      });
      assert.deepEqual(result.record.entrypoints["ok"]!.args, ["its"]);
      assert.ok(
        !JSON.stringify(result.record).includes("abc123"),
        "a credential-looking argument never lands in the record",
      );
    },
  );
});

describe("reconstruct: legacy configuration", () => {
  it(
    "Given legacy config values, When reconstructed, Then each is adopted " +
      "with its origin, and one that looks like a secret is left out and unresolved",
    async () => {
      const { scope, home } = legacyScope({
        name: "frank",
        commands: { hello: `node ${INSTALLED}/bin/hello.mjs` },
        config: { [ID]: { greeting: "hi", retries: 3, apiToken: "hunter2-not-for-records" } },
      });
      const result = await reconstruct(scope, home);
      const entry = result.record.config[`/settings/${ID}/greeting`]!;
      assert.equal(entry.value, "hi");
      assert.equal(entry.origin.kind, "import-adoption");
      assert.match(entry.origin.ref, /instance\.json#\/config\/demo\.hello\/greeting$/);
      assert.equal(result.record.config[`/settings/${ID}/retries`]!.value, 3);
      assert.equal(result.record.config[`/settings/${ID}/apiToken`], undefined);
      assert.equal(result.status, "partial");
      assert.deepEqual(
        result.record.unresolved.map((each) => each.reason.split(":")[0]),
        ["secret-in-record"],
      );
      assert.ok(!readFileSync(result.path, "utf8").includes("hunter2"));
    },
  );
});

describe("reconstruct: bad input", () => {
  const malformed: Array<[string, unknown]> = [
    ["not JSON", "{name: alice"],
    ["an unknown key", { name: "alice", commands: { hello: `node ${INSTALLED}/bin/hello.mjs` }, extra: 1 }],
    ["a missing name", { commands: { hello: `node ${INSTALLED}/bin/hello.mjs` } }],
    ["an invalid name", { name: "../alice", commands: { hello: `node ${INSTALLED}/bin/hello.mjs` } }],
    ["a command that is not a string", { name: "alice", commands: { hello: ["node", "x"] } }],
    ["no command and no hook", { name: "alice" }],
    [
      "a name that is both a command and a hook",
      {
        name: "alice",
        commands: { x: `node ${INSTALLED}/bin/hello.mjs` },
        hooks: { x: `node ${INSTALLED}/bin/hello.mjs` },
      },
    ],
    ["a __proto__ key", `{"name":"alice","commands":{"__proto__":"node ${INSTALLED}/bin/hello.mjs"}}`],
    [
      "another scope",
      { name: "alice", scope: "/somewhere/else", commands: { hello: `node ${INSTALLED}/bin/hello.mjs` } },
    ],
  ];
  for (const [what, body] of malformed) {
    it(
      `Given an instance.json with ${what}, When reconstructed, Then ` + `invalid-input and nothing is written`,
      async () => {
        const { scope, home } = legacyScope(body);
        const before = snapshotTree(scope);
        const error = await rejection(reconstruct(scope, home));
        assert.equal(error.code, "invalid-input");
        assert.deepEqual(snapshotTree(scope), before);
      },
    );
  }

  it(
    "Given an instance home without instance.json, When reconstructed, Then " + "invalid-input and nothing is written",
    async () => {
      const { scope, home } = legacyScope();
      rmSync(join(home, "instance.json"));
      const before = snapshotTree(scope);
      assert.equal((await rejection(reconstruct(scope, home))).code, "invalid-input");
      assert.deepEqual(snapshotTree(scope), before);
    },
  );
});

describe("reconstruct: the instance reference", () => {
  it(
    "Given an instance already pointing at a reconstructed record, When a " +
      "later reconstruction is only partial, Then the ready reference stays in force",
    async () => {
      const { scope, home, installed } = legacyScope();
      const good = await reconstruct(scope, home);
      writeFileSync(join(installed, "bin/hello.mjs"), "drifted\n");
      const worse = await reconstruct(scope, home);
      assert.equal(worse.status, "unknown");
      assert.notEqual(worse.id, good.id);
      assert.equal(worse.refMoved, false);
      assert.equal(readInstanceRef(scope, "alice").resolution, good.id);
    },
  );
});

describe("splitCommand", () => {
  it("splits on whitespace with simple quoting, no shell", () => {
    assert.deepEqual(splitCommand(`node  a.mjs "x y" 'z "w"' a\\ b ""`), {
      ok: true,
      tokens: ["node", "a.mjs", "x y", 'z "w"', "a b", ""],
    });
    assert.equal(splitCommand("node 'a").ok, false);
    assert.equal(splitCommand("a; rm -rf /").ok, false);
    assert.equal(splitCommand("a `id`").ok, false);
    assert.equal(splitCommand("   ").ok, false);
  });
});
