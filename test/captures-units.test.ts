/**
 * Unit behaviours and refusals of the capture modules (spec, prepareCapture,
 * queue, dispatch details, audit) on real files. The end-to-end scenarios
 * (tamper, revoke, loosen/tighten, non-sovereign, audit unwritable,
 * partial, concurrency, audit edit) live in test/captures-scenarios.test.ts.
 */
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";
import { describe, test } from "node:test";
import { approve } from "../src/captures/approvals.js";
import { audit, auditRefusal, readAudit, type AuditEntry } from "../src/ledger/audit.js";
import { BLOBS_DIR, readBlob } from "../src/retention/store/blobs.js";
import { currentPrincipal } from "../src/captures/classification.js";
import { resolveQueuedCapture, runDispatchPlan } from "../src/captures/dispatch.js";
import { nodeOptionsWithGuard } from "../src/captures/node-guard.js";
import { prepareCapture, type PrepareCaptureResult } from "../src/captures/prepare-capture.js";
import { QUEUE_DIR, addJob, listJobs, readJob } from "../src/captures/queue.js";
import { parseCaptureSpec, readCaptureSpecFile } from "../src/captures/spec.js";
import { OatsError } from "../src/core/errors.js";
import { canonicalJsonBytes, type JsonValue } from "../src/core/canonical-json.js";
import { prepare } from "../src/resolution/prepare.js";
import { listResolutionIds, readRecordBytes, resolutionPath } from "../src/resolution/store.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, fixtureCopy, snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

// ---------------------------------------------------------------------------
// Fixtures

type Json = Record<string, any>;

const CONFIG = {
  schemaVersion: 1,
  wings: { reports: "internal", vault: "confidential" },
  repos: {},
  defaults: [],
  fallback: "internal",
  principals: {},
};

const SCRIPT = "#!/bin/sh\necho hello from the capture\n";

function baseSpec(overrides: Json = {}): Json {
  return {
    name: "nightly-report",
    executable: { tree: "./tool", path: "bin/run", args: ["--fast"] },
    target: { wing: "reports" },
    classification: "internal",
    classificationConfig: "./classification.yaml",
    env: { PATH: "/usr/bin:/bin", LOG_LEVEL: "info" },
    ...overrides,
  };
}

interface Fixture {
  /** The scope (empty until something is prepared in it). */
  readonly scope: string;
  /** Where the spec, config, profile and tool tree live (outside the scope). */
  readonly work: string;
  readonly tree: string;
  readonly config: string;
  readonly spec: string;
}

interface FixtureOptions {
  spec?: Json;
  /** Raw text of the classification config (default: CONFIG as YAML-compatible JSON). */
  configText?: string;
  /** Entry point file inside the tree (default bin/run, SCRIPT, 0o755). */
  entry?: { path: string; body: string; mode: number };
  /** Write a capture profile at ./profile.yaml with this text. */
  profileText?: string;
  specName?: string;
}

/** A scope, and beside it a tool tree, a classification config and a spec (JSON text in a .yaml file, which YAML
 * reads as is). */
function fixture(options: FixtureOptions = {}): Fixture {
  const scope = tempDir("oats-capture-scope-");
  const work = tempDir("oats-capture-work-");
  const tree = join(work, "tool");
  const entry = options.entry ?? { path: "bin/run", body: SCRIPT, mode: 0o755 };
  mkdirSync(join(tree, entry.path, ".."), { recursive: true });
  writeFileSync(join(tree, entry.path), entry.body);
  chmodSync(join(tree, entry.path), entry.mode);
  writeFileSync(join(tree, "README.md"), "the nightly report tool\n");
  const config = join(work, "classification.yaml");
  writeFileSync(config, options.configText ?? `${JSON.stringify(CONFIG, null, 2)}\n`);
  if (options.profileText !== undefined) writeFileSync(join(work, "profile.yaml"), options.profileText);
  const spec = join(work, options.specName ?? "capture.yaml");
  writeFileSync(spec, `${JSON.stringify(options.spec ?? baseSpec(), null, 2)}\n`);
  return { scope, work, tree, config, spec };
}

function writeSpec(fx: Fixture, spec: Json, name = "capture.yaml"): string {
  const path = join(fx.work, name);
  writeFileSync(path, `${JSON.stringify(spec, null, 2)}\n`);
  return path;
}

function auditEntries(scope: string): AuditEntry[] {
  return readAudit(scope).entries;
}

/** The scope byte for byte, except the audit log (a refusal is audited) and the .agents directory row the audit log
 * may create. */
function scopeWithoutAudit(scope: string): string[] {
  return snapshotTree(scope).filter((row) => {
    const path = row.split(" ")[1]!;
    return !(
      path === ".agents/audit" ||
      path.startsWith(".agents/audit/") ||
      (path === ".agents" && row.startsWith("D ")) ||
      path === ".agents/.gitignore"
    );
  });
}

/** Prepare, approve the exact executable and queue it as `job`. */
async function queued(fx: Fixture, job = "nightly"): Promise<PrepareCaptureResult> {
  const prepared = await prepareCapture(fx.scope, fx.spec);
  await approve(fx.scope, prepared.composition.subject, { reason: "reviewed the tool" });
  await addJob(fx.scope, { job, resolution: prepared.id });
  return prepared;
}

function queuePath(scope: string, job: string): string {
  return join(scope, ...QUEUE_DIR, `${job}.json`);
}

// ---------------------------------------------------------------------------

