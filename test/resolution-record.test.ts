/**
 * The resolution record core: the record schema, the strict
 * canonical reader, the record store (publish that never replaces, bounded
 * reads that check the digest before parsing), reading a record back with
 * entry points resolved inside their retained artifacts, readiness, ids and
 * instance references. Every refusal is checked for its typed code and kind,
 * and for leaving the scope byte-for-byte as it was.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  readdirSync,
  realpathSync,
  renameSync,
  rmSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { OatsError } from "../src/core/errors.js";
import {
  TREE_EXEC,
  TREE_LEGACY,
  canonicalJson,
  retainTree,
  sourceIdentityKey,
  type ArtifactReceipt,
} from "../src/retention/index.js";
import {
  checkReadiness,
  listResolutionIds,
  readCanonicalJson,
  readInstanceRef,
  readRecordBytes,
  readResolution,
  resolutionPath,
  writeInstanceRef,
  writeResolution,
} from "../src/resolution/index.js";
import { MAX_RECORD_BYTES } from "../src/resolution/store.js";
import { fixtureCopy, snapshotTree, tempDir } from "./helpers.js";
import { assertRefusal, contractKind, hasMessage, refusal } from "./support/refusals.js";

const KEY = "demo.hello";
const HEX = /^sha256-[0-9a-f]{64}$/;

type Json = any; // records are built and damaged freely here; the library is what checks them

interface Fixture {
  readonly scope: string;
  readonly receipt: ArtifactReceipt;
  readonly ref: { kind: "capability"; key: string; integrity: { format: string; value: string } };
}

async function retained(): Promise<Fixture> {
  const scope = tempDir("oats-res-");
  const receipt = await retainTree(scope, { kind: "capability", key: KEY, source: fixtureCopy() });
  assert.equal(receipt.integrity.format, TREE_EXEC);
  return {
    scope,
    receipt,
    ref: {
      kind: "capability",
      key: KEY,
      integrity: { format: receipt.integrity.format, value: receipt.integrity.value },
    },
  };
}

/** A fresh, valid, complete instance record (plain JSON, safe to damage). */
function validRecord(fixture: Fixture): Json {
  const ref = fixture.ref;
  return structuredClone({
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: "alpha" },
    source: null,
    artifacts: {
      [KEY]: {
        artifact: ref,
        package: {
          id: "demo.hello-pkg",
          source: "path:/srv/packages/hello",
          version: "1.0.0",
          commit: null,
          integrity: null,
        },
        legacyIntegrity: null,
      },
    },
    config: {
      "/settings/demo.hello/greeting": {
        value: "héllo",
        origin: { kind: "operator", ref: "plan.yaml" },
        constraints: [
          { kind: "one-of", value: ["héllo", "hi"], origin: { kind: "soul-requirement", ref: "soul.yaml" } },
        ],
        considered: [{ value: "hi", origin: { kind: "soul-default", ref: "soul.yaml" } }],
      },
      "/settings/demo.hello/retries": {
        value: 1,
        origin: { kind: "workspace-default", ref: "workspace.yaml" },
        constraints: [],
        considered: [],
      },
    },
    bindings: {
      chat: {
        capability: KEY,
        payload: { channel: "general", nested: { deep: true } },
        credentialRefs: [
          { kind: "env", name: "HELLO_TOKEN" },
          { kind: "provider", provider: "vault", key: "hello/token" },
        ],
      },
    },
    messaging: { responsible: { kind: "human", key: "ada" }, teams: ["core"] },
    entrypoints: {
      hello: { artifact: ref, path: "bin/hello.mjs", args: [], role: "command" },
      current: { artifact: ref, path: "current.mjs", args: ["--greet"], role: "launch" },
    },
    capture: null,
    evidence: [],
    unresolved: [],
  });
}

/** A valid capture field for a capture record built from validRecord (its entry point `hello`). */
function validCapture(): Json {
  return {
    name: "nightly",
    entrypoint: "hello",
    target: { wing: "finance" },
    classification: {
      declared: "internal",
      derived: "public",
      effective: "internal",
      config: `sha256-${"c".repeat(64)}`,
      configPath: "/srv/captures/classification.yaml",
    },
    profile: null,
    env: { LOG_LEVEL: "info" },
    credentials: [{ kind: "env", name: "API_TOKEN" }],
    spec: { path: "/srv/captures/nightly.yaml", blob: `sha256-${"d".repeat(64)}` },
  };
}

/** Run `action`, expect the refusal `code`, and the scope exactly as it was. */
async function refusedUnchanged(
  scope: string,
  action: () => unknown,
  code: string,
  details: Record<string, unknown> = {},
): Promise<OatsError> {
  const before = snapshotTree(scope);
  let caught: unknown;
  try {
    await action();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught !== undefined, `expected ${code}, but the call succeeded`);
  assertRefusal(caught, code, details, contractKind, hasMessage);
  assert.deepEqual(snapshotTree(scope), before, "the scope is unchanged");
  return caught as OatsError;
}

function resolutionsDir(scope: string): string {
  return join(realpathSync(scope), ".agents", "resolutions");
}

function sha256(bytes: Uint8Array | string): string {
  return `sha256-${createHash("sha256").update(bytes).digest("hex")}`;
}

/** Store arbitrary bytes under the name of their own digest, as an attacker or a bug would. */
function plant(scope: string, bytes: Buffer | string): string {
  const id = sha256(bytes);
  writeFileSync(join(resolutionsDir(scope), `${id}.json`), bytes);
  return id;
}

/** A scope with a written valid record (so the resolutions store exists) and that record's canonical text. */
async function withRecord(): Promise<Fixture & { id: string; text: string }> {
  const fixture = await retained();
  const { id } = writeResolution(fixture.scope, validRecord(fixture));
  const text = readFileSync(join(resolutionsDir(fixture.scope), `${id}.json`), "utf8");
  return { ...fixture, id, text };
}

/** An independent canonical JSON (ASCII keys only, as in these records): sorted keys, no whitespace, one LF. */
function independentCanonical(value: unknown): string {
  const encode = (v: unknown): string => {
    if (Array.isArray(v)) return `[${v.map(encode).join(",")}]`;
    if (v !== null && typeof v === "object") {
      return `{${Object.keys(v)
        .sort()
        .map((k) => `${JSON.stringify(k)}:${encode((v as Record<string, unknown>)[k])}`)
        .join(",")}}`;
    }
    return JSON.stringify(v);
  };
  return `${encode(value)}\n`;
}

