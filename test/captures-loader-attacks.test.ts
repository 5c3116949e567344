/**
 * Loader variables that name a file outside the approved tree (captures.md,
 * "Loader variables"). The approval pins a variable's value, a path, and
 * not the bytes at that path; a spec author who approves a harmless file
 * and then edits only that file would run anything under the same approval.
 * Each attack here is carried out for real: a real OpenSSL provider and a
 * real LD_PRELOAD library built with cc, real configs, real Node and sh
 * children, and a marker file the attacker's code writes. Each must be
 * refused before anything runs, and the marker must never appear.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import {
  OatsError,
  type RecurrencePolicy,
  addJob,
  approve,
  compositionOf,
  compositionSubject,
  currentPrincipal,
  prepareCapture,
  readAudit,
  resolveQueuedCapture,
  runDispatchPlan,
} from "../src/index.js";
import { canonicalJsonBytes } from "../src/core/index.js";
import { putBlob } from "../src/retention/index.js";
import { type ResolutionRecord, writeResolution } from "../src/resolution/index.js";
import { snapshotTree, tempDir } from "./helpers.js";

/**
 * A real OpenSSL provider: OpenSSL calls OSSL_provider_init when a config
 * activates it, and this one writes the marker there. The types are opaque
 * pointers (ABI-identical to openssl/core.h), so no OpenSSL headers are
 * needed to build it.
 */
const PROVIDER_C = `
#include <stdio.h>
typedef struct { int function_id; void (*function)(void); } dispatch_entry;
int OSSL_provider_init(const void *handle, const void *in, const dispatch_entry **out, void **provctx) {
  static const dispatch_entry none[] = { { 0, 0 } };
  FILE *f = fopen(MARKER, "w");
  if (f) { fputs("provider initialised\\n", f); fclose(f); }
  (void)handle; (void)in; *out = none; *provctx = 0;
  return 1;
}
`;

/** A library whose constructor writes the marker as soon as ld.so loads it. */
const PRELOAD_C = `
#include <stdio.h>
__attribute__((constructor)) static void loaded(void) {
  FILE *f = fopen(MARKER, "w");
  if (f) { fputs("preloaded\\n", f); fclose(f); }
}
`;

/** Build a shared object writing `marker`, or null when no C compiler is installed. */
function sharedObject(dir: string, name: string, source: string, marker: string): string | null {
  const c = join(dir, `${name}.c`);
  const so = join(dir, `${name}.so`);
  writeFileSync(c, source);
  const built = spawnSync("cc", ["-shared", "-fPIC", `-DMARKER=${JSON.stringify(marker)}`, "-o", so, c], {
    encoding: "utf8",
  });
  return built.status === 0 ? so : null;
}

/** The OpenSSL config Node reads at start (its `nodejs_conf` section); with a provider, it loads that library. */
function opensslConfig(provider: string | null): string {
  const lines = ["nodejs_conf = conf_sect", "", "[conf_sect]"];
  if (provider === null) return `${lines.join("\n")}\n`;
  return `${[
    ...lines,
    "providers = prov_sect",
    "",
    "[prov_sect]",
    "default = default_sect",
    "evil = evil_sect",
    "",
    "[default_sect]",
    "activate = 1",
    "",
    "[evil_sect]",
    `module = ${provider}`,
    "activate = 1",
  ].join("\n")}\n`;
}

interface Setup {
  /** Files of the tool tree by relative path. */
  readonly files: Record<string, { body: string; mode?: number }>;
  /** Symlinks of the tool tree: relative path → target. */
  readonly links?: Record<string, string>;
  readonly entry: string;
  readonly env: Record<string, string>;
  readonly loaderEnv?: string[];
}

interface Fixture {
  readonly base: string;
  readonly scope: string;
  readonly tool: string;
  readonly outside: string;
  readonly specPath: string;
  readonly marker: string;
}