describe("capture spec: readCaptureSpecFile / parseCaptureSpec", () => {
  test(
    "Given a spec with relative tree, config and profile paths, When it is " +
      "read from its file, Then every path resolves against the spec's " +
      "directory, not the working directory",
    () => {
      const work = tempDir("oats-spec-");
      mkdirSync(join(work, "specs"));
      const path = join(work, "specs", "capture.yml");
      const text = `name: nightly-report
executable:
  tree: ./tool
  path: bin/run
classification: internal
classificationConfig: ../classification.yaml
profile: profile.yaml
credentials: [API_TOKEN]
`;
      writeFileSync(path, text);
      const loaded = readCaptureSpecFile(path);
      assert.equal(loaded.path, path);
      assert.deepEqual(loaded.bytes, Buffer.from(text));
      assert.equal(loaded.spec.executable.tree, join(work, "specs", "tool"));
      assert.equal(loaded.spec.classificationConfig, join(work, "classification.yaml"));
      assert.equal(loaded.spec.profile, join(work, "specs", "profile.yaml"));
      assert.deepEqual(loaded.spec.executable.args, []);
      assert.deepEqual(loaded.spec.target, {});
      assert.deepEqual(loaded.spec.env, {});
      assert.deepEqual(loaded.spec.credentials, ["API_TOKEN"]);
    },
  );

  test(
    "Given a capability executable with relative dir and lock and an " +
      "absolute config path, When parsed against a base dir, Then dir and lock " +
      "resolve against it and the absolute path is kept",
    () => {
      const spec = parseCaptureSpec(
        {
          name: "hello",
          executable: {
            capability: "demo.hello",
            dir: "installed/hello",
            lock: "../oats-lock.json",
            path: "bin/hello.mjs",
          },
          classification: "public",
          classificationConfig: "/etc/oats/classification.yaml",
        },
        "/srv/project/specs",
      );
      assert.equal(spec.executable.capability, "demo.hello");
      assert.equal(spec.executable.dir, "/srv/project/specs/installed/hello");
      assert.equal(spec.executable.lock, "/srv/project/oats-lock.json");
      assert.equal(spec.executable.tree, undefined);
      assert.equal(spec.classificationConfig, "/etc/oats/classification.yaml");
    },
  );

  const base = baseSpec();
  const cases: Array<[when: string, value: JsonValue, pointer: string, mentions?: string]> = [
    ["an unknown top-level field", { ...base, colour: "blue" }, "/", "colour"],
    [
      "an unknown executable field",
      { ...base, executable: { ...base.executable, shell: true } },
      "/executable",
      "shell",
    ],
    [
      "both tree and capability",
      { ...base, executable: { ...base.executable, capability: "demo.hello" } },
      "/executable",
    ],
    ["neither tree nor capability", { ...base, executable: { path: "bin/run" } }, "/executable"],
    ["dir next to a tree", { ...base, executable: { ...base.executable, dir: "./elsewhere" } }, "/executable/dir"],
    [
      "lock next to a tree",
      { ...base, executable: { ...base.executable, lock: "./oats-lock.json" } },
      "/executable/lock",
    ],
    ["a name that is not an identifier", { ...base, name: "Nightly Report" }, "/name"],
    ["a level that does not exist", { ...base, classification: "secret" }, "/classification"],
    ["an entry path climbing out", { ...base, executable: { ...base.executable, path: "../x" } }, "/executable/path"],
    ["an absolute entry path", { ...base, executable: { ...base.executable, path: "/bin/sh" } }, "/executable/path"],
    [
      "a credential listed twice",
      { ...base, credentials: ["API_TOKEN", "DB_URL", "API_TOKEN"] },
      "/credentials/2",
      "listed twice",
    ],
    ["a name both in env and credentials", { ...base, credentials: ["LOG_LEVEL"] }, "/credentials/0", "LOG_LEVEL"],
    ["an env name that is not a variable name", { ...base, env: { "LOG-LEVEL": "info" } }, "/env/LOG-LEVEL"],
    [
      "a __proto__ key",
      JSON.parse(`{"__proto__": {"polluted": true}, ${JSON.stringify(base).slice(1)}`),
      "/__proto__",
      "__proto__",
    ],
    [
      "a nested __proto__ key",
      JSON.parse(JSON.stringify(base).replace('"LOG_LEVEL"', '"__proto__"')),
      "/env/__proto__",
      "__proto__",
    ],
  ];
  for (const [when, value, pointer, mentions] of cases) {
    test(`Given a spec with ${when}, When parsed, Then invalid-input names ${pointer}`, () => {
      assert.throws(
        () => parseCaptureSpec(value, "/srv/project"),
        refusal("invalid-input", (error) => {
          assert.equal(error.details["pointer"], pointer, error.message);
          assert.ok(error.message.includes(pointer), error.message);
          if (mentions) assert.ok(error.message.includes(mentions), error.message);
        }),
      );
      assert.equal(({} as Json)["polluted"], undefined);
    });
  }

  test(
    "Given a spec file with a __proto__ key written in YAML, When read, Then " + "invalid-input names its pointer",
    () => {
      const path = join(tempDir("oats-spec-"), "capture.yaml");
      writeFileSync(
        path,
        "name: nightly-report\nexecutable: {tree: ./tool, path: " +
          "bin/run}\nclassification: internal\nclassificationConfig: " +
          "./c.yaml\nenv:\n  __proto__: x\n",
      );
      assert.throws(
        () => readCaptureSpecFile(path),
        refusal("invalid-input", (error) => assert.equal(error.details["pointer"], "/env/__proto__")),
      );
    },
  );

  const fileCases: Array<[when: string, make: (dir: string) => string, check?: (error: OatsError) => void]> = [
    [
      "duplicate YAML keys",
      (dir) => {
        const path = join(dir, "capture.yaml");
        writeFileSync(
          path,
          "name: nightly-report\nname: other\nexecutable: {tree: ./tool, path: " +
            "bin/run}\nclassification: internal\nclassificationConfig: ./c.yaml\n",
        );
        return path;
      },
      (error) => assert.equal(error.details["reason"], "DUPLICATE_KEY"),
    ],
    [
      "bytes that are not UTF-8",
      (dir) => {
        const path = join(dir, "capture.yaml");
        writeFileSync(
          path,
          Buffer.concat([Buffer.from("name: nightly-"), Buffer.from([0xff, 0xfe]), Buffer.from("\n")]),
        );
        return path;
      },
      (error) => assert.match(error.message, /not UTF-8/),
    ],
    [
      "a .txt extension",
      (dir) => {
        const path = join(dir, "capture.txt");
        writeFileSync(path, `${JSON.stringify(baseSpec())}\n`);
        return path;
      },
      (error) => assert.equal(error.details["extension"], ".txt"),
    ],
    [
      "a .txt extension on a file that does not exist (refused by name, before any read)",
      (dir) => join(dir, "capture.txt"),
      (error) => {
        assert.equal(error.details["extension"], ".txt");
        assert.match(error.message, /a capture spec ends in \.json, \.yaml or \.yml/);
      },
    ],
    [
      "a directory in place of the file",
      (dir) => {
        const path = join(dir, "capture.yaml");
        mkdirSync(path);
        return path;
      },
      (error) => assert.match(error.message, /not a regular file/),
    ],
    ["a missing file", (dir) => join(dir, "absent.yaml")],
    [
      "a JSON spec that is not JSON",
      (dir) => {
        const path = join(dir, "capture.json");
        writeFileSync(path, "{name: nightly-report}\n");
        return path;
      },
    ],
  ];
  for (const [when, make, check] of fileCases) {
    test(`Given ${when}, When read as a capture spec, Then invalid-input naming the file`, () => {
      const path = make(tempDir("oats-spec-"));
      assert.throws(
        () => readCaptureSpecFile(path),
        refusal("invalid-input", (error) => {
          assert.equal(error.details["spec"], path);
          check?.(error);
        }),
      );
    });
  }
});

// ---------------------------------------------------------------------------