function stagingRows(scope: string): string[] {
  return snapshotTree(scope).filter((row) => /(^|\/)\.staging-/.test(row.split(" ")[1] ?? ""));
}

// ---------------------------------------------------------------- writing

describe("Given a valid record naming a retained artifact", () => {
  test(
    "When it is written, Then its id is the oats.json.v1 digest of its " + "canonical bytes, computed independently",
    async () => {
      const fixture = await retained();
      const record = validRecord(fixture);
      const written = writeResolution(fixture.scope, record);
      const expectedText = independentCanonical(record);
      assert.equal(expectedText, canonicalJson(record));
      const expectedId = sha256(Buffer.from(expectedText, "utf8"));
      assert.equal(written.id, expectedId);
      assert.equal(written.status, "written");
      assert.equal(written.path, join(resolutionsDir(fixture.scope), `${expectedId}.json`));
      assert.equal(readFileSync(written.path, "utf8"), expectedText);
      assert.equal(resolutionPath(realpathSync(fixture.scope), written.id), written.path);
      assert.equal(readFileSync(join(resolutionsDir(fixture.scope), ".gitignore"), "utf8"), "*\n");
      assert.deepEqual(listResolutionIds(fixture.scope), [expectedId]);
      assert.deepEqual(stagingRows(fixture.scope), []);
    },
  );

  test(
    "When the same record is written twice, Then the id is the same and the " +
      "second write reports kept, bytes untouched",
    async () => {
      const fixture = await retained();
      const first = writeResolution(fixture.scope, validRecord(fixture));
      const before = snapshotTree(fixture.scope);
      const second = writeResolution(fixture.scope, validRecord(fixture));
      assert.equal(second.id, first.id);
      assert.equal(second.status, "kept");
      assert.deepEqual(snapshotTree(fixture.scope), before);
    },
  );

  test(
    "When the existing record file is damaged, Then writing it again refuses " +
      "with integrity-mismatch and leaves it alone",
    async () => {
      const { scope, id, text, ...fixture } = await withRecord();
      const path = join(resolutionsDir(scope), `${id}.json`);
      writeFileSync(path, text.replace("héllo", "hallo"));
      const error = await refusedUnchanged(
        scope,
        () => writeResolution(scope, validRecord({ scope, ...fixture })),
        "integrity-mismatch",
        { id, expected: id },
      );
      assert.notEqual(error.details["actual"], id);
      assert.equal(readFileSync(path, "utf8"), text.replace("héllo", "hallo"));
      assert.deepEqual(stagingRows(scope), []);
    },
  );

  test(
    "When a symlink or a directory stands where the record file goes, Then " +
      "writing refuses with invalid-resolution and leaves it alone",
    async () => {
      const fixture = await retained();
      const { id } = writeResolution(fixture.scope, validRecord(fixture));
      const path = join(resolutionsDir(fixture.scope), `${id}.json`);
      const elsewhere = join(tempDir(), "record.json");
      writeFileSync(elsewhere, readFileSync(path));
      unlinkSync(path);
      symlinkSync(elsewhere, path);
      await refusedUnchanged(
        fixture.scope,
        () => writeResolution(fixture.scope, validRecord(fixture)),
        "invalid-resolution",
        { reason: "symlink" },
      );
      unlinkSync(path);
      mkdirSync(path);
      await refusedUnchanged(
        fixture.scope,
        () => writeResolution(fixture.scope, validRecord(fixture)),
        "invalid-resolution",
        { reason: "not-a-file" },
      );
      assert.deepEqual(stagingRows(fixture.scope), []);
    },
  );

  test(
    "When the record is complete, reconstructed with evidence, or " +
      "partial/unknown with unresolved inputs, Then each is written",
    async () => {
      const fixture = await retained();
      const variants: Array<(r: Json) => void> = [
        () => {},
        (r) => {
          r.status = "reconstructed";
          r.evidence = [
            { pointer: "/artifacts/demo.hello", kind: "lock-row", detail: "oats-lock.json row demo.hello" },
          ];
        },
        (r) => {
          r.status = "partial";
          r.unresolved = [{ pointer: "/config/~1settings~1demo.hello~1greeting", reason: "not recorded" }];
        },
        (r) => {
          r.status = "unknown";
          r.unresolved = [{ pointer: "/artifacts", reason: "installed tree changed" }];
        },
        (r) => {
          r.kind = "capture";
          r.subject = { capture: "nightly" };
          r.capture = validCapture();
        },
        (r) => {
          r.artifacts[KEY].legacyIntegrity = { format: TREE_LEGACY, value: `sha256-${"a".repeat(64)}` };
        },
      ];
      const ids = new Set<string>();
      for (const change of variants) {
        const record = validRecord(fixture);
        change(record);
        ids.add(writeResolution(fixture.scope, record).id);
      }
      assert.equal(ids.size, variants.length);
      assert.deepEqual(listResolutionIds(fixture.scope), [...ids].sort());
    },
  );

  test(
    "When the record has a source retained under its identity key, Then it " +
      "is written; a source whose key is another identity's is refused",
    async () => {
      const fixture = await retained();
      const identity = "path:/srv/souls/alpha";
      const source = await retainTree(fixture.scope, {
        kind: "source",
        key: sourceIdentityKey(identity),
        source: fixtureCopy(),
      });
      const record = validRecord(fixture);
      record.source = {
        identity,
        revision: "local",
        artifact: { kind: "source", key: source.key, integrity: source.integrity },
      };
      record.entrypoints.soul = { artifact: record.source.artifact, path: "bin/hello.mjs", args: [], role: "helper" };
      const { id } = writeResolution(fixture.scope, record);
      const read = await readResolution(fixture.scope, id, { verify: true });
      assert.equal(read.entrypoints["soul"], join(realpathSync(source.dir), "bin/hello.mjs"));

      const other = validRecord(fixture);
      other.source = {
        identity: "path:/srv/souls/beta",
        revision: "local",
        artifact: { kind: "source", key: source.key, integrity: source.integrity },
      };
      await refusedUnchanged(fixture.scope, () => writeResolution(fixture.scope, other), "invalid-resolution");
    },
  );
});

