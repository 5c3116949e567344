/**
 * Source retention (source trees and git commits): retainSource
 * from a directory as it is (`local`) and from a real git repository at a
 * full commit (the tree of that commit, never the working tree), with every
 * refusal leaving the store byte-for-byte as it was and no extraction
 * staging behind; and `oats source retain` through the built CLI (`npm run
 * build` first).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { retainSource } from "../src/acquisition/source.js";
import { digestTree, sourceIdentityKey } from "../src/retention/index.js";
import { runOats, snapshotTree, tempDir } from "./helpers.js";
import { git, gitEnv, initRepository } from "./support/git.js";

const IDENTITY = "git:https://example.org/org/souls#souls/a";

interface Repo {
  readonly dir: string;
  /** First commit: README, an executable, a relative symlink, a nested file. */
  readonly first: string;
  /** Second commit: README changed, a file added. */
  readonly second: string;
}

/** `salt` makes the history differ from every other repository made in the same second with the same files. */
function makeRepo(salt?: string): Repo {
  const dir = join(tempDir("oats-git-"), "repo");
  mkdirSync(dir);
  initRepository(dir);
  git(dir, "config", "commit.gpgsign", "false");
  writeFileSync(join(dir, "README.md"), "committed readme\n");
  mkdirSync(join(dir, "bin"));
  writeFileSync(join(dir, "bin/run"), "#!/bin/sh\necho run\n");
  chmodSync(join(dir, "bin/run"), 0o755);
  mkdirSync(join(dir, "docs/deep"), { recursive: true });
  writeFileSync(join(dir, "docs/deep/note.txt"), "nested\n");
  symlinkSync("../bin/run", join(dir, "docs/run-link"));
  if (salt !== undefined) writeFileSync(join(dir, "salt.txt"), `${salt}\n`);
  git(dir, "add", "-A");
  git(dir, "commit", "-q", "-m", "first");
  const first = git(dir, "rev-parse", "HEAD");
  writeFileSync(join(dir, "README.md"), "second readme\n");
  writeFileSync(join(dir, "added.txt"), "added in the second commit\n");
  git(dir, "add", "-A");
  git(dir, "commit", "-q", "-m", "second");
  const second = git(dir, "rev-parse", "HEAD");
  return { dir, first, second };
}

/** Make the working tree differ from every commit: a tracked change, an exec bit, an untracked file. */
function dirtyWorkingTree(repo: Repo): void {
  writeFileSync(join(repo.dir, "README.md"), "uncommitted edit\n");
  chmodSync(join(repo.dir, "docs/deep/note.txt"), 0o755);
  writeFileSync(join(repo.dir, "untracked.txt"), "never committed\n");
}

/** The reference: `git archive <commit> | tar x` into a fresh directory. */
function archiveOf(repo: Repo, commit: string): string {
  const out = tempDir("oats-git-ref-");
  execFileSync("sh", ["-c", `git archive --format=tar ${commit} | tar -x -C "$1"`, "sh", out], {
    cwd: repo.dir,
    env: gitEnv(),
  });
  return out;
}

async function execDigest(dir: string): Promise<string> {
  return (await digestTree(dir))["oats.tree-exec.v1"]!;
}

function extractRoot(scope: string): string {
  return join(scope, ".agents", "extract");
}

/** A scope that already holds a retained source revision, so "unchanged" covers a populated store. */
async function populatedScope(repo: Repo): Promise<string> {
  const scope = tempDir("oats-scope-");
  await retainSource(scope, { identity: IDENTITY, revision: repo.first, dir: repo.dir });
  return scope;
}

/**
 * A `git` first on PATH that logs its argv and the GIT_* variables it was
 * given, then runs the real git: shows what reached git and with what.
 */
