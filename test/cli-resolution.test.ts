/**
 * The resolution commands through real child processes (dist/cli/bin.js;
 * `npm run build` first): `oats resolution show|verify|ls`, `oats instance
 * show`, on records written through the library, and `oats prepare` (a YAML
 * plan) and `oats reconstruct` (a legacy instance home); their JSON envelopes
 * (`command` names the whole subcommand) and exit codes.
 */
import assert from "node:assert/strict";
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { COMMAND_NAMES } from "../src/cli/support/constants.js";
import { COMMANDS, commandNamed } from "../src/cli/main.js";
import { retainTree } from "../src/retention/index.js";
import {
  listResolutionIds,
  readInstanceRef,
  resolutionPath,
  writeInstanceRef,
  writeResolution,
  type ResolutionRecord,
} from "../src/resolution/index.js";
import {
  FIXTURE_LOCK,
  FIXTURE_PAYLOAD,
  fixtureCopy,
  runOats,
  snapshotTree,
  tempDir,
  runJson,
  commandRefusal,
} from "./helpers.js";

interface Fixture {
  scope: string;
  ref: { kind: "capability"; key: string; integrity: { format: "oats.tree-exec.v1"; value: string } };
  dir: string;
}

async function retainedFixture(): Promise<Fixture> {
  const scope = tempDir("oats-cli-res-");
  const receipt = await retainTree(scope, { kind: "capability", key: "demo.hello", source: fixtureCopy() });
  const integrity = receipt.integrity as { format: "oats.tree-exec.v1"; value: string };
  assert.equal(integrity.format, "oats.tree-exec.v1");
  return { scope, dir: receipt.dir, ref: { kind: "capability", key: "demo.hello", integrity } };
}

function recordFor(fixture: Fixture, changes: Partial<ResolutionRecord> = {}): ResolutionRecord {
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: "alpha" },
    source: null,
    artifacts: {
      "demo.hello": {
        artifact: fixture.ref,
        package: {
          id: "demo.hello",
          source: "path:/fixtures/packages/hello",
          version: "1.0.0",
          commit: null,
          integrity: null,
        },
        legacyIntegrity: null,
      },
    },
    config: {
      "/settings/demo.hello/greeting": {
        value: "hi",
        origin: { kind: "operator", ref: "plan.yaml" },
        constraints: [],
        considered: [],
      },
    },
    bindings: {},
    messaging: null,
    entrypoints: {
      hello: { artifact: fixture.ref, path: "bin/hello.mjs", args: ["--loud"], role: "command" },
      current: { artifact: fixture.ref, path: "current.mjs", args: [], role: "helper" },
    },
    capture: null,
    evidence: [],
    unresolved: [],
    ...changes,
  } as ResolutionRecord;
}

const PARTIAL: Partial<ResolutionRecord> = {
  status: "partial",
  subject: { instance: "beta" },
  unresolved: [{ pointer: "/entrypoints/legacy", reason: "shell-syntax: the hook uses a pipe" }],
};

describe("command names", () => {
  test("every spec is registered and listed in COMMAND_NAMES", () => {
    assert.deepEqual(COMMANDS.map((spec) => spec.name).sort(), [...COMMAND_NAMES].sort());
  });

  test("commandNamed understands groups", () => {
    assert.equal(commandNamed(["resolution", "verify", "x"]), "resolution verify");
    assert.equal(commandNamed(["--scope", "/s", "--json", "resolution", "ls"]), "resolution ls");
    assert.equal(commandNamed(["instance", "show", "a"]), "instance show");
    assert.equal(commandNamed(["resolution"]), "resolution");
    assert.equal(commandNamed(["resolution", "frob"]), "resolution");
    assert.equal(commandNamed(["verify", "x"]), "verify");
    assert.equal(commandNamed(["frob", "show"]), null);
  });
});