// ------------------------------------------------------- schema refusals

describe("Given a record that breaks the schema", () => {
  const cases: Array<[string, (r: Json, fixture: Fixture) => void]> = [
    ["an extra field at the root", (r) => (r.extra = 1)],
    ["an extra field in an artifact's package", (r) => (r.artifacts[KEY].package.extra = "x")],
    [
      "an extra field in an artifact reference",
      (r) => (r.entrypoints.hello.artifact = { ...r.entrypoints.hello.artifact, note: "x" }),
    ],
    ["an extra field in an integrity", (r) => (r.artifacts[KEY].artifact.integrity.extra = true)],
    ["an extra field in a config entry's origin", (r) => (r.config["/settings/demo.hello/retries"].origin.extra = 1)],
    ["an extra field in a credential reference", (r) => (r.bindings.chat.credentialRefs[0].value = "hunter2")],
    ["a missing field at the root (capture)", (r) => delete r.capture],
    ["a missing field at the root (unresolved)", (r) => delete r.unresolved],
    ["a missing field in an entry point (role)", (r) => delete r.entrypoints.hello.role],
    ["a missing field in an artifact entry (legacyIntegrity)", (r) => delete r.artifacts[KEY].legacyIntegrity],
    ["schemaVersion 2", (r) => (r.schemaVersion = 2)],
    ["an unknown status", (r) => (r.status = "ready")],
    ["an unknown origin kind", (r) => (r.config["/settings/demo.hello/retries"].origin.kind = "guess")],
    [
      "a config key that is not a JSON pointer",
      (r) => (r.config["settings"] = r.config["/settings/demo.hello/retries"]),
    ],
    ["a non-null capture", (r) => (r.capture = {})],
    ["an unknown entry point role", (r) => (r.entrypoints.hello.role = "daemon")],
    ["a capability id outside the grammar", (r) => (r.artifacts["Demo"] = r.artifacts[KEY])],
    [
      "a source identity that is not qualified",
      (r, f) =>
        (r.source = {
          identity: "relative/dir",
          revision: "local",
          artifact: { kind: "source", key: "a".repeat(64), integrity: f.ref.integrity },
        }),
    ],
    [
      "a source revision that is abbreviated",
      (r, f) =>
        (r.source = {
          identity: "git:https://host/org/repo#souls/a",
          revision: "abc123",
          artifact: {
            kind: "source",
            key: sourceIdentityKey("git:https://host/org/repo#souls/a"),
            integrity: f.ref.integrity,
          },
        }),
    ],
    // status and evidence/unresolved that disagree
    ["reconstructed without evidence", (r) => (r.status = "reconstructed")],
    [
      "reconstructed with unresolved inputs",
      (r) => {
        r.status = "reconstructed";
        r.evidence = [{ pointer: "/artifacts/demo.hello", kind: "lock-row", detail: "x" }];
        r.unresolved = [{ pointer: "/config", reason: "unknown" }];
      },
    ],
    ["partial without unresolved inputs", (r) => (r.status = "partial")],
    ["unknown without unresolved inputs", (r) => (r.status = "unknown")],
    ["complete with unresolved inputs", (r) => (r.unresolved = [{ pointer: "/config", reason: "unknown" }])],
    [
      "an unresolved entry without a reason",
      (r) => ((r.status = "partial"), (r.unresolved = [{ pointer: "/config", reason: "" }])),
    ],
    ["kind capture with an instance subject", (r) => (r.kind = "capture")],
    ["a capture record without its capture field", (r) => ((r.kind = "capture"), (r.subject = { capture: "nightly" }))],
    [
      "a capture whose name is not the subject",
      (r) => (
        (r.kind = "capture"), (r.subject = { capture: "nightly" }), (r.capture = { ...validCapture(), name: "other" })
      ),
    ],
    [
      "a capture whose entry point the record lacks",
      (r) => (
        (r.kind = "capture"),
        (r.subject = { capture: "nightly" }),
        (r.capture = { ...validCapture(), entrypoint: "absent" })
      ),
    ],
    [
      "a capture whose effective level is looser than declared",
      (r) => (
        (r.kind = "capture"),
        (r.subject = { capture: "nightly" }),
        (r.capture = {
          ...validCapture(),
          classification: { ...validCapture().classification, declared: "confidential" },
        })
      ),
    ],
    [
      "a capture with an unknown level",
      (r) => (
        (r.kind = "capture"),
        (r.subject = { capture: "nightly" }),
        (r.capture = { ...validCapture(), classification: { ...validCapture().classification, derived: "secret" } })
      ),
    ],
    [
      "a capture env naming a non-variable",
      (r) => (
        (r.kind = "capture"),
        (r.subject = { capture: "nightly" }),
        (r.capture = { ...validCapture(), env: { "A=B": "x" } })
      ),
    ],
    ["kind instance with a capture subject", (r) => (r.subject = { capture: "alpha" })],
    // references
    ["an artifact reference in the legacy format", (r) => (r.artifacts[KEY].artifact.integrity.format = TREE_LEGACY)],
    [
      "an entry point's artifact in the legacy format",
      (r) =>
        (r.entrypoints.hello.artifact = {
          ...r.entrypoints.hello.artifact,
          integrity: { format: TREE_LEGACY, value: r.entrypoints.hello.artifact.integrity.value },
        }),
    ],
    [
      "an artifact reference as a bare legacy digest string",
      (r) => (r.artifacts[KEY].artifact.integrity = r.artifacts[KEY].artifact.integrity.value),
    ],
    [
      "an artifact reference as integrity text",
      (r) => (r.artifacts[KEY].artifact.integrity = `${TREE_EXEC}:${r.artifacts[KEY].artifact.integrity.value}`),
    ],
    [
      "an abbreviated artifact digest",
      (r) => (r.artifacts[KEY].artifact.integrity.value = r.artifacts[KEY].artifact.integrity.value.slice(0, 20)),
    ],
    [
      "an artifact entry whose reference is another capability",
      (r) => (r.artifacts["other.cap"] = structuredClone(r.artifacts[KEY])),
    ],
    ["a binding naming a capability the record does not select", (r) => (r.bindings.chat.capability = "other.cap")],
    [
      "an entry point into a capability the record does not select",
      (r) => (r.entrypoints.hello.artifact = { ...r.entrypoints.hello.artifact, key: "other.cap" }),
    ],
    [
      "an entry point into another revision of the selected capability",
      (r) =>
        (r.entrypoints.hello.artifact = {
          ...r.entrypoints.hello.artifact,
          integrity: { format: TREE_EXEC, value: `sha256-${"b".repeat(64)}` },
        }),
    ],
    [
      "an entry point into a source the record does not select",
      (r, f) => (r.entrypoints.hello.artifact = { kind: "source", key: "a".repeat(64), integrity: f.ref.integrity }),
    ],
    [
      "an entry point into a capture tree of an instance record",
      (r, f) => (r.entrypoints.hello.artifact = { kind: "capture", key: "nightly", integrity: f.ref.integrity }),
    ],
    [
      "a credential given as a value",
      (r) => (r.bindings.chat.credentialRefs = [{ kind: "env", name: "HELLO_TOKEN=hunter2" }]),
    ],
    // lexical entry point paths
    ...[
      "../../bin/sh",
      "/bin/sh",
      "a/../../x",
      "..",
      ".",
      "./bin/hello.mjs",
      "bin//hello.mjs",
      "bin/../bin/hello.mjs",
      "",
    ].map((path): [string, (r: Json) => void] => [
      `an entry point path ${JSON.stringify(path)}`,
      (r) => (r.entrypoints.hello.path = path),
    ]),
  ];

  for (const [name, change] of cases) {
    test(
      `When it has ${name}, Then writeResolution refuses with ` + `invalid-resolution and nothing is written`,
      async () => {
        const fixture = await retained();
        const record = validRecord(fixture);
        change(record, fixture);
        await refusedUnchanged(fixture.scope, () => writeResolution(fixture.scope, record), "invalid-resolution");
        assert.equal(
          existsSync(resolutionsDir(fixture.scope)),
          false,
          "no resolutions store is created for a refused record",
        );
      },
    );
  }

  test(
    "When such a record is stored canonically under its own digest, Then " +
      "reading it refuses with invalid-resolution too",
    async () => {
      const { scope, text } = await withRecord();
      const damaged: Array<(r: Json) => void> = [
        (r) => (r.extra = 1),
        (r) => delete r.capture,
        (r) => (r.unresolved = [{ pointer: "/config", reason: "unknown" }]),
        (r) => (r.status = "reconstructed"),
        (r) => (r.artifacts[KEY].artifact.integrity.format = TREE_LEGACY),
        (r) => (r.bindings.chat.capability = "other.cap"),
        (r) => (r.entrypoints.hello.path = "../../bin/sh"),
        (r) => (r.entrypoints.hello.path = "/bin/sh"),
      ];
      for (const change of damaged) {
        const record = JSON.parse(text);
        change(record);
        const id = plant(scope, canonicalJson(record));
        await refusedUnchanged(scope, () => readResolution(scope, id), "invalid-resolution");
      }
    },
  );

  test(
    "When an entry point is named __proto__, Then writing refuses with " + "invalid-resolution rather than dropping it",
    async () => {
      const fixture = await retained();
      const protoEntry = { artifact: fixture.ref, path: "bin/hello.mjs", args: [], role: "command" };
      const text = canonicalJson(validRecord(fixture)).replace(
        '"entrypoints":{',
        `"entrypoints":{"__proto__":${canonicalJson(protoEntry).trim()},`,
      );
      const record = JSON.parse(text);
      assert.ok(Object.hasOwn(record.entrypoints, "__proto__"));
      await refusedUnchanged(fixture.scope, () => writeResolution(fixture.scope, record), "invalid-resolution");
    },
  );

  test(
    "When a value is an integer beyond 2^53, Then writing refuses with " +
      "invalid-resolution (it could not be read back exactly)",
    async () => {
      const fixture = await retained();
      const record = validRecord(fixture);
      record.config["/settings/demo.hello/retries"].value = 2 ** 53 + 2;
      await refusedUnchanged(fixture.scope, () => writeResolution(fixture.scope, record), "invalid-resolution");
    },
  );
});