/** An attacker-owned directory `outside` (beside the tool tree), the tool tree, a config and the spec. */
function fixture(build: (f: Fixture) => Setup): Fixture {
  const base = tempDir("oats-loader-attack-");
  const f: Fixture = {
    base,
    scope: join(base, "scope"),
    tool: join(base, "home", "tool"),
    outside: join(base, "outside"),
    specPath: join(base, "home", "spec.yaml"),
    marker: join(base, "outside", "marker"),
  };
  mkdirSync(f.scope, { recursive: true });
  mkdirSync(f.tool, { recursive: true });
  mkdirSync(f.outside, { recursive: true });
  const setup = build(f);
  for (const [path, file] of Object.entries(setup.files)) {
    mkdirSync(dirname(join(f.tool, path)), { recursive: true });
    writeFileSync(join(f.tool, path), file.body);
    chmodSync(join(f.tool, path), file.mode ?? 0o644);
  }
  for (const [path, target] of Object.entries(setup.links ?? {})) {
    mkdirSync(dirname(join(f.tool, path)), { recursive: true });
    symlinkSync(target, join(f.tool, path));
  }
  writeFileSync(
    join(base, "home", "class.yaml"),
    stringify({
      schemaVersion: 1,
      wings: { ops: "internal" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    }),
  );
  writeFileSync(
    f.specPath,
    stringify({
      name: "job",
      executable: { tree: "./tool", path: setup.entry, args: [] },
      target: { wing: "ops" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      env: setup.env,
      ...(setup.loaderEnv ? { loaderEnv: setup.loaderEnv } : {}),
      credentials: [],
      // Tests run as root: only a privileged composition may run there (privilege.ts).
      privileged: true,
    }),
  );
  return f;
}

const NODE_ENTRY = { "bin/run.mjs": { body: 'console.log("entry ran");\n' } };
const SH_ENTRY = { "bin/run": { body: "#!/bin/sh\necho entry ran\n", mode: 0o755 } };

async function dispatchAndRun(scope: string, job: string) {
  const plan = await resolveQueuedCapture(scope, job, { env: {} });
  return { plan, run: await runDispatchPlan(plan, { stdio: "pipe" }) };
}

/**
 * The attack in full: prepare, approve, queue and run the harmless version,
 * then `swap` (edit only the file the variable names) and dispatch the same
 * job under the same approval. Returns where it was refused and what ran.
 */
async function attack(f: Fixture, swap: () => void, policy: RecurrencePolicy = "capture") {
  const ran: number[] = [];
  let stage = "prepare";
  try {
    const prepared = await prepareCapture(f.scope, f.specPath);
    stage = "approve";
    await approve(f.scope, prepared.composition.subject, { reason: "reviewed: harmless" });
    await addJob(f.scope, { job: "job", resolution: prepared.id, recurrence: { policy } });
    stage = "dispatch";
    ran.push((await dispatchAndRun(f.scope, "job")).run.code);
    swap();
    ran.push((await dispatchAndRun(f.scope, "job")).run.code);
    return { error: null, stage: null, ran };
  } catch (error) {
    return { error, stage, ran };
  }
}

function isRefusal(error: unknown, code: string, reason?: string, variable?: string): OatsError {
  assert.ok(error instanceof OatsError, `expected a refusal, got ${String((error as Error)?.stack ?? error)}`);
  assert.equal(error.code, code, error.message);
  if (reason !== undefined) assert.equal(error.details["reason"], reason, error.message);
  if (variable !== undefined) {
    assert.equal(error.details["variable"], variable, error.message);
    assert.ok(error.message.includes(variable), error.message);
  }
  return error;
}

/** Nothing but audit entries was written: no revision, blob or record. */
function onlyAudited(scope: string): void {
  const rows = snapshotTree(scope).filter((row) => row.startsWith("F ") && !row.includes(".agents/audit"));
  assert.deepEqual(rows, []);
}

describe("a loader variable naming a file outside the tree", () => {
  for (const listed of [false, true]) {
    test(
      "Given OPENSSL_CONF at a harmless config outside the tree " +
        `(${listed ? "listed under loaderEnv" : "plain env"}), ` +
        "When the author approves it, swaps the config to load a provider .so and dispatches again, " +
        "Then capture prepare already refuses and the provider never runs",
      async (t) => {
        const f = fixture((f) => ({
          files: NODE_ENTRY,
          entry: "bin/run.mjs",
          env: { OPENSSL_CONF: join(f.outside, "openssl.cnf") },
          ...(listed ? { loaderEnv: ["OPENSSL_CONF"] } : {}),
        }));
        const provider = sharedObject(f.outside, "evil-provider", PROVIDER_C, f.marker);
        if (provider === null) return t.skip("no C compiler (cc) to build the provider");
        writeFileSync(join(f.outside, "openssl.cnf"), opensslConfig(null));
        const outcome = await attack(f, () => writeFileSync(join(f.outside, "openssl.cnf"), opensslConfig(provider)));
        assert.equal(existsSync(f.marker), false, "the provider never ran");
        assert.deepEqual([outcome.stage, outcome.ran], ["prepare", []], "refused at prepare, nothing dispatched");
        const error = isRefusal(outcome.error, "invalid-input");
        assert.ok(error.message.includes("OPENSSL_CONF"), error.message);
        if (listed) assert.equal(error.details["reason"], "loader-path-outside-tree");
        onlyAudited(f.scope);
      },
    );
  }

  for (const name of ["OPENSSL_MODULES", "OPENSSL_ENGINES"]) {
    test(`Given ${name} at a directory outside the tree, When prepared, Then refused naming it`, async () => {
      const f = fixture((f) => ({
        files: NODE_ENTRY,
        entry: "bin/run.mjs",
        env: { [name]: f.outside },
        loaderEnv: [name],
      }));
      const outcome = await attack(f, () => {});
      isRefusal(outcome.error, "invalid-input", "loader-path-outside-tree", name);
      assert.deepEqual([outcome.stage, outcome.ran], ["prepare", []]);
    });
  }

  test(
    "Given NODE_OPTIONS=--require /outside/evil.js, When the author approves a harmless evil.js, swaps it " +
      "and dispatches again, Then capture prepare already refuses and evil.js never runs",
    async () => {
      const f = fixture((f) => ({
        files: NODE_ENTRY,
        entry: "bin/run.mjs",
        env: { NODE_OPTIONS: `--require ${join(f.outside, "evil.js")}` },
        loaderEnv: ["NODE_OPTIONS"],
      }));
      writeFileSync(join(f.outside, "evil.js"), "// harmless for now\n");
      const outcome = await attack(f, () =>
        writeFileSync(
          join(f.outside, "evil.js"),
          `require("node:fs").writeFileSync(${JSON.stringify(f.marker)}, "preloaded");\n`,
        ),
      );
      assert.equal(existsSync(f.marker), false, "evil.js never ran");
      assert.deepEqual([outcome.stage, outcome.ran], ["prepare", []]);
      isRefusal(outcome.error, "invalid-input", "loader-path-outside-tree", "NODE_OPTIONS");
    },
  );

  test(
    "Given LD_PRELOAD at a library outside the tree, When the author approves a harmless one, swaps it " +
      "and dispatches again, Then capture prepare already refuses and the library never loads",
    async (t) => {
      const f = fixture((f) => ({
        files: SH_ENTRY,
        entry: "bin/run",
        env: { LD_PRELOAD: join(f.outside, "libhook.so") },
        loaderEnv: ["LD_PRELOAD"],
      }));
      const harmless = sharedObject(f.outside, "libhook", "int harmless;\n", f.marker);
      const evil = sharedObject(join(f.base), "evil-preload", PRELOAD_C, f.marker);
      if (harmless === null || evil === null) return t.skip("no C compiler (cc) to build the library");
      const outcome = await attack(f, () => spawnSync("cp", [evil, harmless]));
      assert.equal(existsSync(f.marker), false, "the library never loaded");
      assert.deepEqual([outcome.stage, outcome.ran], ["prepare", []]);
      isRefusal(outcome.error, "invalid-input", "loader-path-outside-tree", "LD_PRELOAD");
    },
  );

  test(
    "Given LD_PRELOAD naming a path inside the tree that is a symlink climbing out to a library outside it, " +
      "When the author swaps the library and dispatches again, Then capture prepare already refuses",
    async (t) => {
      const f = fixture(() => ({
        files: SH_ENTRY,
        links: { "lib/libhook.so": "../../../outside/libhook.so" },
        entry: "bin/run",
        env: { LD_PRELOAD: "lib/libhook.so" },
        loaderEnv: ["LD_PRELOAD"],
      }));
      const harmless = sharedObject(f.outside, "libhook", "int harmless;\n", f.marker);
      const evil = sharedObject(f.base, "evil-preload", PRELOAD_C, f.marker);
      if (harmless === null || evil === null) return t.skip("no C compiler (cc) to build the library");
      const outcome = await attack(f, () => spawnSync("cp", [evil, harmless]));
      assert.equal(existsSync(f.marker), false, "the library never loaded");
      assert.deepEqual([outcome.stage, outcome.ran], ["prepare", []]);
      // Retaining the tree would refuse the link too (retention.md: every symlink resolves inside the tree);
      // the loader rule refuses first, naming the variable.
      isRefusal(outcome.error, "invalid-input", "loader-path-symlink-out", "LD_PRELOAD");
      onlyAudited(f.scope);
    },
  );
});

describe("a loader variable naming a file inside the tree", () => {
  test(
    "Given OPENSSL_CONF at a config inside the tree, When dispatched, Then Node reads it from the run copy; " +
      "When the author swaps it to load a provider, Then the tree digest changes: a prepare-on-tick job is " +
      "approval-required naming the executable, and a queued job keeps running the approved bytes",
    async (t) => {
      const f = fixture(() => ({
        files: { ...NODE_ENTRY, "conf/openssl.cnf": { body: opensslConfig(null) } },
        entry: "bin/run.mjs",
        env: { OPENSSL_CONF: "conf/openssl.cnf" },
        loaderEnv: ["OPENSSL_CONF"],
      }));
      const provider = sharedObject(f.outside, "evil-provider", PROVIDER_C, f.marker);
      if (provider === null) return t.skip("no C compiler (cc) to build the provider");
      const prepared = await prepareCapture(f.scope, f.specPath);
      await approve(f.scope, prepared.composition.subject, { reason: "reviewed: harmless config" });
      await addJob(f.scope, { job: "tick", resolution: prepared.id, recurrence: { policy: "prepare-on-tick" } });
      await addJob(f.scope, { job: "queued", resolution: prepared.id });

      const first = await dispatchAndRun(f.scope, "tick");
      assert.equal(first.run.code, 0, first.run.stderr);
      assert.equal(first.plan.env["OPENSSL_CONF"], join(first.plan.run.root, "conf", "openssl.cnf"));

      writeFileSync(join(f.tool, "conf", "openssl.cnf"), opensslConfig(provider));
      await assert.rejects(resolveQueuedCapture(f.scope, "tick", { env: {} }), (error: unknown) => {
        isRefusal(error, "approval-required");
        assert.deepEqual((error as OatsError).details["changes"], ["executable.integrity"]);
        return true;
      });
      const queued = await dispatchAndRun(f.scope, "queued");
      assert.equal(queued.run.code, 0, queued.run.stderr);
      assert.equal(existsSync(f.marker), false, "the provider never ran");
    },
  );
});

describe("approved preloads inside the tree", () => {
  test(
    "Given NODE_OPTIONS --require ./lib/hook.cjs and --import=./lib/hook.mjs, and LD_PRELOAD lib/libhook.so, " +
      "When dispatched, Then each runs, from the run copy",
    async (t) => {
      const f = fixture(() => ({
        files: {
          "bin/run.mjs": { body: 'console.log("entry ran");\n' },
          "lib/hook.cjs": { body: 'console.log("require " + __filename);\n' },
          "lib/hook.mjs": { body: 'console.log("import " + new URL(import.meta.url).pathname);\n' },
        },
        entry: "bin/run.mjs",
        env: { NODE_OPTIONS: '--require ./lib/hook.cjs "--import=./lib/hook.mjs"', LD_PRELOAD: "lib/libhook.so" },
        loaderEnv: ["NODE_OPTIONS", "LD_PRELOAD"],
      }));
      // The library writes where the test can look; it is part of the approved tree.
      if (sharedObject(join(f.tool, "lib"), "libhook", PRELOAD_C, f.marker) === null)
        return t.skip("no C compiler (cc) to build the library");
      const prepared = await prepareCapture(f.scope, f.specPath);
      await approve(f.scope, prepared.composition.subject, { reason: "reviewed: preloads in the tree" });
      await addJob(f.scope, { job: "job", resolution: prepared.id });
      const { plan, run } = await dispatchAndRun(f.scope, "job");
      assert.equal(run.code, 0, run.stderr);
      const root = plan.run.root;
      assert.equal(plan.env["LD_PRELOAD"], join(root, "lib", "libhook.so"));
      // Node runs a --require preload again in the thread of the guard's module hooks: the lines, not their count.
      const lines = run.stdout.trim().split("\n");
      assert.deepEqual([...new Set(lines)].sort(), [
        "entry ran",
        `import ${join(root, "lib", "hook.mjs")}`,
        `require ${join(root, "lib", "hook.cjs")}`,
      ]);
      assert.equal(lines.at(-1), "entry ran");
      assert.equal(existsSync(f.marker), true, "the approved library was preloaded");
    },
  );
});

describe("a record prepared before the rule, at dispatch", () => {
  /**
   * A capture record as an older prepare wrote it: the same tree, with a
   * loader variable naming a file outside the tree pinned in its env, its
   * composition pinned and approved, and queued.
   */
  async function legacyRecord(f: Fixture, env: Record<string, string>) {
    const prepared = await prepareCapture(f.scope, f.specPath);
    const record = structuredClone(prepared.record) as ResolutionRecord;
    Object.assign(record.capture!.env, env);
    const written = writeResolution(f.scope, record);
    const composition = compositionOf(record);
    putBlob(f.scope, canonicalJsonBytes(composition));
    await approve(f.scope, compositionSubject(composition), { reason: "approved before the rule" });
    await addJob(f.scope, { job: "legacy", resolution: written.id });
  }

  for (const [what, reason, variable] of [
    ["OPENSSL_CONF at a config (loading a provider) outside the tree", "loader-path-outside-tree", "OPENSSL_CONF"],
    ["LD_PRELOAD at a library outside the tree", "loader-path-outside-tree", "LD_PRELOAD"],
    ["NODE_OPTIONS=--require of a script outside the tree", "loader-path-outside-tree", "NODE_OPTIONS"],
  ] as const) {
    test(
      `Given an approved record pinning ${what}, When dispatched, Then refused before anything runs, ` +
        "the refusal audited and the run copy removed",
      async (t) => {
        const node = variable !== "LD_PRELOAD";
        const f = fixture(() => ({
          files: node ? NODE_ENTRY : SH_ENTRY,
          entry: node ? "bin/run.mjs" : "bin/run",
          env: {},
        }));
        const so =
          variable === "LD_PRELOAD"
            ? sharedObject(f.outside, "libhook", PRELOAD_C, f.marker)
            : sharedObject(f.outside, "evil-provider", PROVIDER_C, f.marker);
        if (so === null) return t.skip("no C compiler (cc) to build the library");
        writeFileSync(join(f.outside, "openssl.cnf"), opensslConfig(so));
        writeFileSync(
          join(f.outside, "evil.js"),
          `require("node:fs").writeFileSync(${JSON.stringify(f.marker)}, "preloaded");\n`,
        );
        await legacyRecord(
          f,
          variable === "OPENSSL_CONF"
            ? { OPENSSL_CONF: join(f.outside, "openssl.cnf") }
            : variable === "LD_PRELOAD"
              ? { LD_PRELOAD: so }
              : { NODE_OPTIONS: `--require ${join(f.outside, "evil.js")}` },
        );
        const refused = await dispatchAndRun(f.scope, "legacy").then(
          () => null,
          (error: unknown) => error,
        );
        assert.equal(existsSync(f.marker), false, "nothing ran");
        isRefusal(refused, "invalid-input", reason, variable);
        const last = readAudit(f.scope).entries.at(-1)!;
        assert.deepEqual([last.action, last.outcome], ["dispatch", "refused"]);
        const copies = join(f.scope, ".agents", "run-copies");
        assert.deepEqual(
          existsSync(copies) ? readdirSync(copies).filter((name) => name !== ".gitignore") : [],
          [],
          "the run copy is removed",
        );
      },
    );
  }
});
