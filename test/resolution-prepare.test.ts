/**
 * prepare(scope, plan): plans, secrets, entry point containment, the order
 * record-then-reference, and the reliability cases of the resolution issue.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { before, describe, test } from "node:test";
import {
  OatsError,
  TREE_LEGACY,
  digestTree,
  findSecrets,
  isSecretKeyName,
  listResolutionIds,
  parsePlan,
  prepare,
  readInstanceRef,
  readPlanFile,
  readResolution,
  resolveEntrypoint,
  retainedTreeDir,
  type ArtifactRefRecord,
} from "../src/index.js";
import { setPrepareHook } from "../src/resolution/prepare.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, REPO, fixtureCopy, fixtureLock, snapshotTree, tempDir } from "./helpers.js";
import { expectRefusal, refusal } from "./support/refusals.js";
import type { JsonValue } from "../src/core/index.js";

const CHILD = join(REPO, "test/support/prepare-child.ts");
const HELLO = "demo.hello";

type PlanValue = Record<string, any>;

/** The smallest complete plan: the fixture capability, one config choice, two entry points (one through the fixture's
 * internal symlink). */
function basePlan(overrides: PlanValue = {}): PlanValue {
  return {
    schemaVersion: 1,
    instance: "demo",
    capabilities: [{ id: HELLO, dir: FIXTURE_PAYLOAD, lock: FIXTURE_LOCK }],
    config: [
      { pointer: "/settings/demo.hello/greeting", value: "hello", origin: { kind: "operator", ref: "plan.yaml" } },
    ],
    entrypoints: {
      hello: { capability: HELLO, path: "bin/hello.mjs", args: ["--quiet"], role: "command" },
      current: { capability: HELLO, path: "current.mjs", role: "helper" },
    },
    ...overrides,
  };
}

/** A plan that differs from basePlan only in a config value, so its record has another id. */
function otherPlan(value = "bonjour"): PlanValue {
  return basePlan({
    config: [{ pointer: "/settings/demo.hello/greeting", value, origin: { kind: "operator", ref: "plan.yaml" } }],
  });
}

/**
 * Another materialized capability with its own lock: a copy of the fixture
 * with a changed file and provenance for `id`. `lockCommit` puts a different
 * commit in the lock's package row than the provenance file records.
 */
async function makeCapability(
  id: string,
  options: { lockCommit?: string } = {},
): Promise<{ id: string; dir: string; lock: string }> {
  const dir = fixtureCopy();
  writeFileSync(join(dir, "skills/greeting.md"), `# ${id}\n`);
  const provenancePath = join(dir, ".oats-installation.json");
  const provenance = JSON.parse(readFileSync(provenancePath, "utf8"));
  writeFileSync(provenancePath, `${JSON.stringify({ ...provenance, capability: id }, null, 2)}\n`);
  const digests = await digestTree(dir, [TREE_LEGACY]);
  const lock = fixtureLock() as any;
  if (options.lockCommit) lock.packages["demo.hello-pkg"].commit = options.lockCommit;
  lock.capabilities = { [id]: { ...lock.capabilities[HELLO], integrity: digests[TREE_LEGACY] } };
  const lockPath = join(tempDir("oats-lock-"), "oats-lock.json");
  writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
  return { id, dir, lock: lockPath };
}

function agentsSnapshot(scope: string): string[] {
  return snapshotTree(join(scope, ".agents"));
}

function recordAndRefSnapshot(scope: string): string[] {
  return [...snapshotTree(join(scope, ".agents/resolutions")), "--", ...snapshotTree(join(scope, ".agents/refs"))];
}

// ------------------------------------------------------------------ the happy path