// ------------------------------------------------------- reading record files

describe("Given a record file in the store", () => {
  test(
    "When one byte is changed, Then reading refuses with integrity-mismatch " + "before the bytes are parsed",
    async () => {
      const { scope, id, text } = await withRecord();
      const path = join(resolutionsDir(scope), `${id}.json`);
      // Still canonical, still schema-valid: only the digest can tell.
      writeFileSync(path, text.replace("héllo", "hallo"));
      await refusedUnchanged(scope, () => readResolution(scope, id), "integrity-mismatch", {
        id,
        expected: id,
        actual: sha256(text.replace("héllo", "hallo")),
      });
      // Not even JSON any more: the digest still speaks first.
      writeFileSync(path, `X${text.slice(1)}`);
      await refusedUnchanged(scope, () => readResolution(scope, id), "integrity-mismatch", { id, expected: id });
      // A __proto__ key that the canonical reader would refuse: the digest still speaks first.
      writeFileSync(path, text.replace('{"artifacts"', '{"__proto__":1,"artifacts"'));
      await refusedUnchanged(scope, () => readRecordBytes(scope, id), "integrity-mismatch");
    },
  );

  test(
    "When the bytes are equivalent but not canonical, stored under their own " +
      "digest, Then reading refuses with invalid-resolution",
    async () => {
      const { scope, text } = await withRecord();
      for (const part of ['"value":"héllo"', '"schemaVersion":1,', '"value":1}']) assert.ok(text.includes(part), part);
      const reordered = (() => {
        const parsed = JSON.parse(text);
        const out: Record<string, unknown> = {};
        for (const key of Object.keys(parsed).reverse()) out[key] = parsed[key];
        return `${JSON.stringify(out)}\n`;
      })();
      const variants: Array<[string, Buffer | string]> = [
        ["pretty-printed", `${JSON.stringify(JSON.parse(text), null, 2)}\n`],
        ["keys reordered", reordered],
        ["a duplicate key", text.replace('{"artifacts":', '{"artifacts":{},"artifacts":')],
        ["an unsafe integer 9007199254740993", text.replace('"value":1}', '"value":9007199254740993}')],
        [
          "an unsafe integer that round-trips (9007199254740994)",
          text.replace('"value":1}', '"value":9007199254740994}'),
        ],
        ["an unsafe integer in exponent form (1e+21)", text.replace('"value":1}', '"value":1e+21}')],
        ["a trailing space", `${text.slice(0, -1)} \n`],
        ["a space after a colon", text.replace('"schemaVersion":1', '"schemaVersion": 1')],
        ["a BOM", Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)])],
        ["no trailing LF", text.slice(0, -1)],
        ["two trailing LFs", `${text}\n`],
        ["CRLF", `${text.slice(0, -1)}\r\n`],
        ["trailing bytes", `${text}{}\n`],
        ['"\\u00e9" instead of a raw é', text.replace('"value":"héllo"', '"value":"h\\u00e9llo"')],
        ["an escaped slash", text.replace('"/settings/demo.hello/retries"', '"\\/settings/demo.hello/retries"')],
        ["1.0 instead of 1", text.replace('"schemaVersion":1', '"schemaVersion":1.0')],
        ["1e0 instead of 1", text.replace('"schemaVersion":1', '"schemaVersion":1e0')],
        ["-0 instead of 0", text.replace('"value":1}', '"value":-0}')],
        ["a lone surrogate", text.replace('"value":"héllo"', '"value":"h\\ud800llo"')],
        [
          "invalid UTF-8",
          Buffer.concat([Buffer.from(text.slice(0, 20)), Buffer.from([0xff]), Buffer.from(text.slice(21))]),
        ],
        ["a __proto__ key at the root", text.replace('{"artifacts"', '{"__proto__":1,"artifacts"')],
        [
          "a __proto__ key in a binding payload",
          text.replace('"payload":{', '"payload":{"__proto__":{"polluted":true},'),
        ],
        [
          "a __proto__ binding slot",
          text.replace(
            '"bindings":{',
            `"bindings":{"__proto__":{"capability":"${KEY}","credentialRefs":[],"payload":null},`,
          ),
        ],
      ];
      for (const [name, bytes] of variants) {
        assert.notEqual(Buffer.from(bytes).toString("latin1"), Buffer.from(text).toString("latin1"), name);
        const id = plant(scope, bytes);
        const error = await refusedUnchanged(scope, () => readResolution(scope, id), "invalid-resolution").catch((e) =>
          assert.fail(`${name}: ${(e as Error).message}`),
        );
        if (name.includes("__proto__")) assert.equal(error.details["reason"], "proto-key", name);
      }
      assert.equal(({} as Record<string, unknown>)["polluted"], undefined);
    },
  );

  test(
    "When a symlink, a directory or a FIFO stands where the record file " +
      "should be, Then reading refuses with invalid-resolution",
    async () => {
      const { scope, id, text } = await withRecord();
      const path = join(resolutionsDir(scope), `${id}.json`);
      const elsewhere = join(tempDir(), "record.json");
      writeFileSync(elsewhere, text);
      unlinkSync(path);
      symlinkSync(elsewhere, path);
      await refusedUnchanged(scope, () => readResolution(scope, id), "invalid-resolution", { reason: "symlink" });
      unlinkSync(path);
      mkdirSync(path);
      await refusedUnchanged(scope, () => readResolution(scope, id), "invalid-resolution", { reason: "not-a-file" });
      rmSync(path, { recursive: true });
      execFileSync("mkfifo", [path]);
      await refusedUnchanged(scope, () => readResolution(scope, id), "invalid-resolution", { reason: "not-a-file" });
    },
  );

  test("When the resolutions store itself is a symlink, Then reading refuses with invalid-artifact-store", async () => {
    const { scope, id } = await withRecord();
    const dir = resolutionsDir(scope);
    const moved = join(tempDir(), "resolutions");
    renameSync(dir, moved);
    symlinkSync(moved, dir);
    await refusedUnchanged(scope, () => readResolution(scope, id), "invalid-artifact-store");
  });

  test(
    "When a file larger than MAX_RECORD_BYTES is stored under its digest, " +
      "Then reading refuses with invalid-resolution without reading it",
    async () => {
      const { scope } = await withRecord();
      const big = Buffer.alloc(MAX_RECORD_BYTES + 1, 0x20);
      const id = plant(scope, big);
      await refusedUnchanged(scope, () => readResolution(scope, id), "invalid-resolution", {
        reason: "too-large",
        size: MAX_RECORD_BYTES + 1,
      });
      rmSync(join(resolutionsDir(scope), `${id}.json`));
    },
  );
});