describe("prepareCapture", () => {
  test(
    "Given a tree executable and a profile, When prepared, Then a capture " +
      "record pins the entry point, the levels and the exact bytes of config, " +
      "spec and profile",
    async () => {
      const profileText = "schemaVersion: 1\nrequiredArtifactClasses: [report]\nretention: {keepLast: 3}\n";
      const fx = fixture({ profileText, spec: baseSpec({ profile: "./profile.yaml", credentials: ["API_TOKEN"] }) });
      const prepared = await prepareCapture(fx.scope, fx.spec);
      const { record } = prepared;

      assert.equal(prepared.status, "written");
      assert.deepEqual(listResolutionIds(fx.scope), [prepared.id]);
      const stored = readRecordBytes(fx.scope, prepared.id).record;
      assert.equal(stored.kind, "capture");
      assert.equal(record.kind, "capture");
      assert.equal(record.status, "complete");
      assert.deepEqual({ ...stored.subject }, { capture: "nightly-report" });

      const entry = stored.entrypoints["nightly-report"]!;
      assert.equal(entry.role, "command");
      assert.equal(entry.path, "bin/run");
      assert.deepEqual([...entry.args], ["--fast"]);
      assert.equal(entry.artifact.kind, "capture");
      assert.equal(entry.artifact.key, "nightly-report");
      assert.equal(entry.artifact.integrity.format, "oats.tree-exec.v1");
      assert.deepEqual(prepared.subject, {
        kind: "capture",
        key: "nightly-report",
        integrity: `oats.tree-exec.v1:${entry.artifact.integrity.value}`,
      });

      const capture = stored.capture!;
      assert.equal(capture.name, "nightly-report");
      assert.equal(capture.entrypoint, "nightly-report");
      assert.deepEqual({ ...capture.target }, { wing: "reports" });
      assert.deepEqual(
        { ...capture.classification },
        {
          declared: "internal",
          derived: "internal",
          effective: "internal",
          config: prepared.blobs.config,
          configPath: fx.config,
        },
      );
      assert.deepEqual({ ...capture.env }, { PATH: "/usr/bin:/bin", LOG_LEVEL: "info" });
      assert.deepEqual(
        capture.credentials.map((ref) => ({ ...ref })),
        [{ kind: "env", name: "API_TOKEN" }],
      );
      assert.deepEqual({ ...capture.spec }, { path: fx.spec, blob: prepared.blobs.spec });
      assert.equal(capture.profile, prepared.blobs.profile);

      // Each blob holds exactly the bytes of its file, under .agents/blobs.
      for (const [digest, file] of [
        [prepared.blobs.config, fx.config],
        [prepared.blobs.spec, fx.spec],
        [prepared.blobs.profile!, join(fx.work, "profile.yaml")],
      ] as const) {
        assert.ok(existsSync(join(fx.scope, ...BLOBS_DIR, digest)), `blob ${digest} for ${file}`);
        assert.deepEqual(readBlob(fx.scope, digest), readFileSync(file));
      }
      assert.equal(prepared.classification.mismatch, false);

      // Audited: the retain and the prepare, nothing refused.
      const entries = auditEntries(fx.scope);
      assert.deepEqual(
        entries.map((each) => [each.action, each.outcome]),
        [
          ["retain", "ok"],
          ["prepare", "ok"],
        ],
      );
      assert.equal(entries[1]!.subject?.["resolution"], prepared.id);
    },
  );

  test(
    "Given a spec without a profile, When prepared, Then the record's " +
      "profile is null and only config, spec and composition are pinned",
    async () => {
      const fx = fixture();
      const prepared = await prepareCapture(fx.scope, fx.spec);
      assert.equal(prepared.blobs.profile, null);
      assert.equal(prepared.record.capture!.profile, null);
      const blobs = readdirSync(join(fx.scope, ...BLOBS_DIR))
        .filter((name) => name.startsWith("sha256-"))
        .sort();
      assert.deepEqual(blobs, [prepared.blobs.config, prepared.blobs.spec, prepared.blobs.composition].sort());
    },
  );

  test(
    "Given a declared level below the derived one, When prepared, Then the " +
      "mismatch is an audited security event and the stricter level is effective",
    async () => {
      const fx = fixture({ spec: baseSpec({ classification: "public" }) });
      const prepared = await prepareCapture(fx.scope, fx.spec);
      assert.equal(prepared.classification.mismatch, true);
      assert.deepEqual(
        { ...prepared.record.capture!.classification, config: null, configPath: null },
        { declared: "public", derived: "internal", effective: "internal", config: null, configPath: null },
      );
      const events = auditEntries(fx.scope).filter((entry) => entry.action === "security-event");
      assert.equal(events.length, 1);
      const [event] = events;
      assert.equal(event!.outcome, "event");
      assert.equal(event!.principal, currentPrincipal());
      assert.deepEqual({ ...event!.subject }, { capture: "nightly-report" });
      assert.equal(event!.details["event"], "declared-derived-mismatch");
      assert.equal(event!.details["declared"], "public");
      assert.equal(event!.details["derived"], "internal");
      assert.equal(event!.details["effective"], "internal");
      assert.equal(event!.details["config"], prepared.blobs.config);
    },
  );

  test(
    "Given a declared level above the derived one, When prepared, Then it is " +
      "a mismatch too and the declared level stays effective",
    async () => {
      const fx = fixture({ spec: baseSpec({ classification: "confidential" }) });
      const prepared = await prepareCapture(fx.scope, fx.spec);
      assert.equal(prepared.record.capture!.classification.effective, "confidential");
      const events = auditEntries(fx.scope).filter((entry) => entry.action === "security-event");
      assert.deepEqual(
        events.map((entry) => [entry.details["event"], entry.details["declared"], entry.details["derived"]]),
        [["declared-derived-mismatch", "confidential", "internal"]],
      );
    },
  );

  test(
    "Given a declared level equal to the derived one, When prepared, Then no " + "security event is written",
    async () => {
      const fx = fixture();
      const prepared = await prepareCapture(fx.scope, fx.spec);
      assert.equal(prepared.classification.mismatch, false);
      assert.equal(auditEntries(fx.scope).filter((entry) => entry.action === "security-event").length, 0);
    },
  );

  test(
    "Given a capture already prepared, When the same spec is prepared again, " +
      "Then the status is kept, the id is the same and nothing new is stored",
    async () => {
      const fx = fixture();
      const first = await prepareCapture(fx.scope, fx.spec);
      const stores = () => [
        ...snapshotTree(join(fx.scope, ".agents/resolutions")),
        ...snapshotTree(join(fx.scope, ".agents/blobs")),
      ];
      const before = stores();
      const second = await prepareCapture(fx.scope, fx.spec);
      assert.equal(second.status, "kept");
      assert.equal(second.id, first.id);
      assert.deepEqual(second.subject, first.subject);
      assert.deepEqual(stores(), before);
      assert.deepEqual(listResolutionIds(fx.scope), [first.id]);
      const prepares = auditEntries(fx.scope).filter((entry) => entry.action === "prepare");
      assert.deepEqual(
        prepares.map((entry) => entry.outcome),
        ["ok", "kept"],
      );
    },
  );

  test(
    "Given a capability executable with its dir and lock, When prepared, " +
      "Then the record selects the capability artifact and the approval " +
      "subject is the capability",
    async () => {
      const fx = fixture({
        spec: baseSpec({
          name: "hello-capture",
          executable: { capability: "demo.hello", dir: fixtureCopy(), lock: FIXTURE_LOCK, path: "bin/hello.mjs" },
        }),
      });
      const prepared = await prepareCapture(fx.scope, fx.spec);
      const stored = readRecordBytes(fx.scope, prepared.id).record;
      assert.equal(stored.kind, "capture");
      assert.deepEqual({ ...stored.subject }, { capture: "hello-capture" });
      assert.deepEqual(Object.keys(stored.artifacts), ["demo.hello"]);
      const entry = stored.entrypoints["hello-capture"]!;
      assert.equal(entry.artifact.kind, "capability");
      assert.equal(entry.artifact.key, "demo.hello");
      assert.equal(entry.path, "bin/hello.mjs");
      assert.deepEqual({ ...entry.artifact.integrity }, { ...stored.artifacts["demo.hello"]!.artifact.integrity });
      assert.equal(prepared.subject.kind, "capability");
      assert.equal(prepared.subject.key, "demo.hello");
      assert.match(prepared.subject.integrity, /^oats\.tree-exec\.v1:sha256-[0-9a-f]{64}$/);
      assert.equal(prepared.retained.kind, "capability");
      // The fixture itself is unchanged by preparing a copy of it.
      assert.ok(existsSync(join(FIXTURE_PAYLOAD, "bin/hello.mjs")));
    },
  );

  // Refusals: nothing pinned, nothing recorded, nothing retained; the refusal itself audited.
  const refusals: Array<
    [given: string, make: () => Fixture, code: string, check?: (error: OatsError, fx: Fixture) => void]
  > = [
    [
      "a classification config that is not YAML",
      () => fixture({ configText: "schemaVersion: 1\nwings: {reports: internal\n" }),
      "invalid-input",
    ],
    [
      "a classification config with an unknown level",
      () => fixture({ configText: "schemaVersion: 1\nwings: {reports: secret}\n" }),
      "invalid-input",
      (error) => assert.equal(error.details["pointer"], "/wings/reports"),
    ],
    [
      "a classification config with an extra field",
      () => fixture({ configText: "schemaVersion: 1\nfallback: internal\noverride: public\n" }),
      "invalid-input",
      (error) => assert.match(error.message, /override/),
    ],
    [
      "a classification config that does not exist",
      () => {
        const fx = fixture();
        rmSync(fx.config);
        return fx;
      },
      "invalid-input",
    ],
    [
      "a profile with an unknown field",
      () =>
        fixture({
          profileText: "schemaVersion: 1\nkeepForever: true\n",
          spec: baseSpec({ profile: "./profile.yaml" }),
        }),
      "invalid-input",
      (error) => assert.match(error.message, /keepForever/),
    ],
    [
      "a profile of another schema version",
      () => fixture({ profileText: "schemaVersion: 2\n", spec: baseSpec({ profile: "./profile.yaml" }) }),
      "invalid-input",
      (error) => assert.equal(error.details["pointer"], "/schemaVersion"),
    ],
    [
      "a GitHub token as a pinned env value",
      () =>
        fixture({
          spec: baseSpec({ env: { PATH: "/usr/bin:/bin", UPSTREAM: `ghp_${"a1B2c3D4e5".repeat(3)}abcdef` } }),
        }),
      "secret-in-record",
      (error, fx) => {
        assert.ok(JSON.stringify(error.details).includes("/capture/env/UPSTREAM"), JSON.stringify(error.details));
        assert.ok(!JSON.stringify(error.toJSON()).includes("ghp_"), "the refusal never echoes the secret");
        assert.ok(
          !readFileSync(join(fx.scope, ".agents/audit/audit.jsonl"), "utf8").includes("ghp_"),
          "the audit log never holds the secret",
        );
      },
    ],
    [
      "an API_KEY env entry with a literal value",
      () => fixture({ spec: baseSpec({ env: { PATH: "/usr/bin:/bin", API_KEY: "hunter2-but-longer" } }) }),
      "secret-in-record",
      (error) => assert.ok(JSON.stringify(error.details).includes("API_KEY"), JSON.stringify(error.details)),
    ],
    [
      "a GitHub token among the entry point's args",
      () =>
        fixture({
          spec: baseSpec({
            executable: { tree: "./tool", path: "bin/run", args: ["--token", `ghp_${"Z".repeat(36)}`] },
          }),
        }),
      "secret-in-record",
    ],
    [
      "a secret-named option with its value among the entry point's args",
      () =>
        fixture({
          spec: baseSpec({ executable: { tree: "./tool", path: "bin/run", args: ["--db-password", "hunter2"] } }),
        }),
      "secret-in-record",
      (error) => {
        assert.equal(error.details["pointer"], "/entrypoints/nightly-report/args/1");
        assert.ok(!JSON.stringify(error.toJSON()).includes("hunter2"));
      },
    ],
    [
      "a password inside a URL as a pinned env value",
      () =>
        fixture({
          spec: baseSpec({
            env: { PATH: "/usr/bin:/bin", DATABASE_URL: "postgres://app:s3cretPw@db.example.test/app" },
          }),
        }),
      "secret-in-record",
      (error) => assert.ok(!JSON.stringify(error.toJSON()).includes("s3cretPw")),
    ],
    [
      "a tree directory that does not exist",
      () => fixture({ spec: baseSpec({ executable: { tree: "./no-such-tool", path: "bin/run" } }) }),
      "invalid-input",
      (error, fx) => assert.equal(error.details["dir"], join(fx.work, "no-such-tool")),
    ],
    [
      "a tree that is a file",
      () => fixture({ spec: baseSpec({ executable: { tree: "./classification.yaml", path: "bin/run" } }) }),
      "invalid-input",
    ],
    [
      "a capability whose lock has no row for it",
      () =>
        fixture({
          spec: baseSpec({
            executable: { capability: "demo.absent", dir: fixtureCopy(), lock: FIXTURE_LOCK, path: "bin/hello.mjs" },
          }),
        }),
      "invalid-lock",
    ],
  ];
  for (const [given, make, code, check] of refusals) {
    test(
      `Given ${given}, When prepared, Then ${code} and the scope holds no ` +
        `record, blob or retained tree, only the audited refusal`,
      async () => {
        const fx = make();
        const before = scopeWithoutAudit(fx.scope);
        await assert.rejects(
          prepareCapture(fx.scope, fx.spec),
          refusal(code, (error) => check?.(error, fx)),
        );
        assert.deepEqual(scopeWithoutAudit(fx.scope), before);
        assert.ok(!existsSync(join(fx.scope, ".agents/resolutions")), "no record store");
        assert.ok(!existsSync(join(fx.scope, ...BLOBS_DIR)), "no blob store");
        const entries = auditEntries(fx.scope);
        const last = entries.at(-1)!;
        assert.equal(last.action, "prepare");
        assert.equal(last.outcome, "refused");
        assert.equal((last.details["refusal"] as Json)["code"], code);
        assert.ok(
          entries.every((entry) => entry.action !== "retain"),
          "nothing was retained",
        );
      },
    );
  }

  test(
    "Given an unreadable spec path, When prepared from it, Then " +
      "invalid-input is audited as a refused prepare of that spec",
    async () => {
      const scope = tempDir("oats-capture-scope-");
      const spec = join(tempDir("oats-capture-work-"), "absent.yaml");
      await assert.rejects(prepareCapture(scope, spec), refusal("invalid-input"));
      const [entry] = auditEntries(scope);
      assert.equal(entry!.outcome, "refused");
      assert.deepEqual({ ...entry!.subject }, { spec: resolve(spec) });
      assert.deepEqual(scopeWithoutAudit(scope), []);
    },
  );

  test(
    "Given an entry point path missing from the tree, When prepared, Then " +
      "artifact-not-found and no record is written (the retained tree and " +
      "pinned blobs stay, unreferenced)",
    async () => {
      const fx = fixture({ spec: baseSpec({ executable: { tree: "./tool", path: "bin/missing" } }) });
      await assert.rejects(
        prepareCapture(fx.scope, fx.spec),
        refusal("artifact-not-found", (error) => {
          assert.equal(error.details["path"], "bin/missing");
          assert.ok(error.details["audit"], "the refusal names its audit entry");
        }),
      );
      assert.deepEqual(listResolutionIds(fx.scope), []);
      assert.ok(
        !existsSync(join(fx.scope, ".agents/resolutions")) ||
          readdirSync(join(fx.scope, ".agents/resolutions")).every((name) => !name.startsWith("sha256-")),
      );
      const entries = auditEntries(fx.scope);
      assert.deepEqual(
        entries.map((entry) => [entry.action, entry.outcome]),
        [
          ["retain", "ok"],
          ["prepare", "refused"],
        ],
      );
    },
  );

  test(
    "Given an entry point that is a directory in the tree, When prepared, " +
      "Then artifact-not-found and no record is written",
    async () => {
      const fx = fixture({ spec: baseSpec({ executable: { tree: "./tool", path: "bin" } }) });
      await assert.rejects(
        prepareCapture(fx.scope, fx.spec),
        refusal("artifact-not-found", (error) => assert.equal(error.details["reason"], "not-a-file")),
      );
      assert.deepEqual(listResolutionIds(fx.scope), []);
    },
  );
});