describe("oats resolution show / verify / ls, oats instance show", () => {
  test(
    "a complete record: show prints it, verify re-hashes and lists the entry " +
      "points, ls lists it, instance show follows the reference",
    async () => {
      const fixture = await retainedFixture();
      const record = recordFor(fixture);
      const written = writeResolution(fixture.scope, record);
      writeInstanceRef(fixture.scope, "alpha", written.id);
      const scope = ["--scope", fixture.scope];

      const show = runJson([...scope, "resolution", "show", written.id]);
      assert.equal(show.status, 0, show.stdout + show.stderr);
      assert.equal(show.envelope.command, "resolution show");
      assert.equal(show.envelope.result!["id"], written.id);
      assert.deepEqual(show.envelope.result!["record"], JSON.parse(JSON.stringify(record)));
      assert.equal(show.envelope.result!["entrypoints"]["hello"].resolved, join(fixture.dir, "bin/hello.mjs"));

      const human = runOats([...scope, "resolution", "show", `oats.json.v1:${written.id}`]);
      assert.equal(human.status, 0, human.stderr);
      assert.match(human.stdout, new RegExp(`^resolution ${written.id}: complete instance alpha\n`));
      assert.deepEqual(
        JSON.parse(human.stdout.slice(human.stdout.indexOf("\n") + 1)),
        JSON.parse(JSON.stringify(record)),
      );

      const verify = runJson([...scope, "resolution", "verify", written.id]);
      assert.equal(verify.status, 0, verify.stdout + verify.stderr);
      assert.equal(verify.envelope.command, "resolution verify");
      assert.equal(verify.envelope.result!["verified"], true);
      assert.equal(verify.envelope.result!["status"], "complete");
      assert.deepEqual(verify.envelope.result!["artifacts"], [fixture.ref]);
      // The symlink entry point resolves to its target inside the artifact.
      assert.equal(verify.envelope.result!["entrypoints"]["current"].resolved, join(fixture.dir, "bin/hello.mjs"));
      const verifyHuman = runOats([...scope, "resolution", "verify", written.id]);
      assert.equal(verifyHuman.status, 0);
      assert.match(
        verifyHuman.stdout,
        /^verified resolution sha256-[0-9a-f]{64}: complete instance alpha, 1 artifact re-hashed\n/,
      );
      assert.match(
        verifyHuman.stdout,
        new RegExp(`\n  entry hello \\(command\\) ${join(fixture.dir, "bin/hello.mjs")} "--loud"\n`),
      );
      assert.equal(runOats([...scope, "--quiet", "resolution", "verify", written.id]).stdout, `${written.id}\n`);

      const ls = runJson([...scope, "resolution", "ls"]);
      assert.equal(ls.status, 0, ls.stdout);
      assert.equal(ls.envelope.command, "resolution ls");
      assert.deepEqual(ls.envelope.result!["records"], [
        { id: written.id, ok: true, status: "complete", kind: "instance", subject: { instance: "alpha" } },
      ]);
      assert.equal(runOats([...scope, "resolution", "ls"]).stdout, `${written.id} complete instance alpha\n`);

      const instance = runJson([...scope, "instance", "show", "alpha"]);
      assert.equal(instance.status, 0, instance.stdout);
      assert.equal(instance.envelope.command, "instance show");
      assert.equal(instance.envelope.result!["instance"], "alpha");
      assert.equal(instance.envelope.result!["resolution"], written.id);
      assert.equal(instance.envelope.result!["status"], "complete");
      assert.deepEqual(Object.keys(instance.envelope.result!["entrypoints"]).sort(), ["current", "hello"]);
      const instanceHuman = runOats([...scope, "instance", "show", "alpha"]);
      assert.match(instanceHuman.stdout, new RegExp(`^instance alpha -> resolution ${written.id} \\(complete\\)\n`));
    },
  );

  test("ls on an empty scope lists nothing", () => {
    const scope = tempDir();
    const ls = runJson(["--scope", scope, "resolution", "ls"]);
    assert.equal(ls.status, 0);
    assert.deepEqual(ls.envelope.result!["records"], []);
    assert.equal(runOats(["--scope", scope, "resolution", "ls"]).stdout, `no resolution records in ${scope}\n`);
  });

  test(
    "a partial record: show and instance show report it, verify refuses it " + "(resolution-incomplete, exit 6)",
    async () => {
      const fixture = await retainedFixture();
      const written = writeResolution(fixture.scope, recordFor(fixture, PARTIAL));
      writeInstanceRef(fixture.scope, "beta", written.id);
      const scope = ["--scope", fixture.scope];

      const show = runJson([...scope, "resolution", "show", written.id]);
      assert.equal(show.status, 0);
      assert.equal(show.envelope.result!["record"].status, "partial");

      const verify = commandRefusal(
        [...scope, "resolution", "verify", written.id],
        "resolution-incomplete",
        6,
        "resolution verify",
      );
      assert.equal(verify.envelope.error!.kind, "refused");
      assert.deepEqual(verify.envelope.error!.details["unresolved"], PARTIAL.unresolved);
      const human = runOats([...scope, "resolution", "verify", written.id]);
      assert.equal(human.status, 6);
      assert.equal(human.stdout, "", "nothing that looks like success on stdout");
      assert.match(human.stderr, /^oats: resolution-incomplete: .*\n.*partial record is never run/);

      const instance = runJson([...scope, "instance", "show", "beta"]);
      assert.equal(instance.status, 0);
      assert.equal(instance.envelope.result!["status"], "partial");
      assert.deepEqual(instance.envelope.result!["unresolved"], PARTIAL.unresolved);
      assert.match(
        runOats([...scope, "instance", "show", "beta"]).stdout,
        /\(partial\)\n {2}unresolved \/entrypoints\/legacy: shell-syntax/,
      );

      assert.match(
        runOats([...scope, "resolution", "ls"]).stdout,
        new RegExp(`^${written.id} partial instance beta\n$`),
      );
    },
  );

  test("missing records and references: resolution-not-found, exit 3", async () => {
    const fixture = await retainedFixture();
    const scope = ["--scope", fixture.scope];
    const absent = `sha256-${"0".repeat(64)}`;
    for (const sub of ["show", "verify"])
      commandRefusal([...scope, "resolution", sub, absent], "resolution-not-found", 3, `resolution ${sub}`);
    commandRefusal([...scope, "instance", "show", "nobody"], "resolution-not-found", 3, "instance show");
    const human = runOats([...scope, "resolution", "show", absent]);
    assert.equal(human.status, 3);
    assert.match(human.stderr, /^oats: resolution-not-found: .*\n.*oats resolution ls/);
  });

  test(
    "malformed ids and names: invalid-input, exit 4; a missing operand is a " + "usage error naming the subcommand",
    async () => {
      const fixture = await retainedFixture();
      const scope = ["--scope", fixture.scope];
      for (const id of ["nope", `sha256-${"A".repeat(64)}`, `sha256-${"0".repeat(63)}`, "../../etc/passwd"]) {
        commandRefusal([...scope, "resolution", "verify", id], "invalid-input", 4, "resolution verify");
      }
      commandRefusal([...scope, "instance", "show", "../evil"], "invalid-input", 4, "instance show");
      assert.match(
        runOats([...scope, "resolution", "show", "nope"]).stderr,
        /\na resolution id is sha256-<64 lowercase hex>/,
      );
      const usage = commandRefusal([...scope, "resolution", "show"], "usage", 2, "resolution show");
      assert.match(usage.envelope.error!.message, /missing required argument 'id'/);
      assert.match(runOats([...scope, "resolution", "show"]).stderr, /oats resolution show --help/);
      commandRefusal([...scope, "resolution"], "usage", 2, "resolution");
      commandRefusal([...scope, "resolution", "frob"], "usage", 2, "resolution");
    },
  );

  test(
    "a record file with one byte changed: integrity-mismatch, exit 5, for " +
      "show, verify, instance show and ls; the file is left alone",
    async () => {
      const fixture = await retainedFixture();
      const written = writeResolution(fixture.scope, recordFor(fixture));
      writeInstanceRef(fixture.scope, "alpha", written.id);
      const path = resolutionPath(fixture.scope, written.id);
      const bytes = readFileSync(path);
      const at = bytes.indexOf("hello.mjs");
      bytes[at] = "j".charCodeAt(0); // "jello.mjs": still canonical JSON, other bytes
      chmodSync(path, 0o644);
      writeFileSync(path, bytes);
      const scope = ["--scope", fixture.scope];

      for (const sub of ["show", "verify"]) {
        const run = commandRefusal(
          [...scope, "resolution", sub, written.id],
          "integrity-mismatch",
          5,
          `resolution ${sub}`,
        );
        assert.equal(run.envelope.error!.details["expected"], written.id);
      }
      commandRefusal([...scope, "instance", "show", "alpha"], "integrity-mismatch", 5, "instance show");
      const ls = commandRefusal([...scope, "resolution", "ls"], "integrity-mismatch", 5, "resolution ls");
      assert.equal(ls.envelope.error!.details["records"][0].ok, false);
      const lsHuman = runOats([...scope, "resolution", "ls"]);
      assert.equal(lsHuman.status, 5);
      assert.match(lsHuman.stdout, new RegExp(`^${written.id} INVALID integrity-mismatch: `));
      const human = runOats([...scope, "resolution", "verify", written.id]);
      assert.match(human.stderr, /^oats: integrity-mismatch: .*\n.*no longer hash to its id/);
      assert.deepEqual(readFileSync(path), bytes, "the damaged record was not repaired or removed");
    },
  );

  test(
    "a non-canonical record, a symlink or a directory in place of the " + "record: invalid-resolution, exit 4",
    async () => {
      const fixture = await retainedFixture();
      const written = writeResolution(fixture.scope, recordFor(fixture));
      const path = resolutionPath(fixture.scope, written.id);
      const scope = ["--scope", fixture.scope];
      const canonical = readFileSync(path);

      // Equivalent JSON with other bytes, stored under its own digest: canonical check refuses it.
      const { bytesDigest } = await import("../src/retention/index.js");
      const pretty = Buffer.from(JSON.stringify(JSON.parse(canonical.toString("utf8")), null, 1));
      const prettyId = bytesDigest(pretty);
      writeFileSync(resolutionPath(fixture.scope, prettyId), pretty);
      commandRefusal([...scope, "resolution", "show", prettyId], "invalid-resolution", 4, "resolution show");

      rmSync(path);
      const elsewhere = join(tempDir(), "record.json");
      writeFileSync(elsewhere, canonical);
      symlinkSync(elsewhere, path);
      commandRefusal([...scope, "resolution", "verify", written.id], "invalid-resolution", 4, "resolution verify");
      rmSync(path);
      mkdirSync(path);
      commandRefusal([...scope, "resolution", "show", written.id], "invalid-resolution", 4, "resolution show");
    },
  );

  test(
    "verify re-hashes the artifacts: a damaged artifact behind an intact " +
      "record is integrity-mismatch, while show still reads",
    async () => {
      const fixture = await retainedFixture();
      const written = writeResolution(fixture.scope, recordFor(fixture));
      const file = join(fixture.dir, "skills/greeting.md");
      chmodSync(file, 0o644);
      writeFileSync(file, "changed\n");
      const scope = ["--scope", fixture.scope];
      assert.equal(runJson([...scope, "resolution", "show", written.id]).status, 0);
      const verify = commandRefusal(
        [...scope, "resolution", "verify", written.id],
        "integrity-mismatch",
        5,
        "resolution verify",
      );
      assert.equal(verify.envelope.error!.details["key"], "demo.hello");
    },
  );
});

