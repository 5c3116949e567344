/**
 * The CLI through real child processes (dist/cli/bin.js; `npm run build` first):
 * the JSON envelope, exit codes, human-mode errors, scope defaulting, progress
 * discipline (the `npm start` demo: demo.test.ts).
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { sourceIdentityKey } from "../src/retention/index.js";
import { hostTag } from "../src/retention/store/layout.js";
import {
  FIXTURE_LOCK,
  FIXTURE_PAYLOAD,
  REPO,
  fixtureCopy,
  makeVectorTree,
  runJson,
  runOats,
  snapshotTree,
  tempDir,
} from "./helpers.js";

const LEGACY = "sha256-a79ca625eee1167f6d71dc500d966693a57225fa92e0bb5187973f3ca7695814";
const EXEC = "sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
const VERSION = (JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { version: string }).version;

/** runJson (helpers.ts: exactly one envelope line on stdout), and that line is compact JSON. */
function runCompactJson(args: string[], options: Parameters<typeof runOats>[1] = {}) {
  const run = runJson(args, options);
  assert.doesNotMatch(run.stdout, /^\s|\s\n$/, "compact JSON");
  return run;
}

function expectRefusal(
  args: string[],
  code: string,
  kind: string,
  exit: number,
  options: Parameters<typeof runOats>[1] = {},
) {
  const run = runCompactJson(args, options);
  assert.equal(run.status, exit, run.stdout + run.stderr);
  assert.equal(run.envelope.ok, false);
  assert.deepEqual(Object.keys(run.envelope.error!), ["code", "kind", "message", "details"]);
  assert.equal(run.envelope.error!.code, code);
  assert.equal(run.envelope.error!.kind, kind);
  assert.equal(typeof run.envelope.error!.message, "string");
  assert.ok(run.envelope.error!.message.length > 0);
  return run;
}

function retainedFixture(): { scope: string; dir: string } {
  const scope = tempDir("oats-cli-");
  const run = runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK]);
  assert.equal(run.status, 0, run.stderr);
  return { scope, dir: join(scope, ".agents/capabilities/artifacts/demo.hello", LEGACY) };
}

describe("oats --version", () => {
  test("prints the package version and nothing else", () => {
    for (const flag of ["--version", "-V"]) {
      const run = runOats([flag]);
      assert.equal(run.status, 0);
      assert.equal(run.stdout, `${VERSION}\n`);
      assert.equal(run.stderr, "");
    }
  });

  test("in --json mode is one envelope", () => {
    const run = runCompactJson(["--version"]);
    assert.equal(run.status, 0);
    assert.deepEqual(run.envelope, { schemaVersion: 1, ok: true, command: "version", result: { version: VERSION } });
  });

  test("also answers when other options come with it", () => {
    const run = runOats(["--scope", tempDir(), "--version"]);
    assert.equal(run.status, 0);
    assert.equal(run.stdout, `${VERSION}\n`);
  });
});