describe("prepare: a plan becomes a complete record and the instance points at it", () => {
  test(
    "Given the fixture plan, When preparing, Then the record is complete, " +
      "its artifacts verify and its entry points resolve inside the retained artifact",
    async () => {
      const scope = tempDir();
      const result = await prepare(scope, basePlan());
      assert.equal(result.status, "written");
      assert.equal(result.instance, "demo");
      assert.equal(result.record.status, "complete");
      assert.deepEqual(result.record.unresolved, []);
      assert.deepEqual(result.record.evidence, []);
      assert.equal(result.record.capture, null);

      const entry = result.record.artifacts[HELLO]!;
      assert.equal(entry.artifact.integrity.format, "oats.tree-exec.v1");
      assert.deepEqual(entry.package, {
        id: "demo.hello-pkg",
        source: "git:https://example.test/demo/hello.git@v1.2.0",
        version: "1.2.0",
        commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        integrity: "sha256-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      });
      assert.deepEqual(entry.legacyIntegrity, {
        format: TREE_LEGACY,
        value: (fixtureLock() as any).capabilities[HELLO].integrity,
      });
      assert.deepEqual(result.record.config["/settings/demo.hello/greeting"], {
        value: "hello",
        origin: { kind: "operator", ref: "plan.yaml" },
        constraints: [],
        considered: [],
      });
      assert.deepEqual(result.record.entrypoints["hello"], {
        artifact: entry.artifact,
        path: "bin/hello.mjs",
        args: ["--quiet"],
        role: "command",
      });

      const read = await readResolution(scope, result.id, { verify: true });
      assert.equal(read.verified, true);
      assert.deepEqual(JSON.parse(JSON.stringify(read.record)), result.record);
      const artifactDir = retainedTreeDir(scope, entry.artifact);
      assert.ok(existsSync(artifactDir));
      assert.ok(read.entrypoints["hello"]!.endsWith("/bin/hello.mjs"));
      for (const path of Object.values(read.entrypoints))
        assert.ok(path.startsWith(`${realpathSync(artifactDir)}/`), path);
      // Through the fixture's internal symlink, to the same file.
      assert.equal(read.entrypoints["current"], read.entrypoints["hello"]);
    },
  );

  test(
    "Given a prepared plan, When reading the instance reference, Then it " +
      "names the record and lives outside any instance home",
    async () => {
      const scope = tempDir();
      const result = await prepare(scope, basePlan());
      assert.deepEqual(readInstanceRef(scope, "demo"), { schemaVersion: 1, instance: "demo", resolution: result.id });
      assert.deepEqual(result.ref, readInstanceRef(scope, "demo"));
      assert.ok(existsSync(join(scope, ".agents/refs/instances/demo.json")));
      assert.deepEqual(listResolutionIds(scope), [result.id]);
    },
  );

  test(
    "Given a prepared plan, When preparing the same plan again, Then the id " + "is the same and the record is kept",
    async () => {
      const scope = tempDir();
      const first = await prepare(scope, basePlan());
      const second = await prepare(scope, basePlan());
      assert.equal(second.id, first.id);
      assert.equal(second.status, "kept");
      assert.deepEqual(listResolutionIds(scope), [first.id]);
      assert.equal(readInstanceRef(scope, "demo").resolution, first.id);
    },
  );

  test(
    "Given a new plan for a prepared instance, When preparing it, Then the " +
      "reference moves to the new record and the old record stays",
    async () => {
      const scope = tempDir();
      const first = await prepare(scope, basePlan());
      const second = await prepare(scope, otherPlan());
      assert.notEqual(second.id, first.id);
      assert.equal(readInstanceRef(scope, "demo").resolution, second.id);
      assert.deepEqual(listResolutionIds(scope), [first.id, second.id].sort());
    },
  );

  test(
    "Given an operator value equal to a soul requirement, When preparing, " +
      "Then the requirement is kept as a constraint beside the operator's choice",
    async () => {
      const scope = tempDir();
      const requirement = {
        kind: "equals",
        value: "en",
        origin: { kind: "soul-requirement", ref: "souls/a/soul.yaml" },
      };
      const result = await prepare(
        scope,
        basePlan({
          config: [
            {
              pointer: "/settings/demo.hello/language",
              value: "en",
              origin: { kind: "operator", ref: "plan.yaml" },
              constraints: [requirement],
              considered: [{ value: "fr", origin: { kind: "workspace-default", ref: "workspace.yaml" } }],
            },
            {
              pointer: "/settings/demo.hello/tone",
              value: "warm",
              origin: { kind: "soul-requirement", ref: "souls/a/soul.yaml" },
            },
          ],
        }),
      );
      const language = result.record.config["/settings/demo.hello/language"]!;
      assert.deepEqual(language.origin, { kind: "operator", ref: "plan.yaml" });
      assert.deepEqual(language.constraints, [requirement]);
      assert.deepEqual(language.considered, [
        { value: "fr", origin: { kind: "workspace-default", ref: "workspace.yaml" } },
      ]);
      // A value chosen by a soul requirement carries the requirement as a hard constraint.
      assert.deepEqual(result.record.config["/settings/demo.hello/tone"]!.constraints, [
        { kind: "equals", value: "warm", origin: { kind: "soul-requirement", ref: "souls/a/soul.yaml" } },
      ]);
    },
  );

  test(
    "Given an operator value that breaks a soul requirement, When preparing, " +
      "Then invalid-input and nothing is written",
    async () => {
      const scope = tempDir();
      await expectRefusal(
        prepare(
          scope,
          basePlan({
            config: [
              {
                pointer: "/settings/demo.hello/language",
                value: "fr",
                origin: { kind: "operator", ref: "plan.yaml" },
                constraints: [
                  { kind: "equals", value: "en", origin: { kind: "soul-requirement", ref: "souls/a/soul.yaml" } },
                ],
              },
            ],
          }),
        ),
        "invalid-input",
        (error) => assert.equal(error.details["config"], "/settings/demo.hello/language"),
      );
      assert.equal(existsSync(join(scope, ".agents")), false);
    },
  );

  test(
    "Given credential references in bindings and payloads, and counts or " +
      "urls named like tokens, When preparing, Then they are accepted as they are",
    async () => {
      const scope = tempDir();
      const bindings = {
        github: {
          capability: HELLO,
          payload: {
            org: "demo",
            token: { kind: "env", name: "GITHUB_TOKEN" },
            credentials: [{ kind: "provider", provider: "vault", key: "kv/demo/api" }],
            max_tokens: 4096,
            token_url: "https://example.test/oauth/token",
            secret_name: "prod-db",
            password_required: true,
            api_key: "",
          },
          credentialRefs: [
            { kind: "env", name: "GITHUB_TOKEN" },
            { kind: "provider", provider: "vault", key: "kv/demo/api" },
          ],
        },
      };
      const result = await prepare(
        scope,
        basePlan({
          bindings,
          config: [
            {
              pointer: "/settings/demo.hello/max_tokens",
              value: 2048,
              origin: { kind: "workspace-default", ref: "workspace.yaml" },
            },
          ],
          messaging: { responsible: { kind: "team", key: "ops" }, teams: ["ops", "oncall"] },
        }),
      );
      assert.deepEqual(result.record.bindings, bindings);
      assert.deepEqual(result.record.messaging, {
        responsible: { kind: "team", key: "ops" },
        teams: ["ops", "oncall"],
      });
      assert.equal((await readResolution(scope, result.id)).id, result.id);
    },
  );
});

// ------------------------------------------------------------------ secrets

const b = (...parts: string[]) => parts.join(""); // keeps secret-shaped literals out of the source as single tokens

/** One test per shape: the value, and where it is put in the plan. */
const SHAPES: [name: string, secret: string][] = [
  [
    "an OpenSSH private key block",
    b("-----BEGIN OPENSSH ", "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"),
  ],
  [
    "an RSA private key block",
    b("-----BEGIN RSA ", "PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"),
  ],
  ["a PKCS#8 private key block", b("-----BEGIN ", "PRIVATE KEY-----\nMIIEvQIBADANBgkq\n-----END PRIVATE KEY-----")],
  ["a GitHub classic token (ghp_)", b("ghp", "_", "R4nd0mTokenValue0123456789abcdefGHIJ")],
  ["a GitHub OAuth token (gho_)", b("gho", "_", "R4nd0mTokenValue0123456789abcdefGHIJ")],
  ["a GitHub app token (ghs_)", b("ghs", "_", "R4nd0mTokenValue0123456789abcdefGHIJ")],
  [
    "a GitHub fine-grained token (github_pat_)",
    b("github", "_pat_", "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTU"),
  ],
  ["an AWS access key id", b("AKIA", "IOSFODNN7EXAMPLE")],
  ["a Slack bot token", b("xox", "b-", "123456789012-123456789012-abcdefghijklmnopqrstuvwx")],
  ["a Slack user token", b("xox", "p-", "123456789012-123456789012-abcdefghijklmnopqrstuvwx")],
  ["an OpenAI-style key (sk-)", b("sk", "-", "proj-abcdefghijklmnopqrstuvwxyz012345")],
  ["an Anthropic key (sk-ant-)", b("sk", "-ant-", "api03-abcdefghijklmnopqrstuvwxyz")],
  ["a Google API key (AIza)", b("AIza", "SyA-abcdefghijklmnopqrstuvwxyz01234")],
  [
    "a JWT",
    b(
      "eyJ",
      "hbGciOiJIUzI1NiJ9",
      ".",
      "eyJ",
      "zdWIiOiIxMjM0NTY3ODkwIn0",
      ".",
      "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
  ],
  ["an npm token", b("npm", "_", "abcdefghijklmnopqrstuvwxyz0123456789")],
];

/** One test per key name family (case and - / _ variants), with a literal string or number. */
const NAMES: [family: string, key: string, literal: string | number][] = [
  ["password", "db_password", "hunter2-correct-horse"],
  ["password (camelCase)", "adminPassword", "hunter2-correct-horse"],
  ["passwd", "PASSWD", "hunter2-correct-horse"],
  ["secret", "client-secret", "s3cr3t-value-literal"],
  ["secret (camelCase)", "clientSecret", "s3cr3t-value-literal"],
  ["token", "GITHUB_TOKEN", "plain-token-literal-1234"],
  ["token (number)", "auth-token", 90210123],
  ["api_key", "api_key", "plain-api-key-literal"],
  ["apikey", "ApiKey", "plain-api-key-literal"],
  ["api-key", "X-API-KEY", "plain-api-key-literal"],
  ["private_key", "private_key", "plain-private-key-literal"],
  ["private-key (camelCase)", "privateKey", "plain-private-key-literal"],
  ["credential", "credential", "plain-credential-literal"],
  ["credentials", "Credentials", "plain-credential-literal"],
];

describe("prepare: secrets are refused before anything is retained", () => {
  let scope: string;
  let previous: string;
  before(async () => {
    scope = tempDir();
    previous = (await prepare(scope, basePlan())).id;
  });

  async function assertRefused(plan: PlanValue, secret: string, pointer: string): Promise<void> {
    const snapshot = agentsSnapshot(scope);
    const records = recordAndRefSnapshot(scope);
    await expectRefusal(prepare(scope, plan), "secret-in-record", (error) => {
      assert.equal(error.kind, "refused");
      assert.equal(error.details["pointer"], pointer);
      assert.ok(error.message.includes(pointer), error.message);
      assert.ok(!error.message.includes(secret), "the secret is in the message");
      assert.ok(!JSON.stringify(error.toJSON()).includes(secret), "the secret is in the error's JSON");
      assert.ok(
        !JSON.stringify(error.toJSON()).includes(JSON.stringify(secret).slice(1, -1)),
        "the secret (escaped) is in the error's JSON",
      );
    });
    assert.deepEqual(recordAndRefSnapshot(scope), records, "a record or reference changed");
    assert.deepEqual(agentsSnapshot(scope), snapshot, "the scope changed");
    assert.equal(readInstanceRef(scope, "demo").resolution, previous);
    assert.deepEqual(listResolutionIds(scope), [previous]);
  }

  for (const [name, secret] of SHAPES) {
    test(
      `Given ${name} in a config value, When preparing, Then secret-in-record ` +
        `names the pointer, not the secret, and nothing is written`,
      async () => {
        const plan = basePlan({
          config: [
            {
              pointer: "/settings/demo.hello/note",
              value: `see ${secret} here`,
              origin: { kind: "operator", ref: "plan.yaml" },
            },
          ],
        });
        await assertRefused(plan, secret, "/config/~1settings~1demo.hello~1note/value");
      },
    );
  }

  for (const [family, key, literal] of NAMES) {
    test(
      `Given a literal under a key named like ${family} (${key}) in a config ` +
        `pointer, When preparing, Then secret-in-record names the pointer and ` +
        `nothing is written`,
      async () => {
        const plan = basePlan({
          config: [
            { pointer: `/settings/demo.hello/${key}`, value: literal, origin: { kind: "operator", ref: "plan.yaml" } },
          ],
        });
        await assertRefused(plan, String(literal), `/config/~1settings~1demo.hello~1${key}/value`);
      },
    );

    test(
      `Given a literal under a key named like ${family} (${key}) nested in a ` +
        `binding payload, When preparing, Then secret-in-record names the ` +
        `pointer and nothing is written`,
      async () => {
        const plan = basePlan({
          bindings: {
            db: {
              capability: HELLO,
              payload: { connection: { host: "db.internal", [key]: literal } },
              credentialRefs: [],
            },
          },
        });
        await assertRefused(plan, String(literal), `/bindings/db/payload/connection/${key}`);
      },
    );
  }

  test(
    "Given a token inside a git URL in a binding payload, When preparing, " +
      "Then secret-in-record names the payload pointer",
    async () => {
      const secret = SHAPES.find(([name]) => name.includes("ghs_"))![1];
      const plan = basePlan({
        bindings: {
          repo: {
            capability: HELLO,
            payload: { remote: `https://x-access-token:${secret}@github.com/org/repo.git` },
            credentialRefs: [],
          },
        },
      });
      await assertRefused(plan, secret, "/bindings/repo/payload/remote");
    },
  );

  test(
    "Given a password inside a URL in a config value, When preparing, Then " +
      "secret-in-record names the pointer and never echoes the password",
    async () => {
      const plan = basePlan({
        config: [
          {
            pointer: "/settings/demo.hello/dsn",
            value: "postgres://app:s3cretPw@db.example.test/app",
            origin: { kind: "operator", ref: "plan.yaml" },
          },
        ],
      });
      await assertRefused(plan, "s3cretPw", "/config/~1settings~1demo.hello~1dsn/value");
    },
  );

  test(
    "Given a password inside a URL in an argument, When preparing, Then " + "secret-in-record names the argument",
    async () => {
      const plan = basePlan({
        entrypoints: {
          hello: {
            capability: HELLO,
            path: "bin/hello.mjs",
            args: ["--db", "postgres://app:s3cretPw@db.example.test/app"],
            role: "command",
          },
        },
      });
      await assertRefused(plan, "s3cretPw", "/entrypoints/hello/args/1");
    },
  );

  for (const [form, args, pointer] of [
    ["--password=value", ["--password=hunter2"], "/entrypoints/hello/args/0"],
    ["--db-password value", ["--verbose", "--db-password", "hunter2"], "/entrypoints/hello/args/2"],
    ["-token value", ["-token", "hunter2"], "/entrypoints/hello/args/1"],
  ] as const) {
    test(
      `Given a secret-named option with its value (${form}) in an entry ` +
        `point's arguments, When preparing, Then secret-in-record names the ` +
        `value's argument (the scanner reconstruct uses)`,
      async () => {
        const plan = basePlan({
          entrypoints: { hello: { capability: HELLO, path: "bin/hello.mjs", args: [...args], role: "command" } },
        });
        await assertRefused(plan, "hunter2", pointer);
      },
    );
  }

  test("Given ordinary options and URLs without a password, When preparing, Then nothing is refused", async () => {
    const plan = basePlan({
      entrypoints: {
        hello: {
          capability: HELLO,
          path: "bin/hello.mjs",
          args: ["--max-tokens=5", "--token-url", "https://user@host/x", "--password="],
          role: "command",
        },
      },
    });
    await prepare(tempDir(), plan);
  });

  test(
    "Given a token in an entry point's arguments, When preparing, Then " + "secret-in-record names the argument",
    async () => {
      const secret = SHAPES.find(([name]) => name.includes("npm"))![1];
      const plan = basePlan({
        entrypoints: {
          hello: { capability: HELLO, path: "bin/hello.mjs", args: [`--token=${secret}`], role: "command" },
        },
      });
      await assertRefused(plan, secret, "/entrypoints/hello/args/0");
    },
  );

  test(
    "Given a secret under a soul requirement's constraint or a considered " +
      "value, When preparing, Then secret-in-record names that pointer",
    async () => {
      const secret = "hunter2-constraint-literal";
      const plan = basePlan({
        config: [
          {
            pointer: "/settings/demo.hello/password",
            value: { kind: "env", name: "DB_PASSWORD" },
            origin: { kind: "operator", ref: "plan.yaml" },
            considered: [{ value: secret, origin: { kind: "soul-default", ref: "souls/a/soul.yaml" } }],
          },
        ],
      });
      await assertRefused(plan, secret, "/config/~1settings~1demo.hello~1password/considered/0/value");
    },
  );

  test(
    "Given a lock whose package source carries a token in its URL, When " +
      "preparing, Then secret-in-record names the record's package source " +
      "before anything is retained",
    async () => {
      const secret = SHAPES.find(([name]) => name.includes("ghs_"))![1];
      const lock = fixtureLock() as any;
      lock.packages["demo.hello-pkg"].source = `git:https://x-access-token:${secret}@github.com/demo/hello.git`;
      const lockPath = join(tempDir("oats-lock-"), "oats-lock.json");
      writeFileSync(lockPath, JSON.stringify(lock));
      await assertRefused(
        basePlan({ capabilities: [{ id: HELLO, dir: FIXTURE_PAYLOAD, lock: lockPath }] }),
        secret,
        "/artifacts/demo.hello/package/source",
      );
    },
  );

  test(
    "Given a secret-shaped key in a payload, When preparing, Then the " +
      "finding names the enclosing object and never the key",
    async () => {
      const secret = SHAPES.find(([name]) => name.includes("AWS"))![1];
      const plan = basePlan({
        bindings: { aws: { capability: HELLO, payload: { keys: { [secret]: "enabled" } }, credentialRefs: [] } },
      });
      await assertRefused(plan, secret, "/bindings/aws/payload/keys");
    },
  );

  test(
    "Given a secret in a plan for an empty scope, When preparing, Then " +
      "nothing at all is created: not the store, not a capability artifact",
    async () => {
      const empty = tempDir();
      await expectRefusal(
        prepare(
          empty,
          basePlan({
            config: [
              {
                pointer: "/settings/demo.hello/api_key",
                value: "plain-api-key-literal",
                origin: { kind: "operator", ref: "plan.yaml" },
              },
            ],
          }),
        ),
        "secret-in-record",
      );
      assert.deepEqual(readdirSync(empty), []);
    },
  );
});

describe("findSecrets: the scanner on its own", () => {
  test(
    "Given values with and without secrets, When scanning, Then only the " +
      "secrets are found, with pointers and kinds",
    () => {
      const aws = SHAPES.find(([name]) => name.includes("AWS"))![1];
      assert.deepEqual(
        findSecrets({ a: [1, { password: "x" }], b: aws, c: { token: { kind: "env", name: "T" } } }, "/p"),
        [
          { pointer: "/p/a/1/password", kind: "secret-named-literal" },
          { pointer: "/p/b", kind: "aws-access-key" },
        ],
      );
      assert.deepEqual(findSecrets("plain", "/x", { key: "secret" }), [
        { pointer: "/x", kind: "secret-named-literal" },
      ]);
      assert.deepEqual(findSecrets({ "a/b": { "c~d": { password: 1 } } }, ""), [
        { pointer: "/a~1b/c~0d/password", kind: "secret-named-literal" },
      ]);
      assert.deepEqual(
        findSecrets(
          { password: "", enabled: true, none: null, credentials: [{ kind: "provider", provider: "vault", key: "k" }] },
          "",
        ),
        [],
      );
      assert.deepEqual(
        findSecrets({ task: "task-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", mask: "askew-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" }, ""),
        [],
      );
    },
  );

  test(
    "Given key names, When classifying, Then secret nouns match and counts, " + "urls and names of secrets do not",
    () => {
      for (const key of [
        "password",
        "db_password",
        "PASSWD",
        "clientSecret",
        "client-secret",
        "secrets",
        "token",
        "GITHUB_TOKEN",
        "api_key",
        "apiKey",
        "APIKEY",
        "x-api-key",
        "private_key",
        "privateKey",
        "secret_access_key",
        "credential",
        "Credentials",
      ]) {
        assert.equal(isSecretKeyName(key), true, key);
      }
      for (const key of [
        "max_tokens",
        "tokens",
        "token_url",
        "secret_name",
        "password_required",
        "key",
        "public_key",
        "name",
        "tokenizer",
        "credentialRefs",
      ]) {
        assert.equal(isSecretKeyName(key), false, key);
      }
    },
  );
});

// ------------------------------------------------------------------ plans

describe("plans: parsed strictly, paths against the plan file", () => {
  test(
    "Given a plan naming the same capability twice, When preparing, Then " +
      "invalid-input names the capability and nothing is written",
    async () => {
      const scope = tempDir();
      const plan = basePlan({
        capabilities: [basePlan().capabilities[0], { id: HELLO, dir: fixtureCopy(), lock: FIXTURE_LOCK }],
      });
      await expectRefusal(prepare(scope, plan), "invalid-input", (error) => {
        assert.equal(error.details["capability"], HELLO);
        assert.equal(error.details["pointer"], "/capabilities/1/id");
      });
      assert.deepEqual(readdirSync(scope), []);
    },
  );

  test(
    "Given a YAML plan with relative paths, When reading it, Then the paths " +
      "resolve against the plan's directory and it prepares",
    async () => {
      const home = tempDir("oats-plan-");
      cpSync(FIXTURE_PAYLOAD, join(home, "caps/hello"), { recursive: true, verbatimSymlinks: true });
      cpSync(FIXTURE_LOCK, join(home, "oats-lock.json"));
      const planPath = join(home, "plan.yaml");
      writeFileSync(
        planPath,
        [
          "schemaVersion: 1",
          "instance: demo",
          "capabilities:",
          "  - id: demo.hello",
          "    dir: caps/hello",
          "    lock: ./oats-lock.json",
          "config:",
          "  - pointer: /settings/demo.hello/greeting",
          "    value: hello",
          "    origin: {kind: operator, ref: plan.yaml}",
          "entrypoints:",
          "  hello: {capability: demo.hello, path: bin/hello.mjs, role: command}",
          "",
        ].join("\n"),
      );
      const plan = readPlanFile(planPath);
      assert.deepEqual(plan.capabilities, [
        { id: HELLO, dir: join(home, "caps/hello"), lock: join(home, "oats-lock.json") },
      ]);
      const scope = tempDir();
      const result = await prepare(scope, plan);
      assert.equal(result.record.entrypoints["hello"]!.path, "bin/hello.mjs");
      // The same plan as JSON gives the same record.
      const jsonPath = join(home, "plan.json");
      writeFileSync(
        jsonPath,
        JSON.stringify({
          ...basePlan(),
          capabilities: [{ id: HELLO, dir: "caps/hello", lock: "oats-lock.json" }],
          entrypoints: { hello: basePlan().entrypoints.hello },
        }),
      );
      const fromJson = await prepare(scope, readPlanFile(jsonPath));
      assert.equal(
        fromJson.record.artifacts[HELLO]!.artifact.integrity.value,
        result.record.artifacts[HELLO]!.artifact.integrity.value,
      );
    },
  );

  test("Given malformed plans, When parsing, Then each is invalid-input", () => {
    const bad: [string, unknown][] = [
      ["an extra field", { ...basePlan(), extra: 1 }],
      ["a missing field", (({ entrypoints, ...rest }) => rest)(basePlan())],
      ["schemaVersion 2", { ...basePlan(), schemaVersion: 2 }],
      [
        "an extra field in a capability",
        basePlan({ capabilities: [{ id: HELLO, dir: "d", lock: "l", tarball: true }] }),
      ],
      ["an invalid capability id", basePlan({ capabilities: [{ id: "Demo", dir: "d", lock: "l" }] })],
      [
        "an entry point into an unlisted capability",
        basePlan({ entrypoints: { x: { capability: "demo.other", path: "a", role: "command" } } }),
      ],
      [
        "an entry point into the source without one",
        basePlan({ entrypoints: { x: { capability: "source", path: "a", role: "command" } } }),
      ],
      [
        "a binding to an unlisted capability",
        basePlan({ bindings: { s: { capability: "demo.other", payload: {}, credentialRefs: [] } } }),
      ],
      [
        "a credential ref with a value",
        basePlan({
          bindings: { s: { capability: HELLO, payload: {}, credentialRefs: [{ kind: "env", name: "X", value: "v" }] } },
        }),
      ],
      ["the same config pointer twice", basePlan({ config: [basePlan().config[0], basePlan().config[0]] })],
      ["an unknown role", basePlan({ entrypoints: { x: { capability: HELLO, path: "a", role: "daemon" } } })],
      [
        "an entry point climbing out",
        basePlan({ entrypoints: { x: { capability: HELLO, path: "../../bin/sh", role: "command" } } }),
      ],
      [
        "an absolute entry point",
        basePlan({ entrypoints: { x: { capability: HELLO, path: "/bin/sh", role: "command" } } }),
      ],
      [
        "a capability tarball",
        basePlan({ capabilities: [{ id: HELLO, dir: "hello-1.2.0.tgz", lock: "oats-lock.json" }] }),
      ],
      [
        "a __proto__ key",
        JSON.parse(
          '{"schemaVersion":1,"instance":"demo","capabilities":[],"entrypoints":{},' +
            '"bindings":{"s":{"capability":"x","payload":{"__proto__":{"a":1}},"credentialRefs":[]}}}',
        ),
      ],
    ];
    for (const [name, value] of bad) {
      assert.throws(() => parsePlan(value as JsonValue, "/tmp"), refusal("invalid-input"), name);
    }
    assert.throws(
      () =>
        parsePlan(basePlan({ capabilities: [{ id: HELLO, dir: "hello-1.2.0.tgz", lock: "oats-lock.json" }] }), "/tmp"),
      (error) => error instanceof OatsError && /not yet supported/.test(error.message),
    );
  });

  test("Given plan files that are not plans, When reading them, Then invalid-input", () => {
    const dir = tempDir("oats-plan-");
    const cases: [string, string][] = [
      ["dup.yaml", "schemaVersion: 1\nschemaVersion: 1\ninstance: demo\ncapabilities: []\nentrypoints: {}\n"],
      ["two.yaml", "schemaVersion: 1\n---\nschemaVersion: 1\n"],
      ["bad.json", "{"],
      ["plan.txt", "{}"],
    ];
    for (const [name, text] of cases) {
      writeFileSync(join(dir, name), text);
      assert.throws(() => readPlanFile(join(dir, name)), refusal("invalid-input"), name);
    }
    assert.throws(() => readPlanFile(join(dir, "missing.yaml")), refusal("invalid-input"));
  });

  test(
    "Given a capability that is a file (a tarball not named as one), When " +
      "preparing, Then invalid-input says not yet supported, and nothing is written",
    async () => {
      const scope = tempDir();
      const file = join(tempDir(), "hello.bin");
      writeFileSync(file, "not a directory");
      await expectRefusal(
        prepare(scope, basePlan({ capabilities: [{ id: HELLO, dir: file, lock: FIXTURE_LOCK }] })),
        "invalid-input",
        (error) => assert.match(error.message, /not yet supported/),
      );
      assert.deepEqual(readdirSync(scope), []);
    },
  );
});

// ------------------------------------------------------------------ entry points

describe("entry points: resolved inside their retained artifact at prepare and at read", () => {
  test(
    "Given an entry point ../../bin/sh, When resolving it inside a retained " + "artifact, Then artifact-not-contained",
    async () => {
      const scope = tempDir();
      const result = await prepare(scope, basePlan());
      const artifact = result.record.artifacts[HELLO]!.artifact;
      await expectRefusal(resolveEntrypoint(scope, "sh", { artifact, path: "../../bin/sh" }), "artifact-not-contained");
      // Out through a sibling and back in by a symlink: it lands on a file inside, but the path climbs out, so it is
      // still refused.
      const dir = retainedTreeDir(scope, artifact);
      const parent = dirname(dir);
      const mode = statSync(parent).mode & 0o7777;
      chmodSync(parent, 0o755);
      mkdirSync(join(parent, "sibling"));
      symlinkSync(join(dir, "bin/hello.mjs"), join(parent, "sibling/hello.mjs"));
      chmodSync(parent, mode);
      await expectRefusal(
        resolveEntrypoint(scope, "back", { artifact, path: "../sibling/hello.mjs" }),
        "artifact-not-contained",
      );
    },
  );

  test(
    "Given an entry point that is missing from the artifact, When preparing, " +
      "Then artifact-not-found and no record or reference moves",
    async () => {
      const scope = tempDir();
      const previous = (await prepare(scope, basePlan())).id;
      const records = recordAndRefSnapshot(scope);
      await expectRefusal(
        prepare(
          scope,
          basePlan({ entrypoints: { nope: { capability: HELLO, path: "bin/nope.mjs", role: "command" } } }),
        ),
        "artifact-not-found",
        (error) => assert.equal(error.details["entrypoint"], "nope"),
      );
      assert.deepEqual(recordAndRefSnapshot(scope), records);
      assert.equal(readInstanceRef(scope, "demo").resolution, previous);
    },
  );

  test(
    "Given an entry point that names a directory, When preparing, Then " +
      "artifact-not-found and no record or reference moves",
    async () => {
      const scope = tempDir();
      const previous = (await prepare(scope, basePlan())).id;
      const records = recordAndRefSnapshot(scope);
      await expectRefusal(
        prepare(scope, basePlan({ entrypoints: { bin: { capability: HELLO, path: "bin", role: "command" } } })),
        "artifact-not-found",
      );
      assert.deepEqual(recordAndRefSnapshot(scope), records);
      assert.equal(readInstanceRef(scope, "demo").resolution, previous);
    },
  );

  test(
    "Given a symlink planted in the retained tree that leaves it, When " +
      "resolving and reading, Then artifact-not-contained",
    async () => {
      const scope = tempDir();
      const result = await prepare(scope, basePlan());
      const artifact: ArtifactRefRecord = result.record.artifacts[HELLO]!.artifact;
      const dir = retainedTreeDir(scope, artifact);
      const outside = join(tempDir(), "outside.mjs");
      writeFileSync(outside, "console.log('outside')\n");
      chmodSync(dir, 0o755);
      symlinkSync(outside, join(dir, "escape.mjs"));
      await expectRefusal(
        resolveEntrypoint(scope, "escape", { artifact, path: "escape.mjs" }),
        "artifact-not-contained",
      );
      // The record's own symlink entry point, repointed outside: readResolution refuses it (verify would also refuse
      // the damaged tree).
      unlinkSync(join(dir, "current.mjs"));
      symlinkSync("../../../../../../../../../../../../../../../../etc/hostname", join(dir, "current.mjs"));
      await expectRefusal(readResolution(scope, result.id), "artifact-not-contained", (error) =>
        assert.equal(error.details["entrypoint"], "current"),
      );
      await expectRefusal(readResolution(scope, result.id, { verify: true }), "integrity-mismatch");
    },
  );
});

// ------------------------------------------------------------------ failures after retention

describe("failures after retention leave the previous reference in force", () => {
  test(
    "Given a second capability whose provenance disagrees with its lock, " +
      "When preparing, Then provenance-mismatch, the previous reference stays " +
      "and no new record exists",
    async () => {
      const scope = tempDir();
      const previous = (await prepare(scope, basePlan())).id;
      const bad = await makeCapability("demo.two", { lockCommit: "0123456789abcdef0123456789abcdef01234567" });
      const plan = otherPlan();
      plan["capabilities"].push(bad);
      const records = recordAndRefSnapshot(scope);
      await expectRefusal(prepare(scope, plan), "provenance-mismatch");
      assert.deepEqual(recordAndRefSnapshot(scope), records);
      assert.equal(readInstanceRef(scope, "demo").resolution, previous);
      assert.deepEqual(listResolutionIds(scope), [previous]);
    },
  );

  test(
    "Given a failure injected after retention, When preparing, Then the " +
      "failure surfaces, the previous reference stays and no new record exists",
    async () => {
      const scope = tempDir();
      const previous = (await prepare(scope, basePlan())).id;
      const records = recordAndRefSnapshot(scope);
      setPrepareHook((step) => {
        if (step === "retained") throw new OatsError("invalid-input", "injected after retention");
      });
      try {
        await expectRefusal(prepare(scope, otherPlan()), "invalid-input", (error) =>
          assert.equal(error.message, "injected after retention"),
        );
      } finally {
        setPrepareHook(null);
      }
      assert.deepEqual(recordAndRefSnapshot(scope), records);
      assert.equal(readInstanceRef(scope, "demo").resolution, previous);
    },
  );

  test(
    "Given the record commit fails (a directory where the new record goes), " +
      "When preparing, Then the refusal surfaces and the reference is not moved",
    async () => {
      // Records name no scope, so the new record's id can be learned in another scope.
      const newId = (await prepare(tempDir(), otherPlan())).id;
      const scope = tempDir();
      const previous = (await prepare(scope, basePlan())).id;
      mkdirSync(join(scope, ".agents/resolutions", `${newId}.json`));
      await expectRefusal(prepare(scope, otherPlan()), "invalid-resolution");
      assert.equal(readInstanceRef(scope, "demo").resolution, previous);
      assert.deepEqual(
        listResolutionIds(scope).filter((id) => id !== newId),
        [previous],
      );
    },
  );

  test(
    "Given a failure between the record commit and the reference, When " +
      "preparing, Then the reference is not moved and the new record is " +
      "selected by nothing",
    async () => {
      const scope = tempDir();
      const previous = (await prepare(scope, basePlan())).id;
      setPrepareHook((step) => {
        if (step === "record-written") throw new OatsError("invalid-input", "injected after the record");
      });
      try {
        await expectRefusal(prepare(scope, otherPlan()), "invalid-input");
      } finally {
        setPrepareHook(null);
      }
      assert.equal(readInstanceRef(scope, "demo").resolution, previous);
    },
  );
});

// ------------------------------------------------------------------ reliability

interface ChildOutcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  result?: { ok: true; id: string; status: string } | { ok: false; error: { code: string; message: string } };
}

function startChild(request: Record<string, unknown>): {
  process: ChildProcess;
  stderrMatch: (pattern: RegExp) => Promise<void>;
  done: Promise<ChildOutcome>;
} {
  const child = spawn(process.execPath, ["--import", "tsx", CHILD, JSON.stringify(request)], {
    cwd: REPO,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  const waiters: { pattern: RegExp; resolve: () => void }[] = [];
  const check = () => {
    for (const waiter of waiters) if (waiter.pattern.test(stderr)) waiter.resolve();
  };
  child.stdout!.setEncoding("utf8").on("data", (data: string) => (stdout += data));
  child.stderr!.setEncoding("utf8").on("data", (data: string) => {
    stderr += data;
    check();
  });
  const done = new Promise<ChildOutcome>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => {
      for (const waiter of waiters) waiter.resolve();
      const line = stdout.trim().split("\n").pop();
      let result: ChildOutcome["result"];
      try {
        result = line ? JSON.parse(line) : undefined;
      } catch {
        result = undefined;
      }
      resolve({ code, signal, stdout, stderr, ...(result ? { result } : {}) });
    });
  });
  const stderrMatch = (pattern: RegExp) =>
    new Promise<void>((resolve) => {
      waiters.push({ pattern, resolve });
      check();
    });
  return { process: child, stderrMatch, done };
}

describe("reliability", () => {
  test(
    "Given two processes preparing the same plan at once, When both finish, " +
      "Then both succeed with one record id and the reference names it",
    async () => {
      const scope = tempDir();
      const plan = basePlan({ capabilities: [{ id: HELLO, dir: fixtureCopy(), lock: FIXTURE_LOCK }] });
      const children = [startChild({ scope, plan, waitForGo: true }), startChild({ scope, plan, waitForGo: true })];
      await Promise.all(children.map((child) => child.stderrMatch(/^ready$/m)));
      for (const child of children) child.process.stdin!.end("go\n");
      const outcomes = await Promise.all(children.map((child) => child.done));
      for (const outcome of outcomes) assert.equal(outcome.result?.ok, true, `${outcome.stdout}\n${outcome.stderr}`);
      const ids = new Set(outcomes.map((outcome) => (outcome.result as { id: string }).id));
      assert.equal(ids.size, 1);
      const [id] = ids;
      assert.deepEqual(listResolutionIds(scope), [id]);
      assert.equal(readInstanceRef(scope, "demo").resolution, id);
      assert.deepEqual(outcomes.map((outcome) => (outcome.result as { status: string }).status).sort(), [
        "kept",
        "written",
      ]);
      await readResolution(scope, id!, { verify: true });
    },
  );

  test(
    "Given a preparer SIGKILLed between retention and the record commit, " +
      "When it is gone, Then the previous reference is in force and no new " +
      "record is selectable",
    async () => {
      const scope = tempDir();
      const previous = (await prepare(scope, basePlan())).id;
      const two = await makeCapability("demo.two");
      const plan = otherPlan();
      plan["capabilities"].push(two);
      const child = startChild({ scope, plan, blockAt: "retained" });
      await child.stderrMatch(/^blocked retained$/m);
      // Retention has happened: the new capability's revisions exist.
      assert.ok(
        readdirSync(join(scope, ".agents/capabilities/artifacts/demo.two/tree-exec-v1")).some((name) =>
          name.startsWith("sha256-"),
        ),
      );
      child.process.kill("SIGKILL");
      const outcome = await child.done;
      assert.equal(outcome.signal, "SIGKILL");
      assert.equal(readInstanceRef(scope, "demo").resolution, previous);
      assert.deepEqual(listResolutionIds(scope), [previous]);
      assert.deepEqual(
        readdirSync(join(scope, ".agents/resolutions")).filter((name) => name !== ".gitignore"),
        [`${previous}.json`],
      );
      // And the scope stays usable: preparing again completes and moves the reference.
      const again = await prepare(scope, plan);
      assert.equal(readInstanceRef(scope, "demo").resolution, again.id);
    },
  );

  test(
    "Given a prepared instance, When its source tree, lock and instance home " +
      "are deleted, Then the record still reads, verifies and resolves every " +
      "entry point inside retained artifacts",
    async () => {
      const home = tempDir("oats-home-");
      cpSync(FIXTURE_PAYLOAD, join(home, ".agents/capabilities/installed/demo.hello"), {
        recursive: true,
        verbatimSymlinks: true,
      });
      cpSync(FIXTURE_LOCK, join(home, "oats-lock.json"));
      mkdirSync(join(home, "soul/bin"), { recursive: true });
      writeFileSync(join(home, "soul/bin/launch.sh"), '#!/bin/sh\nexec node "$@"\n', { mode: 0o755 });
      writeFileSync(join(home, "soul/soul.yaml"), "name: demo\n");
      const scope = tempDir();
      const plan = basePlan({
        source: { identity: `path:${join(home, "soul")}`, revision: "local", dir: "soul" },
        capabilities: [{ id: HELLO, dir: ".agents/capabilities/installed/demo.hello", lock: "oats-lock.json" }],
        entrypoints: {
          ...basePlan().entrypoints,
          launch: { capability: "source", path: "bin/launch.sh", args: [], role: "launch" },
        },
      });
      const result = await prepare(scope, plan, { baseDir: home });
      rmSync(home, { recursive: true, force: true });
      assert.equal(existsSync(home), false);

      const read = await readResolution(scope, result.id, { verify: true });
      assert.equal(read.verified, true);
      assert.deepEqual(Object.keys(read.entrypoints).sort(), ["current", "hello", "launch"]);
      const capabilityDir = realpathSync(retainedTreeDir(scope, read.record.artifacts[HELLO]!.artifact));
      const sourceDir = realpathSync(retainedTreeDir(scope, read.record.source!.artifact));
      assert.ok(read.entrypoints["hello"]!.startsWith(`${capabilityDir}/`), read.entrypoints["hello"]);
      assert.ok(read.entrypoints["current"]!.startsWith(`${capabilityDir}/`));
      assert.equal(read.entrypoints["launch"], join(sourceDir, "bin/launch.sh"));
      assert.equal(readFileSync(read.entrypoints["launch"]!, "utf8"), '#!/bin/sh\nexec node "$@"\n');
      assert.equal(readInstanceRef(scope, "demo").resolution, result.id);
    },
  );
});