// ------------------------------------------------------- readResolution

describe("Given a written record", () => {
  test("When it is read, Then it equals what was written, and every object in it has no prototype", async () => {
    const fixture = await retained();
    const record = validRecord(fixture);
    const { id } = writeResolution(fixture.scope, record);
    const read = await readResolution(fixture.scope, id);
    assert.equal(read.id, id);
    assert.equal(read.verified, false);
    assert.equal(canonicalJson(read.record), canonicalJson(record));
    const r = read.record as Json;
    for (const [pointer, value] of [
      ["/", r],
      ["/subject", r.subject],
      ["/artifacts", r.artifacts],
      ["/artifacts/demo.hello", r.artifacts[KEY]],
      ["/artifacts/demo.hello/artifact/integrity", r.artifacts[KEY].artifact.integrity],
      ["/config", r.config],
      ["/config/.../constraints/0/origin", r.config["/settings/demo.hello/greeting"].constraints[0].origin],
      ["/bindings/chat/payload/nested", r.bindings.chat.payload.nested],
      ["/bindings/chat/credentialRefs/0", r.bindings.chat.credentialRefs[0]],
      ["/messaging/responsible", r.messaging.responsible],
      ["/entrypoints/hello", r.entrypoints.hello],
      ["entrypoints map", read.entrypoints],
    ] as Array<[string, object]>) {
      assert.equal(Object.getPrototypeOf(value), null, `${pointer} has no prototype`);
    }
    assert.equal(r.constructor, undefined);
    assert.equal(r.toString, undefined);
    const viaBytes = readRecordBytes(fixture.scope, id);
    assert.equal(Object.getPrototypeOf(viaBytes.record), null);
  });

  test(
    "When it is read, Then every entry point resolves inside its retained " +
      "artifact, following the internal symlink",
    async () => {
      const fixture = await retained();
      const { id } = writeResolution(fixture.scope, validRecord(fixture));
      const dir = realpathSync(fixture.receipt.dir);
      const read = await readResolution(fixture.scope, id, { verify: true });
      assert.equal(read.verified, true);
      assert.deepEqual(
        { ...read.entrypoints },
        { hello: join(dir, "bin/hello.mjs"), current: join(dir, "bin/hello.mjs") },
      );
    },
  );

  test(
    "When the source tree and any lock are deleted and a garbage lock is put " +
      "in the scope, Then it still reads and verifies",
    async () => {
      const scope = tempDir("oats-res-");
      const source = fixtureCopy();
      const receipt = await retainTree(scope, { kind: "capability", key: KEY, source });
      const fixture: Fixture = { scope, receipt, ref: { kind: "capability", key: KEY, integrity: receipt.integrity } };
      const { id } = writeResolution(scope, validRecord(fixture));
      rmSync(source, { recursive: true, force: true });
      writeFileSync(join(scope, "oats-lock.json"), "not a lock {");
      mkdirSync(join(scope, ".agents/capabilities/installed", KEY), { recursive: true });
      writeFileSync(join(scope, ".agents/capabilities/installed", KEY, "oats-lock.json"), "garbage");
      const read = await readResolution(scope, id, { verify: true });
      assert.equal(read.id, id);
      assert.equal(Object.keys(read.entrypoints).length, 2);
    },
  );

  test("When it is read with the oats.json.v1: prefix, Then it is the same record under the bare id", async () => {
    const { scope, id } = await withRecord();
    const read = await readResolution(scope, `oats.json.v1:${id}`);
    assert.equal(read.id, id);
  });

  test(
    "When the id is abbreviated, uppercase or of another format, Then " + "reading refuses with invalid-input",
    async () => {
      const { scope, id } = await withRecord();
      const hex = id.slice("sha256-".length);
      for (const bad of [
        id.slice(0, 20),
        `sha256-${hex.toUpperCase()}`,
        `SHA256-${hex}`,
        hex,
        `sha512-${hex}`,
        `${TREE_EXEC}:${id}`,
        `oats.bytes.v1:${id}`,
        `${id}.json`,
        ` ${id}`,
        `${id}\n`,
        `../${id}`,
        "",
      ]) {
        await refusedUnchanged(scope, () => readResolution(scope, bad), "invalid-input");
      }
    },
  );

  test(
    "When the id is well formed but unknown, Then reading refuses with " +
      "resolution-not-found, with or without a resolutions store",
    async () => {
      const { scope } = await withRecord();
      await refusedUnchanged(scope, () => readResolution(scope, `sha256-${"0".repeat(64)}`), "resolution-not-found");
      const empty = tempDir();
      await refusedUnchanged(empty, () => readResolution(empty, `sha256-${"0".repeat(64)}`), "resolution-not-found");
      assert.deepEqual(listResolutionIds(empty), []);
    },
  );

  test(
    "When a retained artifact is damaged, Then reading with verify refuses " +
      "with integrity-mismatch, and without verify it still reads",
    async () => {
      const fixture = await retained();
      const { id } = writeResolution(fixture.scope, validRecord(fixture));
      const file = join(fixture.receipt.dir, "skills/greeting.md");
      chmodSync(join(fixture.receipt.dir, "skills"), 0o755);
      writeFileSync(file, "changed\n");
      await refusedUnchanged(
        fixture.scope,
        () => readResolution(fixture.scope, id, { verify: true }),
        "integrity-mismatch",
      );
      const read = await readResolution(fixture.scope, id);
      assert.equal(read.verified, false);
    },
  );

  test(
    "When a retained artifact is gone, Then reading refuses with " + "artifact-not-found, with or without verify",
    async () => {
      const fixture = await retained();
      const { id } = writeResolution(fixture.scope, validRecord(fixture));
      rmSync(fixture.receipt.dir, { recursive: true, force: true });
      await refusedUnchanged(
        fixture.scope,
        () => readResolution(fixture.scope, id, { verify: true }),
        "artifact-not-found",
      );
      await refusedUnchanged(fixture.scope, () => readResolution(fixture.scope, id), "artifact-not-found");
    },
  );

  test(
    "When an entry point's target is missing in the artifact, Then reading " + "refuses with artifact-not-found",
    async () => {
      const fixture = await retained();
      const record = validRecord(fixture);
      record.entrypoints.gone = { artifact: fixture.ref, path: "bin/missing.mjs", args: [], role: "helper" };
      const { id } = writeResolution(fixture.scope, record);
      await refusedUnchanged(fixture.scope, () => readResolution(fixture.scope, id), "artifact-not-found", {
        entrypoint: "gone",
        path: "bin/missing.mjs",
      });
    },
  );

  for (const [name, target] of [
    ["an absolute symlink to /bin/sh", "/bin/sh"],
    ["a relative symlink climbing out of the store", "../../../../../../../../../../../../bin/sh"],
    ["a relative symlink to a file beside the revision", "../../sibling.txt"],
  ] as const) {
    test(
      `When ${name} is planted in the retained revision after retention, Then ` +
        `reading refuses with artifact-not-contained (and with verify, ` +
        `integrity-mismatch first)`,
      async () => {
        const fixture = await retained();
        const record = validRecord(fixture);
        record.entrypoints.escape = { artifact: fixture.ref, path: "bin/escape", args: [], role: "hook" };
        const { id } = writeResolution(fixture.scope, record);
        chmodSync(join(fixture.receipt.dir, "bin"), 0o755);
        symlinkSync(target, join(fixture.receipt.dir, "bin/escape"));
        // Make sure the relative one lands on something that exists outside.
        writeFileSync(join(fixture.receipt.dir, "../sibling.txt"), "outside\n");
        await refusedUnchanged(fixture.scope, () => readResolution(fixture.scope, id), "artifact-not-contained", {
          entrypoint: "escape",
          path: "bin/escape",
        });
        // The revision is now damaged: verification says so before any entry point is followed.
        await refusedUnchanged(
          fixture.scope,
          () => readResolution(fixture.scope, id, { verify: true }),
          "integrity-mismatch",
        );
      },
    );
  }

  test(
    "When the retained revision directory is replaced by a symlink to a " +
      "look-alike tree, Then reading does not resolve entry points through it",
    async () => {
      const fixture = await retained();
      const { id } = writeResolution(fixture.scope, validRecord(fixture));
      const lookalike = fixtureCopy();
      writeFileSync(join(lookalike, "bin/hello.mjs"), "console.log('not what was approved');\n");
      renameSync(fixture.receipt.dir, join(tempDir(), "moved"));
      symlinkSync(lookalike, fixture.receipt.dir);
      await refusedUnchanged(fixture.scope, () => readResolution(fixture.scope, id), "invalid-artifact-store");
      const before = snapshotTree(fixture.scope);
      await assert.rejects(
        readResolution(fixture.scope, id, { verify: true }),
        (error: unknown) => error instanceof OatsError && error.kind !== "internal",
      );
      assert.deepEqual(snapshotTree(fixture.scope), before);
    },
  );
});

