/**
 * An approval covers a capture's whole composition: every
 * field that decides what runs, or under which gate, changes the approved
 * digest. Each attack re-prepares the SAME executable tree with one field
 * changed and dispatches under the old approval: it must be refused with
 * approval-required naming what changed, and the executable (a real script
 * that writes a marker) must not run.
 */
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { stringify } from "yaml";
import {
  addJob,
  approve,
  compositionChanges,
  compositionOf,
  compositionSubject,
  currentPrincipal,
  isLoaderEnvName,
  listApprovals,
  prepareCapture,
  readBlob,
  resolveQueuedCapture,
  runDispatchPlan,
  type CaptureComposition,
  type RecurrencePolicy,
} from "../src/index.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

interface Spec {
  name: string;
  executable: { tree: string; path: string; args: string[] };
  target: { wing?: string; repo?: string };
  classification: string;
  classificationConfig: string;
  env: Record<string, string>;
  loaderEnv?: string[];
  credentials: string[];
  privileged?: boolean;
}

function config(principals: Record<string, string>, wingLevel = "internal"): string {
  return stringify({
    schemaVersion: 1,
    wings: { ops: wingLevel, lobby: "public" },
    repos: {},
    defaults: [],
    fallback: "internal",
    principals,
  });
}

/** A tree whose bin/run writes a marker, a config, a spec (as `change` leaves it); prepared, approved, queued as
 * `nightly`. */
async function approvedCapture(policy: RecurrencePolicy = "capture") {
  const scope = tempDir("oats-composition-");
  const home = join(scope, "home");
  const tool = join(home, "tool");
  mkdirSync(join(tool, "bin"), { recursive: true });
  writeFileSync(join(tool, "bin", "run"), '#!/bin/sh\n{ echo "args: $*"; env; } > "$1"\n');
  chmodSync(join(tool, "bin", "run"), 0o755);
  // A preload inside the tree: a loader variable may name only files the tree digest pins (loader-paths.ts).
  mkdirSync(join(tool, "lib"));
  writeFileSync(join(tool, "lib", "hook.js"), "// preloaded\n");
  const marker = join(scope, "marker.txt");
  writeFileSync(join(home, "class.yaml"), config({ [currentPrincipal()]: "sovereign" }));
  writeFileSync(join(home, "other.yaml"), config({ [currentPrincipal()]: "sovereign" }, "public"));
  // Same bytes, another path: dispatch would read a later "tightening" from there, so it is a change too.
  writeFileSync(join(home, "same.yaml"), config({ [currentPrincipal()]: "sovereign" }));
  const spec: Spec = {
    name: "nightly",
    executable: { tree: "./tool", path: "bin/run", args: [marker] },
    target: { wing: "ops" },
    classification: "internal",
    classificationConfig: "./class.yaml",
    env: { PATH: "/usr/bin:/bin", LOG_LEVEL: "info" },
    credentials: ["API_TOKEN"],
    // Tests run as root: only a privileged composition may run there (privilege.ts).
    privileged: true,
  };
  const specPath = join(home, "spec.yaml");
  const write = (value: Spec) => writeFileSync(specPath, stringify(value));
  write(spec);
  const prepared = await prepareCapture(scope, specPath);
  await approve(scope, prepared.composition.subject, { reason: "reviewed" });
  await addJob(scope, { job: "nightly", resolution: prepared.id, recurrence: { policy } });
  return { scope, home, tool, marker, spec, specPath, write, prepared };
}

/** Re-prepare with `change` applied to the spec, queue it, and dispatch under the old approval. */
async function dispatchChanged(change: (spec: Spec) => void, expected: string[]) {
  const f = await approvedCapture();
  const spec = structuredClone(f.spec);
  change(spec);
  f.write(spec);
  const again = await prepareCapture(f.scope, f.specPath);
  assert.equal(again.subject.integrity, f.prepared.subject.integrity, "the executable tree itself is unchanged");
  assert.notEqual(again.composition.subject.integrity, f.prepared.composition.subject.integrity);
  await addJob(f.scope, { job: "changed", resolution: again.id });
  await assert.rejects(
    resolveQueuedCapture(f.scope, "changed", { env: { API_TOKEN: "tok-1" } }),
    refusal("approval-required", (error) => {
      assert.deepEqual(error.details["changes"], expected);
      for (const field of expected) assert.ok(error.message.includes(field), error.message);
    }),
  );
  assert.equal(existsSync(f.marker), false, "nothing ran");
  return f;
}