/** A YAML plan for the fixture capability, written beside a copy of it (relative paths resolve against the plan's
 * directory). */
function writePlan(options: { instance?: string; greeting?: string; extra?: string; entry?: string } = {}): string {
  const dir = tempDir("oats-plan-");
  cpSync(FIXTURE_PAYLOAD, join(dir, "hello"), { recursive: true, verbatimSymlinks: true });
  cpSync(FIXTURE_LOCK, join(dir, "oats-lock.json"));
  const path = join(dir, "plan.yaml");
  writeFileSync(
    path,
    [
      "schemaVersion: 1",
      `instance: ${options.instance ?? "alpha"}`,
      "capabilities:",
      "  - id: demo.hello",
      "    dir: hello",
      "    lock: oats-lock.json",
      "config:",
      "  - pointer: /settings/demo.hello/greeting",
      `    value: ${JSON.stringify(options.greeting ?? "hello")}`,
      "    origin: {kind: operator, ref: plan.yaml}",
      ...(options.extra ? [options.extra] : []),
      "entrypoints:",
      "  hello:",
      "    capability: demo.hello",
      `    path: ${options.entry ?? "bin/hello.mjs"}`,
      "    args: [--quiet]",
      "    role: command",
      "",
    ].join("\n"),
  );
  return path;
}