function gitSpy(): { bin: string; log: string; calls: () => string[] } {
  const bin = tempDir("oats-git-spy-");
  const log = join(bin, "calls.log");
  const realGit = execFileSync("sh", ["-c", "command -v git"], { encoding: "utf8" }).trim();
  writeFileSync(
    join(bin, "git"),
    `#!/bin/sh\nprintf 'ARGV' >> "${log}"\nfor a in "$@"; do printf ' [%s]' ` +
      `"$a" >> "${log}"; done\nprintf ' ENV %s\\n' "$(env | grep '^GIT_' | ` +
      `sort | tr '\\n' ' ')" >> "${log}"\nexec "${realGit}" "$@"\n`,
  );
  chmodSync(join(bin, "git"), 0o755);
  writeFileSync(log, "");
  return {
    bin,
    log,
    calls: () =>
      readFileSync(log, "utf8")
        .split("\n")
        .filter((line) => line !== ""),
  };
}

async function withEnv<T>(changes: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const saved = new Map(Object.keys(changes).map((name) => [name, process.env[name]]));
  Object.assign(process.env, changes);
  try {
    return await fn();
  } finally {
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}

async function expectRefusal(
  scope: string,
  request: { identity: string; revision: string; dir: string },
  code: string,
  reason: string,
): Promise<Record<string, unknown>> {
  const before = snapshotTree(scope);
  let caught: { code?: string; details?: Record<string, unknown> } | undefined;
  await assert.rejects(retainSource(scope, request), (error: { code?: string; details?: Record<string, unknown> }) => {
    caught = error;
    return true;
  });
  assert.equal(caught!.code, code, `${JSON.stringify(request.revision)}: ${JSON.stringify(caught)}`);
  assert.equal(caught!.details!["reason"], reason, JSON.stringify(caught));
  assert.deepEqual(snapshotTree(scope), before, "the store is byte-for-byte unchanged");
  assert.equal(existsSync(extractRoot(scope)), false, "no extraction staging is left behind");
  return caught!.details!;
}

describe("retainSource from a git commit", () => {
  test(
    "Given a commit and a dirty working tree, When the commit is retained, " +
      "Then the store holds exactly the commit's tree, not the working tree",
    async () => {
      const repo = makeRepo();
      dirtyWorkingTree(repo);
      const scope = tempDir("oats-scope-");
      const receipt = await retainSource(scope, { identity: IDENTITY, revision: repo.first, dir: repo.dir });

      const reference = archiveOf(repo, repo.first);
      assert.equal(
        receipt.integrity.value,
        await execDigest(reference),
        "the digest of `git archive | tar x` of that commit",
      );
      assert.equal(await execDigest(receipt.dir), await execDigest(reference), "the stored tree measures the same");
      assert.notEqual(receipt.integrity.value, await execDigest(repo.dir), "the working tree measures differently");
      assert.equal(readFileSync(join(receipt.dir, "README.md"), "utf8"), "committed readme\n");
      assert.equal(existsSync(join(receipt.dir, "untracked.txt")), false);
      assert.equal(existsSync(join(receipt.dir, "added.txt")), false, "nothing from a later commit");
      assert.equal(existsSync(join(receipt.dir, ".git")), false);

      assert.deepEqual(
        {
          kind: receipt.kind,
          key: receipt.key,
          identity: receipt.identity,
          revision: receipt.revision,
          commit: receipt.commit,
          tree: receipt.tree,
          status: receipt.status,
        },
        {
          kind: "source",
          key: sourceIdentityKey(IDENTITY),
          identity: IDENTITY,
          revision: repo.first,
          commit: repo.first,
          tree: git(repo.dir, "rev-parse", `${repo.first}^{tree}`),
          status: "retained",
        },
      );
      assert.ok(
        receipt.dir.startsWith(
          `${join(scope, ".agents/sources/artifacts", sourceIdentityKey(IDENTITY), "tree-exec-v1")}/`,
        ),
      );
      assert.equal(existsSync(extractRoot(scope)), false, "the extraction staging and its store root are gone");
    },
  );

  test(
    "Given a commit with an executable and a relative symlink, When it is " +
      "retained, Then the exec bits and the link text are kept",
    async () => {
      const repo = makeRepo();
      dirtyWorkingTree(repo);
      const receipt = await retainSource(tempDir("oats-scope-"), {
        identity: IDENTITY,
        revision: repo.first,
        dir: repo.dir,
      });
      assert.notEqual(statSync(join(receipt.dir, "bin/run")).mode & 0o100, 0, "bin/run stays executable");
      assert.equal(
        statSync(join(receipt.dir, "docs/deep/note.txt")).mode & 0o100,
        0,
        "the working tree's exec bit is not taken",
      );
      assert.equal(readlinkSync(join(receipt.dir, "docs/run-link")), "../bin/run", "the link text verbatim");
    },
  );

  test(
    "Given two commits, When both are retained, Then there are two revisions " +
      "under the identity's key, and retaining one again is kept",
    async () => {
      const repo = makeRepo();
      const scope = tempDir("oats-scope-");
      const first = await retainSource(scope, { identity: IDENTITY, revision: repo.first, dir: repo.dir });
      const second = await retainSource(scope, { identity: IDENTITY, revision: repo.second, dir: repo.dir });
      assert.notEqual(first.integrity.value, second.integrity.value);
      assert.equal(second.integrity.value, await execDigest(archiveOf(repo, repo.second)));
      assert.equal(readFileSync(join(second.dir, "added.txt"), "utf8"), "added in the second commit\n");
      const revisions = join(scope, ".agents/sources/artifacts", sourceIdentityKey(IDENTITY), "tree-exec-v1");
      assert.deepEqual(snapshotTree(revisions).filter((row) => /^D sha256-[0-9a-f]{64} /.test(row)).length, 2);
      const again = await retainSource(scope, { identity: IDENTITY, revision: repo.first, dir: repo.dir });
      assert.equal(again.status, "kept");
      assert.equal(again.integrity.value, first.integrity.value);
    },
  );

  test(
    "Given GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE and GIT_OBJECT_DIRECTORY " +
      "pointing at another repository, When a commit is retained, Then the " +
      "named repository's commit is what is retained",
    async () => {
      const repo = makeRepo();
      const other = makeRepo("the other repository");
      assert.notEqual(other.first, repo.first);
      writeFileSync(join(other.dir, "README.md"), "the other repository\n");
      const scope = tempDir("oats-scope-");
      const receipt = await withEnv(
        {
          GIT_DIR: join(other.dir, ".git"),
          GIT_WORK_TREE: other.dir,
          GIT_INDEX_FILE: join(other.dir, ".git/index"),
          GIT_OBJECT_DIRECTORY: join(other.dir, ".git/objects"),
          GIT_CONFIG_COUNT: "1",
          GIT_CONFIG_KEY_0: "core.bogus",
          GIT_CONFIG_VALUE_0: "x",
        },
        () => retainSource(scope, { identity: IDENTITY, revision: repo.first, dir: repo.dir }),
      );
      assert.equal(receipt.integrity.value, await execDigest(archiveOf(repo, repo.first)));
    },
  );

  test(
    "Given a replace ref that swaps the commit for another, When the commit " +
      "is retained, Then the commit's own tree is retained",
    async () => {
      const repo = makeRepo();
      git(repo.dir, "replace", repo.first, repo.second);
      const receipt = await retainSource(tempDir("oats-scope-"), {
        identity: IDENTITY,
        revision: repo.first,
        dir: repo.dir,
      });
      assert.equal(readFileSync(join(receipt.dir, "README.md"), "utf8"), "committed readme\n");
      assert.equal(existsSync(join(receipt.dir, "added.txt")), false);
    },
  );

  test(
    "Given an export-subst attribute, When the commit is retained, Then the " +
      "file is kept as committed, placeholders unexpanded",
    async () => {
      const repo = makeRepo();
      writeFileSync(join(repo.dir, ".gitattributes"), "version.txt export-subst\n");
      writeFileSync(join(repo.dir, "version.txt"), "$Format:%H$\n");
      git(repo.dir, "add", "-A");
      git(repo.dir, "commit", "-q", "-m", "subst");
      const commit = git(repo.dir, "rev-parse", "HEAD");
      const receipt = await retainSource(tempDir("oats-scope-"), {
        identity: IDENTITY,
        revision: commit,
        dir: repo.dir,
      });
      assert.equal(readFileSync(join(receipt.dir, "version.txt"), "utf8"), "$Format:%H$\n");
    },
  );

  test(
    "Given a spy git on PATH, When a commit is retained, Then every git call " +
      "passes --end-of-options before the object, without GIT_DIR or any " +
      "redirecting GIT_* variable",
    async () => {
      const repo = makeRepo();
      const spy = gitSpy();
      await withEnv({ PATH: `${spy.bin}:${process.env["PATH"]}`, GIT_DIR: join(repo.dir, "nowhere") }, () =>
        retainSource(tempDir("oats-scope-"), { identity: IDENTITY, revision: repo.first, dir: repo.dir }),
      );
      const calls = spy.calls();
      const objectCalls = calls.filter((line) => line.includes(repo.first) || /\[ls-tree\]/.test(line));
      assert.ok(
        calls.some((line) => line.includes("[cat-file] [--batch]")),
        calls.join("\n"),
      );
      assert.ok(
        calls.some((line) => line.includes("[cat-file] [-t]")),
        calls.join("\n"),
      );
      assert.ok(!calls.some((line) => /\[(archive|checkout|show|diff)\]/.test(line)), calls.join("\n"));
      for (const line of objectCalls) assert.match(line, /\[--end-of-options\] \[[0-9a-f]{40}(\^\{tree\})?\]/, line);
      for (const line of calls) {
        const env = line
          .slice(line.indexOf(" ENV ") + 5)
          .trim()
          .split(" ")
          .filter(Boolean);
        assert.deepEqual(
          env
            .map((pair) => pair.split("=")[0])
            .filter(
              (name) =>
                name !== "GIT_NO_REPLACE_OBJECTS" &&
                name !== "GIT_TERMINAL_PROMPT" &&
                name !== "GIT_NO_LAZY_FETCH" &&
                name !== "GIT_CONFIG_PARAMETERS",
            ),
          [],
          line,
        );
      }
    },
  );
});

describe("retainSource with revision local", () => {
  test(
    "Given a directory, When it is retained as local, Then the directory is " +
      "retained as it is under the identity's key",
    async () => {
      const source = join(tempDir("oats-local-"), "soul");
      mkdirSync(join(source, "deep"), { recursive: true });
      writeFileSync(join(source, "deep/note.txt"), "as it is, never committed\n");
      chmodSync(join(source, "deep/note.txt"), 0o755);
      symlinkSync("deep/note.txt", join(source, "link"));
      const identity = `path:${source}`;
      const scope = tempDir("oats-scope-");
      const receipt = await retainSource(scope, { identity, revision: "local", dir: source });
      assert.equal(receipt.integrity.value, await execDigest(source));
      assert.equal(receipt.key, sourceIdentityKey(identity));
      assert.equal(receipt.identity, identity);
      assert.equal(receipt.revision, "local");
      assert.equal(receipt.commit, undefined);
      assert.notEqual(statSync(join(receipt.dir, "deep/note.txt")).mode & 0o100, 0, "the exec bit, as it is");
      assert.equal(readlinkSync(join(receipt.dir, "link")), "deep/note.txt");
      assert.equal(existsSync(extractRoot(scope)), false);
    },
  );
});

describe("retainSource refusals: the store unchanged, no staging behind", () => {
  test(
    "Given revisions that are not a full lowercase commit id, When retained, " +
      "Then invalid-input not-a-full-commit before git runs",
    async () => {
      const repo = makeRepo();
      const scope = await populatedScope(repo);
      const empty = tempDir("oats-scope-");
      const spy = gitSpy();
      const refused = [
        repo.second.slice(0, 12),
        repo.second.slice(0, 39),
        "main",
        "HEAD",
        "HEAD~1",
        "--upload-pack=evil",
        `--output=${join(empty, "x")}`,
        repo.second.toUpperCase(),
        `${repo.second}\n`,
        ` ${repo.second}`,
        `${repo.second}^{tree}`,
        "",
        "LOCAL",
      ];
      await withEnv({ PATH: `${spy.bin}:${process.env["PATH"]}` }, async () => {
        for (const revision of refused) {
          for (const where of [scope, empty])
            await expectRefusal(
              where,
              { identity: IDENTITY, revision, dir: repo.dir },
              "invalid-input",
              "not-a-full-commit",
            );
        }
      });
      assert.deepEqual(spy.calls(), [], "git never ran");
      assert.deepEqual(snapshotTree(empty), [], "an empty scope stays empty");
    },
  );

  test(
    "Given a full commit id that is not in the repository, When retained, " +
      "Then artifact-not-found commit-not-found with git's message",
    async () => {
      const repo = makeRepo();
      const scope = await populatedScope(repo);
      const details = await expectRefusal(
        scope,
        { identity: IDENTITY, revision: "0123456789abcdef0123456789abcdef01234567", dir: repo.dir },
        "artifact-not-found",
        "commit-not-found",
      );
      assert.equal(typeof details["stderr"], "string");
      assert.notEqual(details["stderr"], "");
      assert.doesNotMatch(String(details["stderr"]), /\n/, "the first line only");
    },
  );

  test("Given the id of a tree or a blob, When retained, Then invalid-input not-a-commit", async () => {
    const repo = makeRepo();
    const scope = await populatedScope(repo);
    const tree = git(repo.dir, "rev-parse", `${repo.first}^{tree}`);
    const blob = git(repo.dir, "rev-parse", `${repo.first}:README.md`);
    assert.equal(
      (
        await expectRefusal(
          scope,
          { identity: IDENTITY, revision: tree, dir: repo.dir },
          "invalid-input",
          "not-a-commit",
        )
      )["type"],
      "tree",
    );
    assert.equal(
      (
        await expectRefusal(
          scope,
          { identity: IDENTITY, revision: blob, dir: repo.dir },
          "invalid-input",
          "not-a-commit",
        )
      )["type"],
      "blob",
    );
  });

  test(
    "Given a directory that is not a git repository, or a subdirectory of " +
      "one, When retained at a commit, Then invalid-input",
    async () => {
      const repo = makeRepo();
      const scope = await populatedScope(repo);
      const plain = tempDir("oats-plain-");
      writeFileSync(join(plain, "file.txt"), "x\n");
      await expectRefusal(
        scope,
        { identity: IDENTITY, revision: repo.first, dir: plain },
        "invalid-input",
        "not-a-git-repository",
      );
      await expectRefusal(
        scope,
        { identity: IDENTITY, revision: repo.first, dir: join(repo.dir, "docs") },
        "invalid-input",
        "not-repository-root",
      );
      await expectRefusal(
        scope,
        { identity: IDENTITY, revision: repo.first, dir: join(plain, "missing") },
        "invalid-input",
        "source-missing",
      );
    },
  );

  test(
    "Given a bad source identity, When retained, Then invalid-input " + "invalid-identity before anything else",
    async () => {
      const repo = makeRepo();
      const scope = await populatedScope(repo);
      for (const identity of [
        "souls/a",
        "git:https://example.org/repo",
        "path:relative/dir",
        "",
        "git:https://example.org/a b#x",
        sourceIdentityKey(IDENTITY),
      ]) {
        await expectRefusal(
          scope,
          { identity, revision: repo.first, dir: repo.dir },
          "invalid-input",
          "invalid-identity",
        );
        await expectRefusal(scope, { identity, revision: "local", dir: repo.dir }, "invalid-input", "invalid-identity");
      }
    },
  );

  test("Given a commit with a submodule (gitlink) entry, When retained, Then invalid-artifact submodule", async () => {
    const repo = makeRepo();
    const scope = await populatedScope(repo);
    git(repo.dir, "update-index", "--add", "--cacheinfo", `160000,${repo.first},vendor/sub`);
    git(repo.dir, "commit", "-q", "-m", "gitlink");
    const commit = git(repo.dir, "rev-parse", "HEAD");
    const details = await expectRefusal(
      scope,
      { identity: IDENTITY, revision: commit, dir: repo.dir },
      "invalid-artifact",
      "submodule",
    );
    assert.equal(details["path"], "vendor/sub");
  });

  test(
    "Given an export-ignore attribute, When the commit is retained, Then the " +
      "file is retained anyway: attributes never apply to the commit's tree",
    async () => {
      const repo = makeRepo();
      writeFileSync(join(repo.dir, ".gitattributes"), "docs/deep/note.txt export-ignore\n");
      git(repo.dir, "add", "-A");
      git(repo.dir, "commit", "-q", "-m", "ignore");
      const commit = git(repo.dir, "rev-parse", "HEAD");
      const receipt = await retainSource(tempDir("oats-scope-"), {
        identity: IDENTITY,
        revision: commit,
        dir: repo.dir,
      });
      assert.equal(readFileSync(join(receipt.dir, "docs/deep/note.txt"), "utf8"), "nested\n");
    },
  );
});

describe("oats source retain (CLI)", () => {
  type Envelope = {
    ok: boolean;
    command: string | null;
    result?: Record<string, any>;
    error?: { code: string; details: Record<string, any> };
  };
  const runJson = (args: string[]) => {
    const run = runOats(["--json", ...args]);
    assert.match(run.stdout, /^[^\n]+\n$/, `exactly one line on stdout: ${JSON.stringify(run.stdout)} ${run.stderr}`);
    return { ...run, envelope: JSON.parse(run.stdout) as Envelope };
  };

  test(
    "Given a repository and a commit, When `oats --json source retain` runs, " +
      "Then one success envelope with the receipt, identity, revision and commit",
    async () => {
      const repo = makeRepo();
      dirtyWorkingTree(repo);
      const scope = tempDir("oats-scope-");
      const run = runJson([
        "--scope",
        scope,
        "source",
        "retain",
        repo.dir,
        "--identity",
        IDENTITY,
        "--revision",
        repo.first,
      ]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.equal(run.envelope.ok, true);
      assert.equal(run.envelope.command, "source retain");
      const result = run.envelope.result!;
      assert.equal(result["identity"], IDENTITY);
      assert.equal(result["revision"], repo.first);
      assert.equal(result["commit"], repo.first);
      assert.equal(result["key"], sourceIdentityKey(IDENTITY));
      assert.equal(result["integrity"].value, await execDigest(archiveOf(repo, repo.first)));

      const human = runOats([
        "--scope",
        scope,
        "source",
        "retain",
        repo.dir,
        "--identity",
        IDENTITY,
        "--revision",
        repo.first,
      ]);
      assert.equal(human.status, 0, human.stderr);
      assert.match(human.stdout, /^kept \(already retained; verified\) source [0-9a-f]{64}\n {2}identity {2}git:/);
    },
  );

  test(
    "Given a ref instead of a commit, When `oats source retain` runs, Then " +
      "invalid-input with exit 4 and nothing written",
    () => {
      const repo = makeRepo();
      const scope = tempDir("oats-scope-");
      for (const revision of ["HEAD", "main", "--upload-pack=evil"]) {
        const run = runJson([
          "--scope",
          scope,
          "source",
          "retain",
          repo.dir,
          "--identity",
          IDENTITY,
          `--revision=${revision}`,
        ]);
        assert.equal(run.status, 4, run.stdout + run.stderr);
        assert.equal(run.envelope.error!.code, "invalid-input");
        assert.equal(run.envelope.error!.details["reason"], "not-a-full-commit");
        assert.equal(run.envelope.command, "source retain");
      }
      assert.deepEqual(snapshotTree(scope), []);
    },
  );

  test(
    "Given a commit that is not in the repository, When `oats source retain` " +
      "runs, Then artifact-not-found with exit 3",
    () => {
      const repo = makeRepo();
      const scope = tempDir("oats-scope-");
      const run = runJson([
        "--scope",
        scope,
        "source",
        "retain",
        repo.dir,
        "--identity",
        IDENTITY,
        "--revision",
        "f".repeat(40),
      ]);
      assert.equal(run.status, 3, run.stdout + run.stderr);
      assert.equal(run.envelope.error!.code, "artifact-not-found");
      assert.equal(run.envelope.error!.details["reason"], "commit-not-found");
      assert.deepEqual(snapshotTree(scope), []);
    },
  );
});