describe("an approval covers the whole composition", () => {
  test(
    "Given an approved composition, When dispatched, Then it runs, and the " + "plan names the approved composition",
    async () => {
      const f = await approvedCapture();
      const plan = await resolveQueuedCapture(f.scope, "nightly", { env: { API_TOKEN: "tok-1" } });
      assert.deepEqual(plan.composition, f.prepared.composition.subject);
      const run = await runDispatchPlan(plan, { stdio: "pipe" });
      assert.equal(run.code, 0, run.stderr);
      assert.ok(existsSync(f.marker));
    },
  );

  test(
    "Given only the executable tree is approved, When its capture is " +
      "dispatched, Then approval-required: a tree approval never covers a composition",
    async () => {
      const f = await approvedCapture();
      const bare = await prepareCapture(f.scope, f.specPath);
      const scope2 = tempDir("oats-composition-tree-");
      const again = await prepareCapture(scope2, f.specPath);
      await approve(scope2, again.subject, { reason: "the tree only" });
      await addJob(scope2, { job: "nightly", resolution: again.id });
      await assert.rejects(resolveQueuedCapture(scope2, "nightly"), refusal("approval-required"));
      assert.equal(bare.id, f.prepared.id, "the same spec prepares the same record");
      assert.equal(existsSync(f.marker), false);
    },
  );

  for (const [what, change, expected] of [
    ["other args", (spec: Spec) => spec.executable.args.push("--all"), ["entrypoint.args"]],
    ["another entry path", (spec: Spec) => (spec.executable.path = "bin/../bin/run"), null],
    ["an added env value", (spec: Spec) => (spec.env["EXTRA"] = "1"), ["env.EXTRA"]],
    [
      "a changed PATH (a fake node first)",
      (spec: Spec) => (spec.env["PATH"] = "/tmp/evil:/usr/bin:/bin"),
      ["env.PATH"],
    ],
    [
      "NODE_OPTIONS, explicitly marked",
      (spec: Spec) => {
        spec.env["NODE_OPTIONS"] = "--require ./lib/hook.js";
        spec.loaderEnv = ["NODE_OPTIONS"];
      },
      ["env.NODE_OPTIONS"],
    ],
    ["another credential", (spec: Spec) => spec.credentials.push("OTHER_TOKEN"), ["credentials"]],
    ["another target", (spec: Spec) => (spec.target = { wing: "lobby" }), ["target.wing"]],
    ["a lower declared level", (spec: Spec) => (spec.classification = "public"), ["classification.declared"]],
    [
      "a config of the author's choosing",
      (spec: Spec) => (spec.classificationConfig = "./other.yaml"),
      ["classification.config", "classification.configPath"],
    ],
    [
      "the same config bytes at a path the author controls",
      (spec: Spec) => (spec.classificationConfig = "./same.yaml"),
      ["classification.configPath"],
    ],
  ] as const) {
    // an entry path outside the grammar is refused at prepare; covered in captures-units
    if (expected === null) continue;
    test(
      `Given an approved composition, When re-prepared with ${what}, Then ` +
        `dispatch under the old approval is approval-required naming ` +
        `${expected.join(", ")} and nothing runs`,
      async () => {
        await dispatchChanged(change, [...expected]);
      },
    );
  }

  test(
    "Given an approved confidential capture, When the config is edited to " +
      "name the dispatcher sovereign and re-prepared, Then the new config " +
      "bytes need a new approval",
    async () => {
      const f = await approvedCapture();
      writeFileSync(
        join(f.home, "class.yaml"),
        config({ [currentPrincipal()]: "sovereign", "mallory@host": "sovereign" }),
      );
      const again = await prepareCapture(f.scope, f.specPath);
      await addJob(f.scope, { job: "changed", resolution: again.id });
      await assert.rejects(
        resolveQueuedCapture(f.scope, "changed"),
        refusal("approval-required", (error) => assert.deepEqual(error.details["changes"], ["classification.config"])),
      );
    },
  );

  test(
    "Given a prepare-on-tick job, When only the spec file on disk is edited " +
      "(injected NODE_OPTIONS), Then the tick re-prepares and is refused " +
      "before anything runs, naming the change",
    async () => {
      const f = await approvedCapture("prepare-on-tick");
      const spec = structuredClone(f.spec);
      spec.env["NODE_OPTIONS"] = "--require ./lib/hook.js";
      spec.loaderEnv = ["NODE_OPTIONS"];
      f.write(spec);
      await assert.rejects(
        resolveQueuedCapture(f.scope, "nightly"),
        refusal("approval-required", (error) => assert.deepEqual(error.details["changes"], ["env.NODE_OPTIONS"])),
      );
      assert.equal(existsSync(f.marker), false);
    },
  );

  test(
    "Given a prepare-on-tick job, When the spec is unchanged, Then the tick " +
      "re-prepares the same composition and dispatches under its approval",
    async () => {
      const f = await approvedCapture("prepare-on-tick");
      const plan = await resolveQueuedCapture(f.scope, "nightly");
      assert.deepEqual(plan.composition, f.prepared.composition.subject);
    },
  );
});