describe("oats prepare <plan>", () => {
  test(
    "prepares a YAML plan: prints id, status and instance; the record then " +
      "shows, verifies and is what the instance runs; again is kept",
    () => {
      const scope = tempDir("oats-cli-prep-");
      const plan = writePlan();
      const run = runJson(["--scope", scope, "prepare", plan]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.equal(run.envelope.command, "prepare");
      const id = run.envelope.result!["id"] as string;
      assert.match(id, /^sha256-[0-9a-f]{64}$/);
      assert.equal(run.envelope.result!["status"], "written");
      assert.equal(run.envelope.result!["instance"], "alpha");
      assert.equal(run.envelope.result!["record"].status, "complete");
      assert.deepEqual(listResolutionIds(scope), [id]);
      assert.equal(readInstanceRef(scope, "alpha").resolution, id);

      const verify = runJson(["--scope", scope, "resolution", "verify", id]);
      assert.equal(verify.status, 0, verify.stdout);
      assert.deepEqual(Object.keys(verify.envelope.result!["entrypoints"]), ["hello"]);
      assert.equal(runJson(["--scope", scope, "instance", "show", "alpha"]).envelope.result!["resolution"], id);

      const again = runOats(["--scope", scope, "prepare", plan]);
      assert.equal(again.status, 0, again.stderr);
      assert.match(
        again.stdout,
        new RegExp(`^kept \\(already recorded\\) resolution ${id}\n  instance alpha -> ${id}\n`),
      );
      assert.equal(runOats(["--scope", scope, "--quiet", "prepare", plan]).stdout, `${id}\n`);
    },
  );

  test(
    "a secret literal in the plan: secret-in-record, exit 6, naming the " +
      "pointer; nothing written and the old reference stays",
    () => {
      const scope = tempDir("oats-cli-prep-");
      const first = runJson(["--scope", scope, "prepare", writePlan()]);
      assert.equal(first.status, 0, first.stdout);
      const before = snapshotTree(join(scope, ".agents/resolutions"));
      const plan = writePlan({
        extra:
          "  - pointer: /settings/demo.hello/api_token\n    value: " +
          "hunter2hunter2\n    origin: {kind: operator, ref: plan.yaml}",
      });
      const run = commandRefusal(["--scope", scope, "prepare", plan], "secret-in-record", 6, "prepare");
      assert.equal(run.envelope.error!.details["pointer"], "/config/~1settings~1demo.hello~1api_token/value");
      assert.doesNotMatch(run.stdout, /hunter2hunter2/, "the secret itself is not echoed");
      const human = runOats(["--scope", scope, "prepare", plan]);
      assert.equal(human.status, 6);
      assert.match(human.stderr, /^oats: secret-in-record: .*\n.*credential reference/);
      assert.deepEqual(snapshotTree(join(scope, ".agents/resolutions")), before);
      assert.equal(readInstanceRef(scope, "alpha").resolution, first.envelope.result!["id"]);
    },
  );

  test(
    "bad plans: invalid-input, exit 4 (an extra field, an entry point " +
      "climbing out of its artifact, a missing file, the same capability " +
      "twice); usage for no operand",
    () => {
      const scope = tempDir("oats-cli-prep-");
      const extra = commandRefusal(
        ["--scope", scope, "prepare", writePlan({ extra: "frobnicate: true" })],
        "invalid-input",
        4,
        "prepare",
      );
      assert.match(extra.envelope.error!.message, /^plan/);
      assert.match(
        runOats(["--scope", scope, "prepare", writePlan({ extra: "frobnicate: true" })]).stderr,
        /\nthe plan file is not a valid plan/,
      );
      commandRefusal(
        ["--scope", scope, "prepare", writePlan({ entry: "../../bin/sh" })],
        "invalid-input",
        4,
        "prepare",
      );
      commandRefusal(["--scope", scope, "prepare", join(tempDir(), "absent.yaml")], "invalid-input", 4, "prepare");
      const twice = writePlan();
      writeFileSync(
        twice,
        readFileSync(twice, "utf8").replace(
          "config:",
          "  - id: demo.hello\n    dir: hello\n    lock: oats-lock.json\nconfig:",
        ),
      );
      const run = commandRefusal(["--scope", scope, "prepare", twice], "invalid-input", 4, "prepare");
      assert.match(run.envelope.error!.message, /more than once/);
      commandRefusal(["--scope", scope, "prepare"], "usage", 2, "prepare");
      assert.deepEqual(listResolutionIds(scope), []);
    },
  );
});

describe("oats reconstruct <instance-home>", () => {
  const INSTALLED = ".agents/capabilities/installed/demo.hello";

  function legacy(commands: Record<string, string>): { scope: string; home: string } {
    const root = tempDir("oats-cli-recon-");
    const scope = join(root, "scope");
    const home = join(root, "home");
    mkdirSync(home, { recursive: true });
    cpSync(FIXTURE_PAYLOAD, join(scope, INSTALLED), { recursive: true, verbatimSymlinks: true });
    cpSync(FIXTURE_LOCK, join(scope, "oats-lock.json"));
    writeFileSync(join(home, "instance.json"), JSON.stringify({ name: "alice", commands }));
    return { scope, home };
  }

  test(
    "a faithful installation: reconstructed, with evidence; the record " +
      "verifies after the installed store and the lock are gone",
    () => {
      const { scope, home } = legacy({ hello: `node ${INSTALLED}/bin/hello.mjs --greeting "good morning"` });
      const run = runJson(["--scope", scope, "reconstruct", home]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.equal(run.envelope.command, "reconstruct");
      assert.equal(run.envelope.result!["status"], "reconstructed");
      assert.equal(run.envelope.result!["instance"], "alice");
      assert.equal(run.envelope.result!["refMoved"], true);
      assert.ok((run.envelope.result!["evidence"] as unknown[]).length > 0);
      const id = run.envelope.result!["id"] as string;
      rmSync(join(scope, ".agents/capabilities/installed"), { recursive: true });
      rmSync(join(scope, "oats-lock.json"));
      rmSync(home, { recursive: true });
      const verify = runJson(["--scope", scope, "resolution", "verify", id]);
      assert.equal(verify.status, 0, verify.stdout);
      assert.equal(verify.envelope.result!["status"], "reconstructed");
      assert.deepEqual(verify.envelope.result!["entrypoints"]["hello"].args, ["--greeting", "good morning"]);
    },
  );

  test(
    "what cannot be established: the record is written but reported as " +
      "resolution-incomplete, exit 6, with the unresolved list",
    () => {
      const { scope, home } = legacy({
        hello: `node ${INSTALLED}/bin/hello.mjs`,
        piped: `node ${INSTALLED}/bin/hello.mjs | tee log`,
      });
      const run = commandRefusal(["--scope", scope, "reconstruct", home], "resolution-incomplete", 6, "reconstruct");
      const details = run.envelope.error!.details;
      assert.equal(details["status"], "partial");
      assert.ok(
        (details["unresolved"] as { pointer: string }[]).some((entry) => entry.pointer.includes("piped")),
        JSON.stringify(details["unresolved"]),
      );
      assert.ok(existsSync(resolutionPath(scope, details["id"])), "the partial record is kept for inspection");
      commandRefusal(
        ["--scope", scope, "resolution", "verify", details["id"]],
        "resolution-incomplete",
        6,
        "resolution verify",
      );
      const human = runOats(["--scope", scope, "reconstruct", home]);
      assert.equal(human.status, 6);
      assert.match(human.stdout, /^partial resolution sha256-[0-9a-f]{64}\n/);
      assert.match(human.stdout, /\n {2}unresolved \/entrypoints\/piped: /);
      assert.match(human.stderr, /^oats: resolution-incomplete: /);
    },
  );

  test("no instance.json: a refusal, not a record", () => {
    const { scope } = legacy({ hello: `node ${INSTALLED}/bin/hello.mjs` });
    const run = runJson(["--scope", scope, "reconstruct", tempDir()]);
    assert.notEqual(run.status, 0);
    assert.equal(run.envelope.command, "reconstruct");
    assert.deepEqual(listResolutionIds(scope), []);
  });
});