// ------------------------------------------------------- readiness

describe("Given records of each status", () => {
  const unresolved = [
    { pointer: "/config/~1settings~1demo.hello~1greeting", reason: "not recorded by the old install" },
    { pointer: "/artifacts/demo.hello", reason: "lock row missing" },
  ];

  test(
    "When checking readiness, Then complete and reconstructed-with-evidence " +
      "pass; partial and unknown refuse with resolution-incomplete and the " +
      "unresolved list",
    async () => {
      const fixture = await retained();
      const build = (status: string): Json => {
        const record = validRecord(fixture);
        record.status = status;
        if (status === "reconstructed")
          record.evidence = [
            { pointer: "/artifacts/demo.hello", kind: "lock-row", detail: "verified against oats-lock.json" },
          ];
        if (status === "partial" || status === "unknown") record.unresolved = unresolved;
        return record;
      };
      for (const status of ["complete", "reconstructed"]) {
        const { id } = writeResolution(fixture.scope, build(status));
        const { record } = await readResolution(fixture.scope, id, { verify: true });
        assert.doesNotThrow(() => checkReadiness(record), status);
      }
      for (const status of ["partial", "unknown"]) {
        const { id } = writeResolution(fixture.scope, build(status));
        const { record } = await readResolution(fixture.scope, id, { verify: true });
        let caught: unknown;
        try {
          checkReadiness(record);
        } catch (error) {
          caught = error;
        }
        assertRefusal(caught, "resolution-incomplete", { status }, contractKind, hasMessage);
        assert.equal(JSON.stringify((caught as OatsError).details["unresolved"]), JSON.stringify(unresolved));
      }
    },
  );

  test(
    "When a record claims complete or reconstructed but disagrees with its " +
      "lists, Then no path lets it pass: it is not written, not read, and " +
      "readiness refuses it",
    async () => {
      const fixture = await retained();
      const { scope, id: okId } = { scope: fixture.scope, id: writeResolution(fixture.scope, validRecord(fixture)).id };
      assert.match(okId, HEX);
      const claims: Json[] = [
        { status: "complete", unresolved, evidence: [] },
        { status: "reconstructed", unresolved: [], evidence: [] },
        { status: "reconstructed", unresolved, evidence: [{ pointer: "/", kind: "x", detail: "" }] },
        { status: "ready", unresolved: [], evidence: [] },
      ];
      for (const claim of claims) {
        const record = { ...validRecord(fixture), ...claim };
        await refusedUnchanged(scope, () => writeResolution(scope, record), "invalid-resolution");
        const planted = plant(scope, canonicalJson(record));
        await refusedUnchanged(scope, () => readResolution(scope, planted), "invalid-resolution");
        let caught: unknown;
        try {
          checkReadiness(record);
        } catch (error) {
          caught = error;
        }
        assertRefusal(caught, "resolution-incomplete", contractKind, hasMessage);
      }
    },
  );
});