describe("JSON envelope on success", () => {
  test("retain, verify, path, ls, fsck, cleanup on one scope", () => {
    const scope = tempDir("oats-cli-");
    const retain = runCompactJson([
      "--scope",
      scope,
      "retain",
      FIXTURE_PAYLOAD,
      "--id",
      "demo.hello",
      "--lock",
      FIXTURE_LOCK,
    ]);
    assert.equal(retain.status, 0, retain.stdout);
    assert.equal(retain.stderr, "");
    assert.equal(retain.envelope.ok, true);
    assert.equal(retain.envelope.command, "retain");
    const dir = join(realpathSync(scope), ".agents/capabilities/artifacts/demo.hello", LEGACY);
    assert.deepEqual(retain.envelope.result, {
      kind: "capability",
      key: "demo.hello",
      integrity: { format: "oats.tree-legacy.v0", value: LEGACY },
      execIntegrity: { format: "oats.tree-exec.v1", value: EXEC },
      dir,
      status: "retained",
      // Every file new to the scope's shared file layer.
      files: { linked: 0, stored: 5, copied: 0 },
      pinned: true,
    });

    const again = runCompactJson([
      "--scope",
      scope,
      "retain",
      FIXTURE_PAYLOAD,
      "--id",
      "demo.hello",
      "--lock",
      FIXTURE_LOCK,
    ]);
    assert.equal(again.envelope.result!["status"], "kept");

    const byLock = runCompactJson(["--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK]);
    assert.equal(byLock.status, 0);
    assert.equal(byLock.envelope.command, "verify");
    assert.equal(byLock.envelope.result!["status"], "verified");
    assert.equal(byLock.envelope.result!["dir"], dir);

    const byIntegrity = runCompactJson([
      "verify",
      "demo.hello",
      "--integrity",
      `oats.tree-legacy.v0:${LEGACY}`,
      "--scope",
      scope,
    ]);
    assert.equal(byIntegrity.status, 0);
    assert.deepEqual(byIntegrity.envelope.result!["execIntegrity"], { format: "oats.tree-exec.v1", value: EXEC });

    const path = runCompactJson(["--scope", scope, "path", "demo.hello", LEGACY]);
    assert.equal(path.status, 0);
    assert.equal(path.envelope.command, "path");
    assert.equal(path.envelope.result!["dir"], dir);
    assert.deepEqual(path.envelope.result!["integrity"], { format: "oats.tree-legacy.v0", value: LEGACY });

    const ls = runCompactJson(["--scope", scope, "ls"]);
    assert.equal(ls.status, 0);
    assert.equal(ls.envelope.command, "ls");
    assert.deepEqual(ls.envelope.result!["revisions"], [
      {
        kind: "capability",
        key: "demo.hello",
        integrity: { format: "oats.tree-legacy.v0", value: LEGACY },
        dir,
        size: { files: 5, bytes: 800 },
      },
    ]);

    const fsck = runCompactJson(["--scope", scope, "fsck"]);
    assert.equal(fsck.status, 0);
    assert.equal(fsck.envelope.command, "fsck");
    assert.equal(fsck.envelope.result!["counts"]["revisions"], 1);
    assert.equal(fsck.envelope.result!["ok"], true);
    assert.equal(fsck.envelope.result!["outcomes"][0]["ok"], true);

    const cleanup = runCompactJson(["--scope", scope, "cleanup"]);
    assert.equal(cleanup.status, 0);
    assert.equal(cleanup.envelope.command, "cleanup");
    assert.deepEqual(cleanup.envelope.result, { removed: [], active: [] });
  });

  test("cleanup removes a crashed publisher's staging and reports it", () => {
    const { scope } = retainedFixture();
    const dead = spawnSync(process.execPath, ["-e", "0"]).pid!;
    const staging = join(
      realpathSync(scope),
      ".agents/capabilities/artifacts/demo.hello",
      `.staging-${hostTag()}-${dead}-0123456789ab`,
    );
    mkdirSync(staging);
    writeFileSync(join(staging, "partial"), "x");
    const run = runCompactJson(["--scope", scope, "cleanup"]);
    assert.equal(run.status, 0);
    assert.deepEqual(run.envelope.result, { removed: [staging], active: [] });
    assert.equal(existsSync(staging), false);
  });

  test("retain of a source keyed by its qualified identity", () => {
    const scope = tempDir("oats-cli-");
    const identity = "git:https://host/org/repo#souls/a";
    const key = sourceIdentityKey(identity);
    const run = runCompactJson(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--kind", "source", "--id", identity]);
    assert.equal(run.status, 0, run.stdout);
    assert.equal(run.envelope.result!["key"], key);
    assert.equal(run.envelope.result!["identity"], identity);
    assert.deepEqual(run.envelope.result!["integrity"], { format: "oats.tree-exec.v1", value: EXEC });
    assert.ok(existsSync(join(scope, ".agents/sources/artifacts", key, "tree-exec-v1", EXEC)));

    for (const id of [identity, key]) {
      const verify = runCompactJson([
        "--scope",
        scope,
        "verify",
        id,
        "--kind",
        "source",
        "--integrity",
        `oats.tree-exec.v1:${EXEC}`,
      ]);
      assert.equal(verify.status, 0, verify.stdout);
      assert.equal(verify.envelope.result!["key"], key);
    }
  });

  test("retain --expect checks the tree-exec integrity of a capture", () => {
    const scope = tempDir("oats-cli-");
    const ok = runCompactJson([
      "--scope",
      scope,
      "retain",
      FIXTURE_PAYLOAD,
      "--kind",
      "capture",
      "--id",
      "nightly",
      "--expect",
      `oats.tree-exec.v1:${EXEC}`,
    ]);
    assert.equal(ok.status, 0, ok.stdout);
    assert.equal(ok.envelope.result!["kind"], "capture");
    const wrong = `oats.tree-exec.v1:sha256-${"0".repeat(64)}`;
    const refused = expectRefusal(
      ["--scope", scope, "retain", FIXTURE_PAYLOAD, "--kind", "capture", "--id", "other", "--expect", wrong],
      "integrity-mismatch",
      "mismatch",
      5,
    );
    assert.equal(refused.envelope.error!.details["reason"], "source-differs");
  });

  test("--help in --json mode is one envelope carrying the help text", () => {
    const run = runCompactJson(["verify", "--help"]);
    assert.equal(run.status, 0);
    assert.equal(run.envelope.ok, true);
    assert.match(String(run.envelope.result!["help"]), /Usage: oats verify/);
  });
});

describe("typed refusals", () => {
  test("a damaged revision: integrity-mismatch, exit 5, with expected and actual digests", () => {
    const { scope, dir } = retainedFixture();
    appendFileSync(join(dir, "oats.json"), "x");
    const before = snapshotTree(scope);
    const run = expectRefusal(
      ["--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK],
      "integrity-mismatch",
      "mismatch",
      5,
    );
    assert.equal(run.envelope.command, "verify");
    assert.equal(run.envelope.error!.details["expected"], LEGACY);
    assert.match(String(run.envelope.error!.details["actual"]), /^sha256-[0-9a-f]{64}$/);
    assert.notEqual(run.envelope.error!.details["actual"], LEGACY);
    assert.deepEqual(snapshotTree(scope), before, "nothing repaired");
  });

  test("fsck with a damaged revision: exit of the most serious finding, details hold the report", () => {
    const { scope, dir } = retainedFixture();
    appendFileSync(join(dir, "oats.json"), "x");
    const run = expectRefusal(["--scope", scope, "fsck"], "integrity-mismatch", "mismatch", 5);
    assert.equal(run.envelope.command, "fsck");
    const report = run.envelope.error!.details["report"];
    assert.equal(report.counts.revisions, 1);
    assert.equal(report.classes.revisions.length, 1);
    assert.equal(report.classes.revisions[0].code, "integrity-mismatch");
    assert.equal(report.outcomes[0].ok, false);
    assert.equal(report.outcomes[0].error.code, "integrity-mismatch");

    const human = runOats(["--scope", scope, "fsck"]);
    assert.equal(human.status, 5);
    assert.match(human.stdout, /^DAMAGED {2}capability demo\.hello /m);
    assert.match(human.stderr, /^oats: integrity-mismatch: /);
  });

  test("nothing retained: artifact-not-found, exit 3", () => {
    const scope = tempDir("oats-cli-");
    const run = expectRefusal(
      ["--scope", scope, "verify", "demo.hello", "--integrity", LEGACY],
      "artifact-not-found",
      "missing",
      3,
    );
    assert.equal(run.envelope.error!.details["expected"], LEGACY);
  });

  test("an invalid id: invalid-artifact-reference, exit 4, nothing created", () => {
    for (const id of ["../x", "X", "a/b"]) {
      const scope = tempDir("oats-cli-");
      expectRefusal(
        ["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", id, "--lock", FIXTURE_LOCK],
        "invalid-artifact-reference",
        "invalid",
        4,
      );
      expectRefusal(
        ["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", id, "--kind", "capture"],
        "invalid-artifact-reference",
        "invalid",
        4,
      );
      expectRefusal(
        ["--scope", scope, "verify", id, "--integrity", LEGACY],
        "invalid-artifact-reference",
        "invalid",
        4,
      );
      assert.deepEqual(snapshotTree(scope), [], "nothing created for a refused request");
    }
  });

  test("an abbreviated integrity: invalid-artifact-reference, exit 4", () => {
    const scope = tempDir("oats-cli-");
    expectRefusal(
      ["--scope", scope, "path", "demo.hello", LEGACY.slice(0, 20)],
      "invalid-artifact-reference",
      "invalid",
      4,
    );
  });

  test("`oats` alone prints the help on stdout and exits 0; with --json, one help envelope", () => {
    const plain = runOats([]);
    assert.equal(plain.status, 0, plain.stderr);
    assert.match(plain.stdout, /^Usage: oats \[options\] \[command\]/);
    assert.match(plain.stdout, /retain \[options\]/);
    assert.equal(plain.stderr, "");
    const json = runOats(["--json"]);
    assert.equal(json.status, 0, json.stderr);
    const envelope = JSON.parse(json.stdout);
    assert.equal(envelope.ok, true);
    assert.equal(envelope.command, "help");
    assert.match(envelope.result.help, /^Usage: oats/);
  });

  const usageCases: [string, string[], RegExp][] = [
    ["an unknown option", ["ls", "--bogus"], /unknown option '--bogus'/],
    ["an unknown global option", ["--bogus"], /unknown option '--bogus'/],
    ["an unknown command", ["frobnicate"], /unknown command 'frobnicate'/],
    ["a missing required argument", ["verify"], /missing required argument 'id'/],
    ["a missing required option", ["retain", FIXTURE_PAYLOAD], /required option '--id <id>'/],
    [
      "both --integrity and --lock",
      ["verify", "demo.hello", "--integrity", LEGACY, "--lock", FIXTURE_LOCK],
      /--integrity and --lock/,
    ],
    ["neither --integrity nor --lock", ["verify", "demo.hello"], /--integrity and --lock/],
    [
      "--lock with another kind",
      ["retain", FIXTURE_PAYLOAD, "--id", "x", "--kind", "capture", "--lock", FIXTURE_LOCK],
      /--lock/,
    ],
    ["an unknown kind", ["verify", "x", "--kind", "nope", "--integrity", LEGACY], /nope/],
    ["an unknown digest format", ["digest", FIXTURE_PAYLOAD, "--format", "md5"], /md5/],
    ["too many arguments", ["path", "a", "b", "c"], /too many arguments/],
  ];
  for (const [what, args, message] of usageCases) {
    test(`usage error in --json mode, ${what}: exit 2, one envelope line, nothing else`, () => {
      const run = expectRefusal(["--scope", tempDir(), ...args], "usage", "usage", 2);
      assert.match(run.envelope.error!.message, message);
      assert.equal(run.stderr, "", "commander's own messages are captured, not printed");
    });
  }

  test("the envelope names the command whose arguments failed", () => {
    assert.equal(expectRefusal(["verify"], "usage", "usage", 2).envelope.command, "verify");
    assert.equal(expectRefusal(["--scope", "verify", "frob"], "usage", "usage", 2).envelope.command, null);
  });
});

describe("human mode", () => {
  test("errors are `oats: <code>: <message>` on stderr plus one remedy line", () => {
    const scope = tempDir("oats-cli-");
    const cases: [string[], string, number][] = [
      [["verify", "demo.hello", "--integrity", LEGACY], "artifact-not-found", 3],
      [["verify", "../x", "--integrity", LEGACY], "invalid-artifact-reference", 4],
      [["verify", "demo.hello"], "usage", 2],
      [["--bogus"], "usage", 2],
    ];
    for (const [args, code, exit] of cases) {
      const run = runOats(["--scope", scope, ...args]);
      assert.equal(run.status, exit);
      assert.equal(run.stdout, "");
      const lines = run.stderr.split("\n");
      assert.equal(lines.length, 3, `two lines and a final newline: ${JSON.stringify(run.stderr)}`);
      assert.equal(lines[2], "");
      assert.match(lines[0]!, new RegExp(`^oats: ${code}: \\S`));
      assert.ok(lines[1]!.length > 10 && !lines[1]!.startsWith("oats:"), `a remedy line: ${lines[1]}`);
    }
  });

  test("a damaged revision's remedy says it was not repaired", () => {
    const { scope, dir } = retainedFixture();
    appendFileSync(join(dir, "oats.json"), "x");
    const run = runOats(["--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK]);
    assert.equal(run.status, 5);
    assert.match(
      run.stderr,
      new RegExp(
        String.raw`^oats: integrity-mismatch: capability demo\.hello: expected .*\n` +
          String.raw`the stored revision is damaged or the expected digest is wrong; it was not repaired\..*\n$`,
      ),
    );
  });

  test("results are short lines on stdout; --quiet keeps only the essential one", () => {
    const scope = tempDir("oats-cli-");
    const run = runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK]);
    assert.equal(run.status, 0);
    assert.match(run.stdout, /^retained capability demo\.hello\n {2}integrity oats\.tree-legacy\.v0:sha256-a79c/);
    assert.equal(run.stderr, "");
    const quiet = runOats(["--scope", scope, "--quiet", "verify", "demo.hello", "--lock", FIXTURE_LOCK]);
    assert.equal(quiet.status, 0);
    assert.equal(quiet.stdout, `oats.tree-legacy.v0:${LEGACY}\n`);
    const path = runOats(["--scope", scope, "path", "demo.hello", LEGACY]);
    assert.equal(path.stdout, `${join(scope, ".agents/capabilities/artifacts/demo.hello", LEGACY)}\n`);
  });
});

describe("--scope", () => {
  test("defaults to $OATS_SCOPE", () => {
    const scope = tempDir("oats-env-");
    const run = runOats(["retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK, "--json"], {
      env: { OATS_SCOPE: scope },
    });
    assert.equal(run.status, 0, run.stdout);
    assert.ok(existsSync(join(scope, ".agents/capabilities/artifacts/demo.hello", LEGACY)));
    const ls = runCompactJson(["ls"], { env: { OATS_SCOPE: scope } });
    assert.equal(ls.envelope.result!["revisions"].length, 1);
  });

  test("an explicit --scope wins over $OATS_SCOPE", () => {
    const env = tempDir("oats-env-");
    const explicit = tempDir("oats-explicit-");
    const run = runCompactJson(
      ["--scope", explicit, "retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK],
      { env: { OATS_SCOPE: env } },
    );
    assert.equal(run.status, 0);
    assert.ok(existsSync(join(explicit, ".agents")));
    assert.equal(existsSync(join(env, ".agents")), false);
  });

  test("without either, the working directory", () => {
    const cwd = tempDir("oats-cwd-");
    const run = runCompactJson(["retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK], {
      cwd,
      env: { OATS_SCOPE: "" },
    });
    assert.equal(run.status, 0, run.stdout);
    assert.ok(existsSync(join(cwd, ".agents/capabilities/artifacts/demo.hello", LEGACY)));
  });

  test("a missing scope is artifact-not-found (exit 3) for readers and creators, and is not created", () => {
    const missing = join(tempDir(), "nope");
    for (const args of [
      ["retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK],
      ["verify", "demo.hello", "--integrity", LEGACY],
      ["ls"],
      ["resolution", "ls"],
      ["queue", "ls"],
    ]) {
      const run = expectRefusal(["--scope", missing, ...args], "artifact-not-found", "missing", 3);
      assert.equal(run.envelope.error!.details["reason"], "scope-missing", args.join(" "));
      assert.equal(existsSync(missing), false, args.join(" "));
    }
    const human = runOats(["--scope", missing, "verify", "demo.hello", "--integrity", LEGACY]);
    assert.equal(human.status, 3);
    assert.match(human.stderr, /^oats: artifact-not-found: scope does not exist: .*\n.*never creates the scope/);
  });

  test("a scope that is a file is invalid-artifact-store (exit 4)", () => {
    const file = join(tempDir(), "scope-file");
    writeFileSync(file, "x");
    const run = expectRefusal(
      ["--scope", file, "verify", "demo.hello", "--integrity", LEGACY],
      "invalid-artifact-store",
      "invalid",
      4,
    );
    assert.equal(run.envelope.error!.details["reason"], "scope-not-a-directory");
  });
});

describe("oats digest", () => {
  test("the vector tree in oats.tree-exec.v1 (default) and oats.tree-legacy.v0", () => {
    const tree = makeVectorTree(join(tempDir(), "t"));
    const exec = runOats(["digest", tree]);
    assert.equal(exec.status, 0, exec.stderr);
    assert.equal(
      exec.stdout,
      "oats.tree-exec.v1:sha256-d9cbed1fc235b8c4d7a37df9f882cbce8156ecd5e1c706260414385e3bcf6422\n",
    );
    const legacy = runOats(["digest", tree, "--format", "oats.tree-legacy.v0"]);
    assert.equal(legacy.status, 0);
    assert.equal(
      legacy.stdout,
      "oats.tree-legacy.v0:sha256-11069eff8ab56c6e67ad72ac7d88a77764601caedb91c39739cf6ac05afedb50\n",
    );
    const json = runCompactJson(["digest", tree, "--format", "oats.tree-legacy.v0"]);
    assert.deepEqual(json.envelope.result!["integrity"], {
      format: "oats.tree-legacy.v0",
      value: "sha256-11069eff8ab56c6e67ad72ac7d88a77764601caedb91c39739cf6ac05afedb50",
    });
  });

  test("touches no store", () => {
    const cwd = tempDir("oats-cwd-");
    const run = runOats(["digest", FIXTURE_PAYLOAD], { cwd, env: { OATS_SCOPE: "" } });
    assert.equal(run.stdout, `oats.tree-exec.v1:${EXEC}\n`);
    assert.deepEqual(snapshotTree(cwd), []);
  });
});

describe("progress", () => {
  /** A tree big enough that the library reports progress many times. */
  function bigTree(): string {
    const dir = fixtureCopy();
    writeFileSync(join(dir, "blob.bin"), Buffer.alloc(8 * 1024 * 1024, 7));
    return dir;
  }

  test("never appears on stderr when stderr is not a TTY", () => {
    const scope = tempDir("oats-cli-");
    const source = bigTree();
    for (const args of [["retain", source, "--id", "big", "--kind", "capture"], ["digest", source], ["fsck"]]) {
      const run = runOats(["--scope", scope, ...args]);
      assert.equal(run.status, 0, run.stderr);
      assert.equal(run.stderr, "", `no progress for ${args[0]}`);
    }
    const integrity = runCompactJson(["digest", source]).envelope.result!["text"];
    const verify = runOats(["--scope", scope, "verify", "big", "--kind", "capture", "--integrity", integrity]);
    assert.equal(verify.stderr, "");
  });

  const script = spawnSync("script", ["--version"], { encoding: "utf8" });
  test("appears on a terminal, and is silenced by --quiet and --json", {
    skip: script.status !== 0 && "util-linux `script` is not available",
  }, () => {
    const scope = tempDir("oats-cli-");
    const source = bigTree();
    const onTty = (args: string[]) => {
      const command = [process.execPath, join(REPO, "dist/cli/bin.js"), "--scope", scope, ...args]
        .map((arg) => `'${arg}'`)
        .join(" ");
      return spawnSync("script", ["-qec", command, "/dev/null"], { encoding: "utf8" }).stdout;
    };
    assert.match(
      onTty(["retain", source, "--id", "big", "--kind", "capture"]),
      /\r\x1b\[2Koats: retain big: read-copy {2}files \d+\/\d+ {2}[0-9.]+ (B|KiB|MiB)/,
    );
    assert.doesNotMatch(onTty(["--quiet", "retain", source, "--id", "big2", "--kind", "capture"]), /oats: retain/);
    assert.doesNotMatch(onTty(["--json", "retain", source, "--id", "big3", "--kind", "capture"]), /oats: retain/);
  });
});