describe("loader environment variables", () => {
  test(
    "Given a spec pinning NODE_OPTIONS, LD_PRELOAD or PYTHONPATH without " +
      "listing it, When prepared, Then invalid-input names the variable and " +
      "nothing is written",
    async () => {
      const f = await approvedCapture();
      for (const name of [
        "NODE_OPTIONS",
        "LD_PRELOAD",
        "PYTHONPATH",
        "DYLD_INSERT_LIBRARIES",
        "NODE_PATH",
        "OPENSSL_CONF",
        "OPENSSL_MODULES",
        "OPENSSL_ENGINES",
      ]) {
        f.write({ ...f.spec, env: { ...f.spec.env, [name]: "x" } });
        const before = snapshotTree(f.scope);
        await assert.rejects(
          prepareCapture(f.scope, f.specPath),
          refusal("invalid-input", (error) => assert.ok(error.message.includes(name), error.message)),
        );
        const after = snapshotTree(f.scope).filter((row) => !row.includes(".agents/audit"));
        assert.deepEqual(
          after,
          before.filter((row) => !row.includes(".agents/audit")),
        );
      }
    },
  );

  test(
    "Given a loader variable as a credential, When prepared, Then " +
      "invalid-input: its value would come unapproved from the dispatcher's environment",
    async () => {
      const f = await approvedCapture();
      for (const name of ["NODE_OPTIONS", "OPENSSL_CONF"]) {
        f.write({ ...f.spec, credentials: [name] });
        await assert.rejects(
          prepareCapture(f.scope, f.specPath),
          refusal("invalid-input", (error) => assert.ok(error.message.includes(name))),
        );
      }
    },
  );

  test("Given loaderEnv listing a name that is not pinned, When prepared, Then invalid-input", async () => {
    const f = await approvedCapture();
    f.write({ ...f.spec, loaderEnv: ["LD_PRELOAD"] });
    await assert.rejects(prepareCapture(f.scope, f.specPath), refusal("invalid-input"));
  });

  test(
    "Given a marked loader variable, When prepared, Then the composition " + "lists it apart for the approver",
    async () => {
      const f = await approvedCapture();
      f.write({
        ...f.spec,
        env: { ...f.spec.env, NODE_OPTIONS: "--max-old-space-size=64" },
        loaderEnv: ["NODE_OPTIONS"],
      });
      const prepared = await prepareCapture(f.scope, f.specPath);
      assert.deepEqual(prepared.composition.value.loaderEnv, ["NODE_OPTIONS"]);
    },
  );

  test("isLoaderEnvName: interpreter and loader variables, not ordinary ones", () => {
    for (const name of [
      "NODE_OPTIONS",
      "NODE_PATH",
      "LD_PRELOAD",
      "LD_LIBRARY_PATH",
      "DYLD_INSERT_LIBRARIES",
      "PYTHONPATH",
      "PERL5OPT",
      "RUBYOPT",
      "BASH_ENV",
      "JAVA_TOOL_OPTIONS",
    ])
      assert.equal(isLoaderEnvName(name), true, name);
    for (const name of ["PATH", "LOG_LEVEL", "HOME", "NODE_ENV", "API_TOKEN"])
      assert.equal(isLoaderEnvName(name), false, name);
  });
});