// ------------------------------------------------------- instance refs

describe("Given instance references", () => {
  test(
    "When an instance is pointed at a record and then at another, Then the " +
      "old value reads until the atomic replace, and the new one after",
    async () => {
      const fixture = await retained();
      const first = writeResolution(fixture.scope, validRecord(fixture)).id;
      const second = writeResolution(fixture.scope, { ...validRecord(fixture), messaging: null }).id;
      const written = writeInstanceRef(fixture.scope, "alpha", first);
      assert.deepEqual({ ...written }, { schemaVersion: 1, instance: "alpha", resolution: first });
      const path = join(realpathSync(fixture.scope), ".agents/refs/instances/alpha.json");
      assert.equal(readFileSync(path, "utf8"), `{"instance":"alpha","resolution":"${first}","schemaVersion":1}\n`);
      assert.equal(readFileSync(join(realpathSync(fixture.scope), ".agents/refs/instances/.gitignore"), "utf8"), "*\n");
      assert.equal(readInstanceRef(fixture.scope, "alpha").resolution, first);

      // A reader holding the old reference open keeps seeing the whole old value: the replace is a rename, never an
      // in-place write.
      const fd = openSync(path, "r");
      try {
        writeInstanceRef(fixture.scope, "alpha", `oats.json.v1:${second}`);
        const old = Buffer.alloc(200);
        const n = readSync(fd, old, 0, old.length, 0);
        assert.equal(
          old.subarray(0, n).toString("utf8"),
          `{"instance":"alpha","resolution":"${first}","schemaVersion":1}\n`,
        );
      } finally {
        closeSync(fd);
      }
      assert.deepEqual(
        { ...readInstanceRef(fixture.scope, "alpha") },
        { schemaVersion: 1, instance: "alpha", resolution: second },
      );
      assert.deepEqual(stagingRows(fixture.scope), []);
      assert.deepEqual(readdirSync(join(realpathSync(fixture.scope), ".agents/refs/instances")).sort(), [
        ".gitignore",
        "alpha.json",
      ]);
    },
  );

  test("When the new value is refused, Then the old reference stays in force", async () => {
    const { scope, id } = await withRecord();
    writeInstanceRef(scope, "alpha", id);
    await refusedUnchanged(scope, () => writeInstanceRef(scope, "alpha", id.slice(0, 30)), "invalid-input");
    await refusedUnchanged(scope, () => writeInstanceRef(scope, "alpha", id.toUpperCase()), "invalid-input");
    assert.equal(readInstanceRef(scope, "alpha").resolution, id);
  });

  test(
    "When the instance name is invalid, Then writing and reading refuse with " + "invalid-input and nothing is created",
    async () => {
      const { scope, id } = await withRecord();
      for (const name of ["../x", "a/b", "Alpha", "", ".hidden", "x".repeat(215)]) {
        await refusedUnchanged(scope, () => writeInstanceRef(scope, name, id), "invalid-input");
        await refusedUnchanged(scope, () => readInstanceRef(scope, name), "invalid-input");
      }
      assert.equal(existsSync(join(scope, ".agents/refs")), false);
    },
  );

  test("When the instance has no reference, Then reading refuses with resolution-not-found", async () => {
    const { scope, id } = await withRecord();
    await refusedUnchanged(scope, () => readInstanceRef(scope, "alpha"), "resolution-not-found");
    writeInstanceRef(scope, "beta", id);
    await refusedUnchanged(scope, () => readInstanceRef(scope, "alpha"), "resolution-not-found");
  });

  test("When the reference file is tampered with, Then reading refuses with invalid-resolution", async () => {
    const { scope, id } = await withRecord();
    writeInstanceRef(scope, "alpha", id);
    const path = join(realpathSync(scope), ".agents/refs/instances/alpha.json");
    const good = readFileSync(path, "utf8");
    const tampered = [
      `${JSON.stringify(JSON.parse(good), null, 2)}\n`,
      good.slice(0, -1),
      `{"schemaVersion":1,"instance":"alpha","resolution":"${id}"}\n`,
      `{"extra":1,"instance":"alpha","resolution":"${id}","schemaVersion":1}\n`,
      `{"instance":"beta","resolution":"${id}","schemaVersion":1}\n`,
      `{"instance":"alpha","resolution":"${id}","schemaVersion":2}\n`,
      `{"instance":"alpha","resolution":"${id.slice(0, 20)}","schemaVersion":1}\n`,
      `{"instance":"alpha","resolution":"${id.toUpperCase()}","schemaVersion":1}\n`,
      `{"__proto__":1,"instance":"alpha","resolution":"${id}"}\n`,
      "null\n",
      "[]\n",
      '"alpha"\n',
    ];
    for (const bytes of tampered) {
      writeFileSync(path, bytes);
      await refusedUnchanged(scope, () => readInstanceRef(scope, "alpha"), "invalid-resolution").catch((e) =>
        assert.fail(`${JSON.stringify(bytes)}: ${(e as Error).message}`),
      );
    }
    unlinkSync(path);
    const elsewhere = join(tempDir(), "alpha.json");
    writeFileSync(elsewhere, good);
    symlinkSync(elsewhere, path);
    await refusedUnchanged(scope, () => readInstanceRef(scope, "alpha"), "invalid-resolution", { reason: "symlink" });
  });

  test("When the instance refs store is a symlink, Then reading refuses with invalid-artifact-store", async () => {
    const { scope, id } = await withRecord();
    writeInstanceRef(scope, "alpha", id);
    const dir = join(realpathSync(scope), ".agents/refs/instances");
    const moved = join(tempDir(), "instances");
    renameSync(dir, moved);
    symlinkSync(moved, dir);
    await refusedUnchanged(scope, () => readInstanceRef(scope, "alpha"), "invalid-artifact-store");
  });
});

