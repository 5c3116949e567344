/**
 * Operator experience through real child processes (dist/cli/bin.js; `npm
 * run build` first): refusal codes an operator meets first, the remedy line
 * chosen by what actually failed, every validation problem listed, `-` for
 * stdin/stdout, completion, help and version, and `oats ls` details.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import {
  appendFileSync,
  chmodSync,
  cpSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { putBlob, sourceIdentityKey } from "../src/retention/index.js";
import {
  FIXTURE_PAYLOAD,
  REPO,
  runJson,
  runOats,
  snapshotTree,
  tempDir,
  type Envelope,
  cliRefusal,
} from "./helpers.js";

function sourceWith(make: (dir: string) => void): string {
  const dir = join(tempDir("oats-src-"), "tree");
  cpSync(FIXTURE_PAYLOAD, dir, { recursive: true, verbatimSymlinks: true });
  make(dir);
  return dir;
}

describe("symlinks in a source: absolute ones are artifact-not-contained, as upstream expects", () => {
  for (const [name, target] of [
    ["pointing back into the tree", (dir: string) => join(dir, "oats.json")],
    ["pointing outside", () => "/etc/hostname"],
  ] as const) {
    test(`an absolute symlink ${name} is refused (exit 4, reason absolute-symlink) and nothing is stored`, () => {
      const source = sourceWith((dir) => symlinkSync(target(dir), join(dir, "abs-link")));
      const scope = tempDir("oats-scope-");
      const before = snapshotTree(scope);
      const error = cliRefusal(
        ["--scope", scope, "retain", source, "--id", "demo.abs", "--kind", "capture"],
        "artifact-not-contained",
        4,
      ).envelope.error!;
      assert.equal(error.details["reason"], "absolute-symlink");
      assert.equal(error.details["path"], "abs-link");
      assert.deepEqual(snapshotTree(scope), before);
    });
  }
});

describe("remedies by failure: the second line names the fix for what actually failed", () => {
  const GENERIC_SOURCE = /check the source: it must be an existing real directory/;
  const work = () => tempDir("oats-remedy-");
  const tarball = (dir: string) => {
    const path = join(dir, "pkg.tgz");
    execFileSync("tar", [
      "czf",
      path,
      "-C",
      join(FIXTURE_PAYLOAD, ".."),
      "--transform",
      "s,^payload,package,",
      "payload",
    ]);
    return path;
  };
  function secondLine(args: string[], exit: number, code: string): string {
    const run = runOats(args);
    assert.equal(run.status, exit, run.stderr);
    const lines = run.stderr.split("\n");
    assert.match(lines[0]!, new RegExp(`^oats: ${code}: `));
    assert.doesNotMatch(lines[1]!, GENERIC_SOURCE);
    return lines[1]!;
  }

  test("a wrong --tarball-integrity: check the value or fetch again; never 'the stored revision is damaged'", () => {
    const dir = work();
    const wrong = `sha512-${Buffer.alloc(64).toString("base64")}`;
    const line = secondLine(
      ["--scope", dir, "retain", tarball(dir), "--id", "demo.x", "--kind", "capture", "--tarball-integrity", wrong],
      5,
      "integrity-mismatch",
    );
    assert.match(line, /--tarball-integrity/);
    assert.match(line, /nothing was extracted or stored/);
    assert.doesNotMatch(line, /stored revision is damaged/);
  });
  test("a malformed SRI: the SRI form", () => {
    const dir = work();
    assert.match(
      secondLine(
        [
          "--scope",
          dir,
          "retain",
          tarball(dir),
          "--id",
          "demo.x",
          "--kind",
          "capture",
          "--tarball-integrity",
          "sha512-bogus",
        ],
        4,
        "invalid-input",
      ),
      /SRI string .*sha512-<88 base64 characters>/,
    );
  });
  test("an existing -o file: --force, another path or -", () => {
    const dir = work();
    runOats(["--scope", dir, "retain", FIXTURE_PAYLOAD, "--id", "demo.y", "--kind", "capture"]);
    const listed = runOats(["--scope", dir, "ls"]).stdout.trim().split(" ");
    const out = join(dir, "out.tar");
    writeFileSync(out, "keep");
    assert.match(
      secondLine(["--scope", dir, "export", `capture:demo.y@${listed[2]}`, "-o", out], 4, "invalid-input"),
      /already exists .*--force/,
    );
  });
  test("a truncated archive: fetch it again (retain) / export again (import)", () => {
    const dir = work();
    const truncated = join(dir, "trunc.tgz");
    writeFileSync(truncated, readFileSync(tarball(dir)).subarray(0, 300));
    assert.match(
      secondLine(["--scope", dir, "retain", truncated, "--id", "demo.x", "--kind", "capture"], 4, "invalid-input"),
      /truncated or is not a \(gzipped\) tar archive/,
    );
    assert.match(
      secondLine(["--scope", dir, "import", truncated], 4, "invalid-input"),
      /bundle is truncated.*Export it again/,
    );
  });
  test("a bad source identity: the identity grammar", () => {
    assert.match(
      secondLine(
        ["--scope", work(), "source", "retain", FIXTURE_PAYLOAD, "--identity", "bogus:x", "--revision", "local"],
        4,
        "invalid-input",
      ),
      /git:<url>#<path>/,
    );
  });
  test("a missing source directory, an absolute symlink, a hostile archive entry", () => {
    const dir = work();
    assert.match(
      secondLine(
        ["--scope", dir, "retain", join(dir, "nope"), "--id", "demo.x", "--kind", "capture"],
        4,
        "invalid-input",
      ),
      /does not exist; check the path/,
    );
    const source = sourceWith((tree) => symlinkSync("/etc/hostname", join(tree, "abs")));
    assert.match(
      secondLine(
        ["--scope", dir, "retain", source, "--id", "demo.x", "--kind", "capture"],
        4,
        "artifact-not-contained",
      ),
      /absolute symlink .*make it relative/,
    );
    const hostile = join(dir, "hostile.tgz");
    const staging = join(tempDir(), "package");
    mkdirSync(staging);
    symlinkSync("/etc/passwd", join(staging, "passwd"));
    execFileSync("tar", ["czf", hostile, "-C", join(staging, ".."), "package"]);
    assert.match(
      secondLine(
        ["--scope", dir, "retain", hostile, "--id", "demo.x", "--kind", "capture"],
        4,
        "artifact-not-contained",
      ),
      /archive holds an entry oats refuses/,
    );
  });
  test("too deep: a tree past --max-depth says --max-depth; a plan nested too deep says to flatten it", () => {
    const dir = work();
    const tree = join(dir, "deep");
    mkdirSync(join(tree, "a/b/c/d"), { recursive: true });
    writeFileSync(join(tree, "a/b/c/d/f"), "x");
    assert.match(
      secondLine(
        ["--scope", dir, "retain", tree, "--id", "demo.x", "--kind", "capture", "--max-depth", "2"],
        4,
        "invalid-artifact",
      ),
      /larger --max-depth/,
    );
    const plan = join(dir, "plan.json");
    writeFileSync(plan, `${"[".repeat(500)}${"]".repeat(500)}`);
    assert.match(
      secondLine(["--scope", dir, "prepare", plan], 4, "invalid-input"),
      /nested deeper than oats reads.*Flatten it/,
    );
  });
  test("a damaged stored revision: verify says it is damaged, retain that it is never overwritten", () => {
    const dir = work();
    runOats(["--scope", dir, "retain", FIXTURE_PAYLOAD, "--id", "demo.y", "--kind", "capture"]);
    const [, , integrity] = runOats(["--scope", dir, "ls"]).stdout.trim().split(" ");
    const revision = join(dir, ".agents/captures/artifacts/demo.y/tree-exec-v1", integrity!.split(":")[1]!);
    chmodSync(join(revision, "oats.json"), 0o644);
    appendFileSync(join(revision, "oats.json"), " ");
    assert.match(
      secondLine(
        ["--scope", dir, "verify", "demo.y", "--kind", "capture", "--integrity", integrity!],
        5,
        "integrity-mismatch",
      ),
      /stored revision is damaged/,
    );
    // Retaining over it is told the revision is already there, damaged, and never overwritten.
    assert.match(
      secondLine(
        ["--scope", dir, "retain", FIXTURE_PAYLOAD, "--id", "demo.y", "--kind", "capture"],
        5,
        "integrity-mismatch",
      ),
      /already stored .* never overwrites/,
    );
  });
});

describe("every validation problem in human mode, one per line, as --json lists them", () => {
  test("a plan with four problems lists all four after the remedy", () => {
    const dir = tempDir("oats-plan-");
    const plan = join(dir, "plan.json");
    writeFileSync(plan, "{}");
    const json = runJson(["--scope", dir, "prepare", plan]);
    const issues = json.envelope.error!.details["issues"] as { pointer: string; message: string }[];
    assert.ok(issues.length >= 4);
    const human = runOats(["--scope", dir, "prepare", plan]);
    const lines = human.stderr.trimEnd().split("\n");
    assert.equal(lines.length, 2 + issues.length, human.stderr);
    assert.deepEqual(
      lines.slice(2),
      issues.map((issue) => `  ${issue.pointer}: ${issue.message}`),
    );
  });
  test("one problem stays two lines", () => {
    const dir = tempDir("oats-plan-");
    const plan = join(dir, "plan.json");
    writeFileSync(plan, '{"schemaVersion":2,"instance":"a","capabilities":[],"entrypoints":{}}');
    const human = runOats(["--scope", dir, "prepare", plan]);
    assert.equal(human.stderr.trimEnd().split("\n").length, 2, human.stderr);
  });
});

describe("`-` is stdout for `export -o` and stdin for `import`", () => {
  const EXEC_ID = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
  function runBinary(args: string[], input: Buffer | string, env: NodeJS.ProcessEnv) {
    const result = spawnSync(process.execPath, [join(REPO, "dist/cli/bin.js"), ...args], {
      input,
      env: { ...process.env, ...env },
    });
    return { status: result.status, stdout: result.stdout, stderr: result.stderr.toString("utf8") };
  }

  test("export -o - | import - moves a verified revision; the private temp files are gone", () => {
    const from = tempDir("oats-from-");
    const to = tempDir("oats-to-");
    const tmp = tempDir("oats-tmp-");
    assert.equal(
      runOats(["--scope", from, "retain", FIXTURE_PAYLOAD, "--id", "demo.y", "--kind", "capture"]).status,
      0,
    );
    const exported = runBinary(["--scope", from, "export", `capture:demo.y@${EXEC_ID}`, "-o", "-"], "", {
      TMPDIR: tmp,
    });
    assert.equal(exported.status, 0, exported.stderr);
    assert.equal(
      exported.stdout.subarray(257, 262).toString("latin1"),
      "ustar",
      "stdout is the tar bundle and nothing else",
    );
    const file = join(tempDir(), "bundle.tar");
    assert.equal(runOats(["--scope", from, "export", `capture:demo.y@${EXEC_ID}`, "-o", file]).status, 0);
    assert.equal(exported.stdout.length, readFileSync(file).length);
    const imported = runBinary(["--json", "--scope", to, "import", "-"], exported.stdout, { TMPDIR: tmp });
    assert.equal(imported.status, 0, imported.stderr);
    const envelope = JSON.parse(imported.stdout.toString("utf8")) as Envelope;
    assert.equal(envelope.result!["bundle"], "-");
    assert.deepEqual(
      envelope.result!["artifacts"].map((row: { status: string }) => row.status),
      ["retained"],
    );
    assert.equal(runOats(["--scope", to, "verify", "demo.y", "--kind", "capture", "--integrity", EXEC_ID]).status, 0);
    assert.deepEqual(readdirSync(tmp), [], "no temp file left behind");
  });

  test("a truncated bundle on stdin is refused (exit 4), nothing imported, no temp file left", () => {
    const from = tempDir("oats-from-");
    const to = tempDir("oats-to-");
    const tmp = tempDir("oats-tmp-");
    runOats(["--scope", from, "retain", FIXTURE_PAYLOAD, "--id", "demo.y", "--kind", "capture"]);
    const file = join(tempDir(), "bundle.tar");
    runOats(["--scope", from, "export", `capture:demo.y@${EXEC_ID}`, "-o", file]);
    const before = snapshotTree(to);
    const run = runBinary(["--scope", to, "import", "-"], readFileSync(file).subarray(0, 1500), { TMPDIR: tmp });
    assert.equal(run.status, 4, run.stderr);
    assert.deepEqual(snapshotTree(to), before);
    assert.deepEqual(readdirSync(tmp), []);
  });

  test("--json with -o - is a usage error: stdout is the envelope's", () => {
    const scope = tempDir("oats-from-");
    const error = cliRefusal(["--scope", scope, "export", `capture:demo.y@${EXEC_ID}`, "-o", "-"], "usage", 2).envelope
      .error!;
    assert.equal(error.details["reason"], "stdout-taken");
  });
});

describe("help, version and completion", () => {
  test("`oats help <group> <sub>` is `oats <group> <sub> --help`; `oats help` is `oats --help`", () => {
    const help = runOats(["help", "resolution", "verify"]);
    assert.equal(help.status, 0, help.stderr);
    assert.equal(help.stdout, runOats(["resolution", "verify", "--help"]).stdout);
    assert.match(help.stdout, /^Usage: oats resolution verify /);
    assert.equal(runOats(["help"]).stdout, runOats(["--help"]).stdout);
    assert.match(runOats(["--scope", "/tmp", "help", "queue", "add"]).stdout, /^Usage: oats queue add /);
    const unknown = cliRefusal(["help", "bogus"], "usage", 2).envelope.error!;
    assert.match(unknown.message, /unknown command 'bogus'/);
    const json = runJson(["help", "queue", "add"]);
    assert.equal(json.envelope.command, "queue add");
    assert.match(json.envelope.result!["help"], /^Usage: oats queue add /);
  });
  test("`oats version` prints the version, as --version does; a command operand named version is not rewritten", () => {
    const version = runOats(["version"]);
    assert.equal(version.status, 0);
    assert.equal(version.stdout, runOats(["--version"]).stdout);
    assert.deepEqual(runJson(["version"]).envelope.result, { version: version.stdout.trim() });
    // `oats verify version ...` keeps "version" as the id it is.
    assert.equal(
      cliRefusal(
        ["--scope", tempDir(), "verify", "version", "--integrity", `sha256-${"0".repeat(64)}`],
        "artifact-not-found",
        3,
      ).envelope.error!.code,
      "artifact-not-found",
    );
  });
  test("`oats completion bash` completes commands, subcommands, options and choices in a real bash", () => {
    const script = runOats(["completion", "bash"]);
    assert.equal(script.status, 0, script.stderr);
    const path = join(tempDir(), "oats.bash");
    writeFileSync(path, script.stdout);
    const complete = (...words: string[]) => {
      const program =
        `source ${JSON.stringify(path)}; ` +
        `COMP_WORDS=(${["oats", ...words].map((w) => `'${w}'`).join(" ")}); ` +
        `COMP_CWORD=${words.length}; _oats; printf '%s\\n' "\${COMPREPLY[@]}"`;
      return execFileSync("bash", ["--norc", "-c", program], { encoding: "utf8" }).split("\n").filter(Boolean).sort();
    };
    const top = complete("");
    for (const name of ["retain", "verify", "resolution", "capture", "completion", "help", "version"])
      assert.ok(top.includes(name), `${name} in ${top}`);
    assert.deepEqual(complete("resolution", ""), ["ls", "show", "verify"]);
    assert.deepEqual(complete("--scope", "/tmp", "resolution", "v"), ["verify"]);
    assert.deepEqual(complete("help", "resolution", ""), ["ls", "show", "verify"]);
    assert.deepEqual(complete("retain", "--k"), ["--kind"]);
    assert.deepEqual(complete("retain", "x", "--kind", ""), ["capability", "capture", "source"]);
    assert.deepEqual(complete("export", "-o", "f", "--f"), ["--force"]);
    assert.deepEqual(complete("completion", ""), ["bash", "fish", "zsh"]);
  });
  test("`oats completion fish` and `zsh` print scripts; an unknown shell is a usage error", () => {
    const fish = runOats(["completion", "fish"]);
    assert.equal(fish.status, 0);
    for (const line of fish.stdout.trimEnd().split("\n")) assert.match(line, /^(#|complete -c oats )/);
    assert.match(
      fish.stdout,
      /-n '__fish_seen_subcommand_from resolution; and not __fish_seen_subcommand_from show verify ls' -f -a verify/,
    );
    const zsh = runOats(["completion", "zsh"]);
    assert.match(zsh.stdout, /bashcompinit/);
    assert.match(zsh.stdout, /complete -o filenames -F _oats oats/);
    assert.equal(cliRefusal(["completion", "tcsh"], "usage", 2).envelope.error!.code, "usage");
  });
  for (const shell of ["fish", "zsh"]) {
    test(`the ${shell} script parses in a real ${shell}`, (t) => {
      const found = spawnSync("sh", ["-c", `command -v ${shell}`]).status === 0;
      if (!found) return t.skip(`${shell} is not installed on this machine: its script is checked by shape only`);
      const path = join(tempDir(), `oats.${shell}`);
      writeFileSync(path, runOats(["completion", shell]).stdout);
      execFileSync(shell, ["-n", path]);
    });
  }
});

describe("oats ls: sizes and qualified identities; a bare sha256 that is retained under its exec name says so", () => {
  const EXEC_VALUE = "sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
  const IDENTITY = "git:https://example.test/org/repo#souls/a";

  test(
    "each revision's size (regular files and their bytes), and a source's " +
      "qualified identity, in human and JSON form",
    () => {
      const scope = tempDir("oats-ls-");
      assert.equal(runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", "demo.hello"]).status, 0);
      assert.equal(
        runOats(["--scope", scope, "source", "retain", FIXTURE_PAYLOAD, "--identity", IDENTITY, "--revision", "local"])
          .status,
        0,
      );
      const pathIdentity = `path:${FIXTURE_PAYLOAD}`;
      assert.equal(
        runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--kind", "source", "--id", pathIdentity]).status,
        0,
      );
      const bareKey = "0".repeat(64);
      assert.equal(
        runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--kind", "source", "--id", bareKey]).status,
        0,
      );
      const json = runJson(["--scope", scope, "ls"]);
      const rows = json.envelope.result!["revisions"] as {
        kind: string;
        key: string;
        identity?: string | null;
        size: { files: number; bytes: number };
      }[];
      const expectedBytes = execFileSync("sh", ["-c", `find "${FIXTURE_PAYLOAD}" -type f -exec cat {} + | wc -c`], {
        encoding: "utf8",
      }).trim();
      for (const row of rows) assert.deepEqual(row.size, { files: 5, bytes: Number(expectedBytes) });
      const byKey = new Map(rows.map((row) => [row.key, row]));
      assert.equal(byKey.get(sourceIdentityKey(IDENTITY))!.identity, IDENTITY);
      assert.equal(byKey.get(sourceIdentityKey(pathIdentity))!.identity, pathIdentity);
      assert.equal(byKey.get(bareKey)!.identity, null, "a source retained by its key alone has no recorded identity");
      assert.equal("identity" in byKey.get("demo.hello")!, false);
      const human = runOats(["--scope", scope, "ls"]).stdout;
      assert.match(
        human,
        new RegExp(
          `^source ${sourceIdentityKey(IDENTITY)} ` +
            `oats\\.tree-exec\\.v1:${EXEC_VALUE}  800 B in 5 files  ` +
            `${IDENTITY.replace(/[.#/]/g, "\\$&")}$`,
          "m",
        ),
      );
      assert.match(human, new RegExp(`^source ${bareKey} .*\\(identity not recorded\\)$`, "m"));
      assert.match(human, /^capability demo\.hello oats\.tree-exec\.v1:\S+ {2}800 B in 5 files$/m);
      // --quiet keeps the three script-friendly columns.
      for (const line of runOats(["--scope", scope, "--quiet", "ls"]).stdout.trimEnd().split("\n"))
        assert.equal(line.split(" ").length, 3, line);
    },
  );

  test("a pinned identity is verified by its key: a blob with other bytes is not shown as the identity", () => {
    const scope = tempDir("oats-ls-");
    runOats(["--scope", scope, "source", "retain", FIXTURE_PAYLOAD, "--identity", IDENTITY, "--revision", "local"]);
    const blob = join(scope, ".agents/blobs", `sha256-${sourceIdentityKey(IDENTITY)}`);
    chmodSync(blob, 0o644);
    writeFileSync(blob, `${JSON.stringify("git:https://evil.test/x#y")}\n`);
    const run = runJson(["--scope", scope, "ls"]);
    assert.equal(run.status, 0, run.stdout);
    assert.doesNotMatch(run.stdout, /evil\.test/);
    const [row] = run.envelope.result!["revisions"] as { identity: unknown; identityError: unknown }[];
    assert.equal(row!.identity, null);
    assert.equal(row!.identityError, "integrity-mismatch");
    assert.match(runOats(["--scope", scope, "ls"]).stdout, /\(identity unreadable: integrity-mismatch\)$/m);
  });

  test(
    "a source retained under a bare key that names some other blob (a pinned " +
      "config) shows no identity, and ls does not fail",
    () => {
      const scope = tempDir("oats-ls-");
      const { digest } = putBlob(scope, Buffer.from("schemaVersion: 1\nwings: {}\n"));
      const key = digest.slice("sha256-".length);
      assert.equal(runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--kind", "source", "--id", key]).status, 0);
      const run = runJson(["--scope", scope, "ls"]);
      assert.equal(run.status, 0, run.stdout);
      assert.equal((run.envelope.result!["revisions"] as { identity: unknown }[])[0]!.identity, null);
    },
  );

  test("verify with a bare sha256 that misses as legacy but exists as oats.tree-exec.v1 says so (exit 3)", () => {
    const scope = tempDir("oats-ls-");
    runOats(["--scope", scope, "retain", FIXTURE_PAYLOAD, "--id", "demo.hello"]);
    const error = cliRefusal(
      ["--scope", scope, "verify", "demo.hello", "--integrity", EXEC_VALUE],
      "artifact-not-found",
      3,
    ).envelope.error!;
    assert.equal(error.details["reason"], "exec-named-only");
    assert.equal(error.details["execIntegrity"], `oats.tree-exec.v1:${EXEC_VALUE}`);
    assert.match(error.message, /retained as oats\.tree-exec\.v1:sha256-/);
    const human = runOats(["--scope", scope, "verify", "demo.hello", "--integrity", EXEC_VALUE]);
    assert.match(human.stderr.split("\n")[1]!, /bare sha256-<hex> means oats\.tree-legacy\.v0/);
    // A digest retained under neither name stays the plain miss.
    const other = cliRefusal(
      ["--scope", scope, "verify", "demo.hello", "--integrity", `sha256-${"1".repeat(64)}`],
      "artifact-not-found",
      3,
    ).envelope.error!;
    assert.notEqual(other.details["reason"], "exec-named-only");
  });
});