describe("approving a composition", () => {
  test(
    "Given a prepared capture, When its composition is approved, Then the " +
      "ledger entry carries the composition read from its pinned blob, and " +
      "approvals lists it",
    async () => {
      const f = await approvedCapture();
      const blob = readBlob(f.scope, f.prepared.blobs.composition);
      assert.deepEqual(JSON.parse(blob.toString("utf8")), f.prepared.composition.value);
      assert.equal(
        `oats.json.v1:${f.prepared.blobs.composition}`,
        f.prepared.composition.subject.integrity,
        "the blob is named by the composition's digest",
      );
      const [listing] = listApprovals(f.scope);
      assert.deepEqual(listing!.subject, f.prepared.composition.subject);
      assert.deepEqual(listing!.entry?.composition, f.prepared.composition.value);
    },
  );

  test(
    "Given a composition digest nobody prepared in this scope, When " +
      "approved, Then blob-not-found and the ledger is unchanged",
    async () => {
      const f = await approvedCapture();
      const before = readFileSync(join(f.scope, ".agents", "approvals", "ledger.jsonl"));
      await assert.rejects(
        approve(
          f.scope,
          { kind: "composition", key: "nightly", integrity: `oats.json.v1:sha256-${"a".repeat(64)}` },
          { reason: "blind" },
        ),
        refusal("blob-not-found"),
      );
      assert.deepEqual(readFileSync(join(f.scope, ".agents", "approvals", "ledger.jsonl")), before);
    },
  );

  test(
    "Given a composition approved under another capture's name, When " + "approved, Then invalid-artifact-reference",
    async () => {
      const f = await approvedCapture();
      await assert.rejects(
        approve(f.scope, { ...f.prepared.composition.subject, key: "other" }, { reason: "wrong name" }),
        refusal("invalid-artifact-reference"),
      );
    },
  );

  test(
    "Given a composition named by a tree digest format, When approved, Then " + "invalid-artifact-reference",
    async () => {
      const f = await approvedCapture();
      await assert.rejects(
        approve(
          f.scope,
          { kind: "composition", key: "nightly", integrity: f.prepared.subject.integrity },
          { reason: "wrong format" },
        ),
        refusal("invalid-artifact-reference"),
      );
    },
  );
});

describe("composition (pure)", () => {
  const base: CaptureComposition = {
    format: "oats.capture-composition.v1",
    capture: "c",
    executable: { kind: "capture", key: "c", integrity: `oats.tree-exec.v1:sha256-${"1".repeat(64)}` },
    entrypoint: { path: "bin/run", args: [] },
    env: { A: "1" },
    loaderEnv: [],
    credentials: [],
    target: {},
    classification: { declared: "internal", config: `sha256-${"2".repeat(64)}`, configPath: "/c.yaml" },
    profile: null,
  };

  test("compositionChanges names each differing field and nothing else", () => {
    assert.deepEqual(compositionChanges(base, base), []);
    assert.deepEqual(compositionChanges(base, { ...base, env: { A: "2", B: "1" } }), ["env.A", "env.B"]);
    assert.deepEqual(compositionChanges(base, { ...base, profile: `sha256-${"3".repeat(64)}` }), ["profile"]);
    assert.deepEqual(compositionChanges(base, { ...base, credentials: ["X"] }), ["credentials"]);
  });

  test("compositionSubject is the oats.json.v1 digest: any field change changes it", () => {
    const subject = compositionSubject(base);
    assert.match(subject.integrity, /^oats\.json\.v1:sha256-[0-9a-f]{64}$/);
    assert.notEqual(
      compositionSubject({ ...base, entrypoint: { path: "bin/run", args: ["x"] } }).integrity,
      subject.integrity,
    );
    assert.notEqual(compositionSubject({ ...base, loaderEnv: ["A"] }).integrity, subject.integrity);
  });

  test("compositionOf refuses a record that is not a capture", () => {
    assert.throws(
      () => compositionOf({ kind: "instance", capture: null, entrypoints: {} } as never),
      refusal("invalid-resolution"),
    );
  });
});