// ---------------------------------------------------------------------------

describe("queue: addJob / readJob / listJobs", () => {
  async function twoCaptures(): Promise<{ fx: Fixture; a: PrepareCaptureResult; b: PrepareCaptureResult }> {
    const fx = fixture();
    const a = await prepareCapture(fx.scope, fx.spec);
    const b = await prepareCapture(
      fx.scope,
      writeSpec(fx, baseSpec({ env: { PATH: "/usr/bin:/bin", LOG_LEVEL: "debug" } }), "debug.yaml"),
    );
    assert.notEqual(a.id, b.id);
    return { fx, a, b };
  }

  test(
    "Given a capture record, When queued and then queued again identically, " +
      "Then it is written once and then kept with the original bytes",
    async () => {
      const fx = fixture();
      const prepared = await prepareCapture(fx.scope, fx.spec);
      const first = await addJob(fx.scope, { job: "nightly", resolution: prepared.id, recurrence: { every: "1h" } });
      assert.equal(first.status, "written");
      assert.equal(first.path, queuePath(fx.scope, "nightly"));
      assert.deepEqual(
        { ...first.job, recurrence: { ...first.job.recurrence }, createdAt: "" },
        {
          schemaVersion: 1,
          job: "nightly",
          resolution: prepared.id,
          recurrence: { policy: "capture", every: "1h" },
          createdAt: "",
        },
      );
      assert.deepEqual(readJob(fx.scope, "nightly"), first.job);
      const bytes = readFileSync(first.path);
      assert.deepEqual(bytes, canonicalJsonBytes(JSON.parse(bytes.toString("utf8"))), "canonical JSON");
      assert.equal(bytes.toString("utf8").indexOf("\n"), bytes.length - 1, "one line");

      const second = await addJob(fx.scope, {
        job: "nightly",
        resolution: prepared.id,
        recurrence: { policy: "capture", every: "1h" },
      });
      assert.equal(second.status, "kept");
      assert.deepEqual(second.job, first.job);
      assert.deepEqual(readFileSync(first.path), bytes);
      assert.deepEqual(
        readdirSync(join(fx.scope, ...QUEUE_DIR)).filter((name) => !name.startsWith(".")),
        ["nightly.json"],
      );
      const queues = auditEntries(fx.scope).filter((entry) => entry.action === "queue");
      assert.deepEqual(
        queues.map((entry) => entry.outcome),
        ["ok", "kept"],
        "the identical re-queue is audited as kept",
      );
      assert.deepEqual(queues[1]!.subject, { job: "nightly", resolution: prepared.id });
    },
  );

  test(
    "Given a queued job, When the same job id is queued for another " +
      "resolution, Then invalid-input job-exists and the job file is unchanged",
    async () => {
      const { fx, a, b } = await twoCaptures();
      await addJob(fx.scope, { job: "nightly", resolution: a.id });
      const bytes = readFileSync(queuePath(fx.scope, "nightly"));
      await assert.rejects(
        addJob(fx.scope, { job: "nightly", resolution: b.id }),
        refusal("invalid-input", (error) => {
          assert.equal(error.details["reason"], "job-exists");
          assert.equal(error.details["queued"], a.id);
          assert.equal(error.details["requested"], b.id);
        }),
      );
      assert.deepEqual(readFileSync(queuePath(fx.scope, "nightly")), bytes);
      assert.equal(readJob(fx.scope, "nightly").resolution, a.id);
      // Another recurrence for the same resolution is another request too.
      await assert.rejects(
        addJob(fx.scope, { job: "nightly", resolution: a.id, recurrence: { policy: "prepare-on-tick" } }),
        refusal("invalid-input", (error) => assert.equal(error.details["reason"], "job-exists")),
      );
      assert.deepEqual(readFileSync(queuePath(fx.scope, "nightly")), bytes);
      assert.equal(auditEntries(fx.scope).at(-1)!.outcome, "refused");
    },
  );

  test(
    "Given a queued job, When re-queued for another resolution with replace, " +
      "Then it is replaced atomically and the replacement is audited",
    async () => {
      const { fx, a, b } = await twoCaptures();
      await addJob(fx.scope, { job: "nightly", resolution: a.id });
      const replaced = await addJob(fx.scope, { job: "nightly", resolution: b.id }, { replace: true });
      assert.equal(replaced.status, "replaced");
      assert.equal(readJob(fx.scope, "nightly").resolution, b.id);
      assert.deepEqual(
        readdirSync(join(fx.scope, ...QUEUE_DIR)).filter((name) => !name.startsWith(".")),
        ["nightly.json"],
        "no staged file left behind",
      );
      const last = auditEntries(fx.scope).at(-1)!;
      assert.equal(last.action, "queue");
      assert.equal(last.details["replaced"], a.id);
    },
  );

  test("Given an instance resolution record, When queued, Then invalid-input and no queue is created", async () => {
    const scope = tempDir("oats-capture-scope-");
    const instance = await prepare(scope, {
      schemaVersion: 1,
      instance: "demo",
      capabilities: [{ id: "demo.hello", dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
      config: [],
      entrypoints: { hello: { capability: "demo.hello", path: "bin/hello.mjs", role: "command" } },
    });
    assert.equal(instance.record.kind, "instance");
    await assert.rejects(
      addJob(scope, { job: "nightly", resolution: instance.id }),
      refusal("invalid-input", (error) => assert.equal(error.details["kind"], "instance")),
    );
    assert.ok(!existsSync(join(scope, ...QUEUE_DIR)));
  });

  test(
    "Given a resolution id not in the scope, When queued, Then " + "resolution-not-found and no queue is created",
    async () => {
      const fx = fixture();
      await prepareCapture(fx.scope, fx.spec);
      await assert.rejects(
        addJob(fx.scope, { job: "nightly", resolution: `sha256-${"0".repeat(64)}` }),
        refusal("resolution-not-found"),
      );
      assert.ok(!existsSync(join(fx.scope, ...QUEUE_DIR)));
    },
  );

  for (const bad of ["../x", "A", "__proto__", "", "x/y", ".hidden"]) {
    test(
      `Given the job id ${JSON.stringify(bad)}, When queued or read, Then ` + `invalid-input and nothing is created`,
      async () => {
        const fx = fixture();
        const prepared = await prepareCapture(fx.scope, fx.spec);
        const before = scopeWithoutAudit(fx.scope);
        await assert.rejects(addJob(fx.scope, { job: bad, resolution: prepared.id }), refusal("invalid-input"));
        assert.throws(() => readJob(fx.scope, bad), refusal("invalid-input"));
        assert.deepEqual(scopeWithoutAudit(fx.scope), before);
        assert.ok(!existsSync(join(fx.scope, ...QUEUE_DIR)));
        assert.ok(!existsSync(join(fx.scope, ".agents/x.json")) && !existsSync(join(fx.work, "x.json")));
      },
    );
  }

  test("Given no such job, When read, Then job-not-found (with and without a queue directory)", async () => {
    const fx = fixture();
    assert.throws(() => readJob(fx.scope, "nightly"), refusal("job-not-found"));
    await queued(fx, "other");
    assert.throws(
      () => readJob(fx.scope, "nightly"),
      refusal("job-not-found", (error) => assert.equal(error.details["job"], "nightly")),
    );
  });

  test("Given no queue at all, When listed, Then the list is empty", () => {
    assert.deepEqual(listJobs(tempDir("oats-capture-scope-")), []);
  });

  const damages: Array<[what: string, damage: (path: string, scope: string) => void, mentions?: RegExp]> = [
    ["its bytes edited into broken JSON", (path) => writeFileSync(path, readFileSync(path, "utf8").slice(0, -3))],
    [
      "its policy edited to an unknown one",
      (path) => writeFileSync(path, readFileSync(path, "utf8").replace('"capture"', '"sometimes"')),
    ],
    [
      "its JSON pretty-printed (not canonical)",
      (path) => writeFileSync(path, `${JSON.stringify(JSON.parse(readFileSync(path, "utf8")), null, 2)}\n`),
      /canonical/,
    ],
    [
      "a job field other than its file name",
      (path, scope) => writeFileSync(path, readFileSync(queuePath(scope, "alpha"), "utf8")),
      /file name/,
    ],
    [
      "a symlink in its place (to a valid job file)",
      (path, scope) => {
        const elsewhere = join(scope, "stash.json");
        renameSync(path, elsewhere);
        symlinkSync(elsewhere, path);
      },
      /symlink/,
    ],
    [
      "a directory in its place",
      (path) => {
        rmSync(path);
        mkdirSync(path);
      },
    ],
  ];
  for (const [what, damage, mentions] of damages) {
    test(
      `Given a job file with ${what}, When read, Then invalid-artifact-store; ` +
        `and listJobs reports it beside the good jobs`,
      async () => {
        const fx = fixture();
        const prepared = await queued(fx, "alpha");
        await addJob(fx.scope, { job: "beta", resolution: prepared.id });
        await addJob(fx.scope, { job: "gamma", resolution: prepared.id });
        damage(queuePath(fx.scope, "beta"), fx.scope);
        assert.throws(
          () => readJob(fx.scope, "beta"),
          refusal("invalid-artifact-store", (error) => {
            assert.equal(error.details["job"], "beta");
            if (mentions) assert.match(error.message, mentions);
          }),
        );
        const listed = listJobs(fx.scope);
        assert.deepEqual(
          listed.map((each) => [each.job, each.queued?.resolution ?? null, each.error?.code ?? null]),
          [
            ["alpha", prepared.id, null],
            ["beta", null, "invalid-artifact-store"],
            ["gamma", prepared.id, null],
          ],
        );
        // A damaged job is never silently re-queued over.
        await assert.rejects(
          addJob(fx.scope, { job: "beta", resolution: prepared.id }),
          refusal("invalid-artifact-store"),
        );
      },
    );
  }
});

// ---------------------------------------------------------------------------

describe("dispatch details: resolveQueuedCapture / runDispatchPlan", () => {
  test(
    "Given a credential named in the spec but absent from the dispatcher's " +
      "env, When resolved, Then it is listed missing, left out of env, and " +
      "nothing else from the caller leaks in",
    async () => {
      const fx = fixture({ spec: baseSpec({ credentials: ["API_TOKEN", "DB_PASSWORD"] }) });
      await queued(fx);
      const plan = await resolveQueuedCapture(fx.scope, "nightly", {
        env: { API_TOKEN: "t-123", HOME: "/root", UNRELATED: "leak", LOG_LEVEL: "overridden" },
      });
      assert.deepEqual(plan.credentials, { provided: ["API_TOKEN"], missing: ["DB_PASSWORD"] });
      assert.deepEqual(plan.env, {
        PATH: "/usr/bin:/bin",
        LOG_LEVEL: "info",
        API_TOKEN: "t-123",
        NODE_OPTIONS: nodeOptionsWithGuard(undefined, plan.run.guard),
      });
      assert.equal(Object.hasOwn(plan.env, "DB_PASSWORD"), false);
      const dispatch = auditEntries(fx.scope).at(-1)!;
      assert.equal(dispatch.action, "dispatch");
      assert.deepEqual(dispatch.details["credentials"], { provided: ["API_TOKEN"], missing: ["DB_PASSWORD"] });
      assert.ok(!JSON.stringify(dispatch).includes("t-123"), "credential values are never audited");
    },
  );

  test(
    "Given no env option, When resolved, Then credentials come from " +
      "process.env and nothing else of it leaks into the plan",
    async () => {
      const fx = fixture({ spec: baseSpec({ credentials: ["OATS_UNIT_TOKEN"] }) });
      await queued(fx);
      process.env["OATS_UNIT_TOKEN"] = "from-process";
      try {
        const plan = await resolveQueuedCapture(fx.scope, "nightly");
        assert.deepEqual(plan.env, {
          PATH: "/usr/bin:/bin",
          LOG_LEVEL: "info",
          OATS_UNIT_TOKEN: "from-process",
          NODE_OPTIONS: nodeOptionsWithGuard(undefined, plan.run.guard),
        });
      } finally {
        delete process.env["OATS_UNIT_TOKEN"];
      }
    },
  );

  test(
    "Given a harness label other than the principal, When resolved, Then a " +
      "harness-label-mismatch security event is audited and the dispatch entry " +
      "records the label",
    async () => {
      const fx = fixture();
      const prepared = await queued(fx);
      const plan = await resolveQueuedCapture(fx.scope, "nightly", { harness: "ci-runner@elsewhere", env: {} });
      assert.equal(plan.harness, "ci-runner@elsewhere");
      assert.equal(plan.principal, currentPrincipal());
      const entries = auditEntries(fx.scope);
      const events = entries.filter((entry) => entry.action === "security-event");
      assert.equal(events.length, 1);
      assert.equal(events[0]!.details["event"], "harness-label-mismatch");
      assert.equal(events[0]!.details["harness"], "ci-runner@elsewhere");
      assert.equal(events[0]!.details["principal"], currentPrincipal());
      assert.deepEqual({ ...events[0]!.subject }, { job: "nightly", resolution: prepared.id });
      const dispatch = entries.at(-1)!;
      assert.equal(dispatch.action, "dispatch");
      assert.equal(dispatch.outcome, "ok");
      assert.equal(dispatch.principal, currentPrincipal(), "the label never becomes the principal");
      assert.equal(dispatch.details["harness"], "ci-runner@elsewhere");
      assert.equal(dispatch.seq, plan.audit.seq);
      assert.equal(dispatch.hash, plan.audit.hash);
    },
  );

  test(
    "Given a harness label equal to the principal (or none), When resolved, " + "Then no security event is written",
    async () => {
      const fx = fixture();
      await queued(fx);
      await resolveQueuedCapture(fx.scope, "nightly", { harness: currentPrincipal(), env: {} });
      await resolveQueuedCapture(fx.scope, "nightly", { env: {} });
      const entries = auditEntries(fx.scope);
      assert.equal(entries.filter((entry) => entry.action === "security-event").length, 0);
      assert.deepEqual(
        entries.filter((entry) => entry.action === "dispatch").map((entry) => entry.details["harness"]),
        [currentPrincipal(), null],
      );
    },
  );

  test(
    "Given the current classification config replaced by invalid YAML, When " +
      "resolved, Then classification-refused (current-config-unusable), " +
      "audited, and no dispatch entry",
    async () => {
      const fx = fixture();
      await queued(fx);
      writeFileSync(fx.config, "schemaVersion: 1\nwings: {reports: public\n");
      await assert.rejects(
        resolveQueuedCapture(fx.scope, "nightly", { env: {} }),
        refusal("classification-refused", (error) => {
          assert.equal(error.details["reason"], "current-config-unusable");
          assert.equal(error.details["configPath"], fx.config);
        }),
      );
      const entries = auditEntries(fx.scope);
      assert.equal(entries.filter((entry) => entry.action === "dispatch" && entry.outcome === "ok").length, 0);
      const last = entries.at(-1)!;
      assert.deepEqual(
        [last.action, last.outcome, (last.details["refusal"] as Json)["code"]],
        ["dispatch", "refused", "classification-refused"],
      );
    },
  );

  test(
    "Given the current classification config now present with an unknown " +
      "field, When resolved, Then classification-refused too",
    async () => {
      const fx = fixture();
      await queued(fx);
      writeFileSync(fx.config, `${JSON.stringify({ ...CONFIG, loosen: true })}\n`);
      await assert.rejects(
        resolveQueuedCapture(fx.scope, "nightly", { env: {} }),
        refusal("classification-refused", (error) => assert.equal(error.details["reason"], "current-config-unusable")),
      );
    },
  );

  test(
    "Given the current classification config deleted, When resolved, Then " +
      "current is null and the pinned level governs the dispatch",
    async () => {
      const fx = fixture();
      await queued(fx);
      rmSync(fx.config);
      const plan = await resolveQueuedCapture(fx.scope, "nightly", { env: {} });
      assert.deepEqual(plan.classification, {
        declared: "internal",
        pinned: "internal",
        current: null,
        effective: "internal",
      });
      assert.equal(auditEntries(fx.scope).at(-1)!.action, "dispatch");
    },
  );

  test(
    "Given an entry point neither owner-executable nor a Node script, When " +
      "resolved, Then invalid-artifact not-runnable and no dispatch entry",
    async () => {
      const fx = fixture({ entry: { path: "bin/run", body: SCRIPT, mode: 0o644 } });
      await queued(fx);
      await assert.rejects(
        resolveQueuedCapture(fx.scope, "nightly", { env: {} }),
        refusal("invalid-artifact", (error) => {
          assert.equal(error.details["reason"], "not-runnable");
          assert.equal(error.details["entrypoint"], "nightly-report");
        }),
      );
      assert.equal(
        auditEntries(fx.scope).filter((entry) => entry.action === "dispatch" && entry.outcome === "ok").length,
        0,
      );
    },
  );

  test(
    "Given an entry point that is executable only by group and others, When " +
      "resolved, Then it is not runnable either",
    async () => {
      const fx = fixture({ entry: { path: "bin/run", body: SCRIPT, mode: 0o655 } });
      await queued(fx);
      await assert.rejects(
        resolveQueuedCapture(fx.scope, "nightly", { env: {} }),
        refusal("invalid-artifact", (error) => assert.equal(error.details["reason"], "not-runnable")),
      );
    },
  );

  for (const extension of [".mjs", ".cjs", ".js"]) {
    test(
      `Given a non-executable ${extension} entry point, When resolved, Then ` +
        `the plan runs it from its run copy under this Node, the guard preloaded ` +
        `before the script`,
      async () => {
        const path = `bin/run${extension}`;
        const fx = fixture({
          entry: { path, body: "process.stdout.write('ran ' + process.argv.slice(2).join(' '));\n", mode: 0o644 },
          // Tests run as root: only a privileged composition may run there (privilege.ts).
          spec: baseSpec({ executable: { tree: "./tool", path, args: ["--fast"] }, privileged: true }),
        });
        await queued(fx);
        const plan = await resolveQueuedCapture(fx.scope, "nightly", { env: {} });
        assert.equal(plan.executable.command, process.execPath);
        assert.deepEqual(plan.executable.argv, ["--import", plan.run.guard, plan.executable.path, "--fast"]);
        assert.ok(plan.executable.path.startsWith(`${plan.run.root}/`), plan.executable.path);
        assert.ok(plan.executable.path.endsWith(`/${path}`));
        const run = await runDispatchPlan(plan, { stdio: "pipe" });
        assert.deepEqual([run.code, run.stdout], [0, "ran --fast"]);
      },
    );
  }

  test(
    "Given an owner-executable entry point, When resolved, Then the plan " + "execs it directly with the record's args",
    async () => {
      const fx = fixture();
      await queued(fx);
      const plan = await resolveQueuedCapture(fx.scope, "nightly", { env: {} });
      assert.equal(plan.executable.command, plan.executable.path);
      assert.deepEqual(plan.executable.argv, ["--fast"]);
    },
  );

  test(
    "Given a script that prints its environment and exits 7, When the plan " +
      "runs, Then the exit code passes through and the child sees only the " +
      "plan's env",
    async () => {
      const fx = fixture({
        entry: { path: "bin/run", body: '#!/bin/sh\nenv\necho "args: $*" >&2\nexit 7\n', mode: 0o755 },
        spec: baseSpec({ env: { PATH: "/usr/bin:/bin" }, credentials: ["API_TOKEN"], privileged: true }),
      });
      await queued(fx);
      process.env["OATS_UNIT_CANARY"] = "must-not-leak";
      let plan;
      try {
        plan = await resolveQueuedCapture(fx.scope, "nightly", {
          env: { API_TOKEN: "t-77", OATS_UNIT_CANARY: "must-not-leak-either" },
        });
        const run = await runDispatchPlan(plan, { stdio: "pipe" });
        assert.equal(run.code, 7);
        assert.equal(run.stderr, "args: --fast\n");
        const seen = Object.fromEntries(
          run.stdout
            .split("\n")
            .filter(Boolean)
            .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
        );
        // dash exports PWD itself (the run copy); everything else must come from the plan.
        assert.equal(seen["PWD"], plan.run.root);
        delete seen["PWD"];
        const guarded = nodeOptionsWithGuard(undefined, plan.run.guard);
        assert.deepEqual(seen, { PATH: "/usr/bin:/bin", API_TOKEN: "t-77", NODE_OPTIONS: guarded });
        assert.deepEqual(plan.env, { PATH: "/usr/bin:/bin", API_TOKEN: "t-77", NODE_OPTIONS: guarded });
      } finally {
        delete process.env["OATS_UNIT_CANARY"];
      }
    },
  );

  test("Given a plan whose command cannot start, When run, Then invalid-artifact rather than a crash", async () => {
    const fx = fixture({ spec: baseSpec({ privileged: true }) });
    await queued(fx);
    const plan = await resolveQueuedCapture(fx.scope, "nightly", { env: {} });
    const broken = { ...plan, executable: { ...plan.executable, command: join(fx.work, "nowhere") } };
    await assert.rejects(runDispatchPlan(broken, { stdio: "pipe" }), refusal("invalid-artifact"));
  });

  test(
    "Given a queued job whose record was deleted, When resolved, Then " +
      "resolution-not-found is audited as a refused dispatch",
    async () => {
      const fx = fixture();
      const prepared = await queued(fx);
      rmSync(resolutionPath(fx.scope, prepared.id));
      await assert.rejects(resolveQueuedCapture(fx.scope, "nightly", { env: {} }), refusal("resolution-not-found"));
      const last = auditEntries(fx.scope).at(-1)!;
      assert.deepEqual([last.action, last.outcome], ["dispatch", "refused"]);
    },
  );
});

// ---------------------------------------------------------------------------

describe("audit module", () => {
  test(
    "Given a record that claims a principal and a hostile USER, When " +
      "audited, Then the entry's principal is still currentPrincipal()",
    async () => {
      const scope = tempDir("oats-audit-");
      const saved = { USER: process.env["USER"], LOGNAME: process.env["LOGNAME"] };
      process.env["USER"] = "mallory";
      process.env["LOGNAME"] = "mallory";
      try {
        const entry = await audit(scope, {
          action: "queue",
          subject: { job: "x" },
          outcome: "ok",
          principal: "mallory@evil",
        } as never);
        assert.equal(entry.principal, currentPrincipal());
        assert.notEqual(entry.principal, "mallory@evil");
        const [stored] = auditEntries(scope);
        assert.equal(stored!.principal, currentPrincipal());
        assert.equal(stored!.hash, entry.hash);
        assert.deepEqual(stored!.details, {});
      } finally {
        for (const [name, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
      }
    },
  );

  test(
    "Given an OatsError, When auditRefusal records it, Then the same error " +
      "comes back unchanged but for details.audit naming the entry",
    async () => {
      const scope = tempDir("oats-audit-");
      await audit(scope, { action: "queue", subject: null, outcome: "ok" });
      const error = new OatsError("approval-required", "not approved", { subject: "x" });
      const returned = await auditRefusal(scope, "dispatch", { job: "nightly" }, error, { extra: 1 });
      assert.equal(returned, error);
      assert.equal(error.code, "approval-required");
      assert.equal(error.message, "not approved");
      assert.equal(error.details["subject"], "x");
      const entries = auditEntries(scope);
      const last = entries.at(-1)!;
      assert.deepEqual(error.details["audit"], { seq: last.seq, hash: last.hash });
      assert.equal(last.seq, 2);
      assert.equal(last.action, "dispatch");
      assert.equal(last.outcome, "refused");
      assert.deepEqual({ ...last.subject }, { job: "nightly" });
      assert.deepEqual(last.details, {
        extra: 1,
        refusal: { code: "approval-required", kind: "refused", message: "not approved" },
      });
    },
  );

  test(
    "Given a plain Error, When auditRefusal records it, Then it is returned " + "as is and audited as internal-error",
    async () => {
      const scope = tempDir("oats-audit-");
      const error = new Error("boom");
      assert.equal(await auditRefusal(scope, "prepare", null, error), error);
      assert.deepEqual(auditEntries(scope)[0]!.details["refusal"], {
        code: "internal-error",
        kind: "internal",
        message: "boom",
      });
    },
  );

  test("Given an audit log with an edited line, When read, Then integrity-mismatch names the broken link", async () => {
    const scope = tempDir("oats-audit-");
    for (const job of ["a", "b", "c"]) await audit(scope, { action: "queue", subject: { job }, outcome: "ok" });
    assert.equal(auditEntries(scope).length, 3);
    const path = join(scope, ".agents/audit/audit.jsonl");
    chmodSync(path, 0o644);
    const lines = readFileSync(path, "utf8").split("\n");
    lines[1] = lines[1]!.replace('"outcome":"ok"', '"outcome":"kept"');
    writeFileSync(path, lines.join("\n"));
    assert.throws(
      () => readAudit(scope),
      refusal("integrity-mismatch", (error) => assert.equal((error.details["brokenAt"] as Json)["line"], 2)),
    );
  });
});