// ------------------------------------------------------- the strict reader itself

describe("Given the strict canonical reader", () => {
  test(
    "When it reads canonical bytes, Then it returns prototype-free objects, " +
      "and refuses everything else with invalid-resolution",
    () => {
      const value = readCanonicalJson(Buffer.from('{"a":[{"b":{"c":1}}],"d":"é"}\n'), "test") as Json;
      assert.equal(Object.getPrototypeOf(value), null);
      assert.equal(Object.getPrototypeOf(value.a[0]), null);
      assert.equal(Object.getPrototypeOf(value.a[0].b), null);
      for (const bad of [
        '{"d":"é","a":1}\n',
        '{"a":1}',
        '{"a":1} \n',
        '{"a":1,"a":1}\n',
        "9007199254740993\n",
        "9007199254740994\n",
        "-9007199254740994\n",
        '{"__proto__":{}}\n',
        "\n",
        "",
      ]) {
        assert.throws(
          () => readCanonicalJson(Buffer.from(bad), "test"),
          refusal("invalid-resolution"),
          JSON.stringify(bad),
        );
      }
      for (const ok of ["9007199254740991\n", "-9007199254740991\n", "0.5\n", "1e-7\n", "null\n"]) {
        assert.doesNotThrow(() => readCanonicalJson(Buffer.from(ok), "test"), ok);
      }
    },
  );

  // Bytes that V8's JSON.stringify writes back unchanged but that are not canonical: the reader's shortcut must not
  // take them.
  test(
    "When JSON.stringify would write the bytes back exactly, Then keys out " +
      "of order, a lone surrogate and a BOM are still refused",
    () => {
      for (const bad of [
        '{"a":{"c":1,"b":2}}\n',
        '[{"b":1,"a":2}]\n',
        '"\\ud800"\n',
        '{"\\udc00":1}\n',
        '{"9":2,"10":1}\n',
        "-0\n",
      ]) {
        assert.throws(
          () => readCanonicalJson(Buffer.from(bad), "test"),
          refusal("invalid-resolution"),
          JSON.stringify(bad),
        );
      }
      assert.throws(
        () => readCanonicalJson(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from("{}\n")]), "test"),
        refusal("invalid-resolution"),
      );
      // Canonical bytes V8 writes otherwise (integer-like keys first, in numeric order; control characters as escapes)
      // are accepted.
      for (const ok of ['{"10":1,"9":2}\n', '"\\u0001"\n', '{"a":"\u{1F600}","b":["\u{1F600}x"]}\n']) {
        assert.doesNotThrow(() => readCanonicalJson(Buffer.from(ok), "test"), ok);
      }
    },
  );
});
