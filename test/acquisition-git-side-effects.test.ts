/**
 * Retaining a git commit runs nothing of the repository's.
 * The repository's author is untrusted: its `.gitattributes` and its
 * `.git/config` may name filters, textconv drivers, an fsmonitor hook, hooks
 * and transports that run a command. Each test here arms every one of them
 * with a command that writes a marker file, retains a commit through the
 * real git and the real store, and checks the bytes retained are the
 * committed ones and the marker never appears.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { deflateSync } from "node:zlib";
import { join } from "node:path";
import { describe, test } from "node:test";
import { retainSource } from "../src/acquisition/source.js";
import { snapshotTree, tempDir } from "./helpers.js";
import { git, gitEnv, initRepository } from "./support/git.js";

const IDENTITY = "git:https://example.org/org/souls#souls/evil";

/** A script that records that it ran (and with which name), then behaves like `cat`, so a filter that runs still
 * "works". */
function markerScript(dir: string, then = "cat"): { script: string; marker: string; ran: () => string[] } {
  const marker = join(dir, "MARKER");
  const script = join(dir, "evil.sh");
  writeFileSync(script, `#!/bin/sh\necho "$0 $*" >> "${marker}"\n${then}\n`);
  chmodSync(script, 0o755);
  return {
    script,
    marker,
    ran: () => (existsSync(marker) ? readFileSync(marker, "utf8").split("\n").filter(Boolean) : []),
  };
}

const COMMITTED = "committed bytes, $Format:%H$, never smudged\r\n";

/**
 * A repository whose committed `.gitattributes` puts every file under
 * `filter=evil diff=evil` (and one under export-ignore and export-subst), and
 * whose config, set after the commit so our own fixture commit runs none of
 * it, arms the smudge, clean and process filters, textconv, fsmonitor, every
 * hook and a pager with the marker script.
 */
function armedRepository() {
  const root = tempDir("oats-git-evil-");
  const dir = join(root, "repo");
  mkdirSync(dir);
  initRepository(dir);
  writeFileSync(
    join(dir, ".gitattributes"),
    "* filter=evil diff=evil\nignored.txt export-ignore\nsecret.txt export-subst\n",
  );
  writeFileSync(join(dir, "secret.txt"), COMMITTED);
  writeFileSync(join(dir, "ignored.txt"), "export-ignore does not apply\n");
  git(dir, "add", "-A");
  git(dir, "commit", "-q", "-m", "armed");
  const commit = git(dir, "rev-parse", "HEAD");
  const evil = markerScript(root);
  const hooks = join(root, "hooks");
  mkdirSync(hooks);
  for (const hook of [
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "post-rewrite",
    "fsmonitor-watchman",
  ]) {
    writeFileSync(join(hooks, hook), `#!/bin/sh\nexec "${evil.script}" hook-${hook}\n`);
    chmodSync(join(hooks, hook), 0o755);
  }
  for (const [key, value] of [
    ["filter.evil.smudge", `${evil.script} smudge`],
    ["filter.evil.clean", `${evil.script} clean`],
    ["filter.evil.required", "true"],
    ["diff.evil.textconv", `${evil.script} textconv`],
    ["core.fsmonitor", `${evil.script}`],
    ["core.hooksPath", hooks],
    ["core.pager", `${evil.script} pager`],
  ]) {
    git(dir, "config", key!, value!);
  }
  // The working tree differs from the commit, so anything that refreshed the index would see it.
  writeFileSync(join(dir, "secret.txt"), "working tree, not the commit\n");
  return { dir, commit, evil };
}

/** The marker is checked before a refusal is rethrown: a refusal after the filter ran is still a side effect. */
function retainOrError(repo: { dir: string; commit: string }) {
  return retainSource(tempDir("oats-scope-"), { identity: IDENTITY, revision: repo.commit, dir: repo.dir }).catch(
    (error: Error) => error,
  );
}

describe("retainSource of a commit runs nothing of the repository's", () => {
  test(
    "Given a repository whose attributes and config arm smudge/clean " +
      "filters, textconv, fsmonitor and hooks, When a commit is retained, Then " +
      "the committed bytes are retained exactly and no marker appears",
    async () => {
      const repo = armedRepository();
      const receipt = await retainOrError(repo);
      assert.deepEqual(repo.evil.ran(), [], "nothing of the repository's ran");
      if (receipt instanceof Error) throw receipt;
      assert.equal(
        readFileSync(join(receipt.dir, "secret.txt"), "utf8"),
        COMMITTED,
        "committed bytes: no smudge, no export-subst, CRLF kept",
      );
      assert.equal(readFileSync(join(receipt.dir, "ignored.txt"), "utf8"), "export-ignore does not apply\n");
      assert.equal(readFileSync(join(receipt.dir, ".gitattributes"), "utf8").startsWith("* filter=evil"), true);
    },
  );

  test("Given a filter.<x>.process driver, When a commit is retained, Then it is never started", async () => {
    const repo = armedRepository();
    git(repo.dir, "config", "filter.evil.process", `${repo.evil.script} process`);
    const receipt = await retainOrError(repo);
    assert.deepEqual(repo.evil.ran(), []);
    if (receipt instanceof Error) throw receipt;
    assert.equal(readFileSync(join(receipt.dir, "secret.txt"), "utf8"), COMMITTED);
  });

  test("Given a partial clone whose promisor remote's upload-pack is a marker " +
    "command, When a commit with missing blobs is retained, Then no lazy " +
    "fetch runs it and the refusal leaves the store unchanged", {
    timeout: 60_000,
  }, async () => {
    const root = tempDir("oats-git-promisor-");
    const origin = join(root, "origin");
    mkdirSync(origin);
    git(origin, "init", "-q", "-b", "main");
    git(origin, "config", "user.name", "Oats Test");
    git(origin, "config", "user.email", "oats@example.org");
    git(origin, "config", "uploadpack.allowFilter", "true");
    writeFileSync(join(origin, "a.txt"), "only in the promisor\n");
    git(origin, "add", "-A");
    git(origin, "commit", "-q", "-m", "one");
    const commit = git(origin, "rev-parse", "HEAD");
    const clone = join(root, "clone");
    execFileSync("git", ["clone", "-q", "--no-checkout", "--filter=blob:none", `file://${origin}`, clone], {
      env: gitEnv(),
    });
    // It exits at once: a transport that waited for a protocol exchange would hang git instead of failing the test.
    const evil = markerScript(root, "exit 1");
    git(clone, "config", "remote.origin.uploadpack", `${evil.script} upload-pack`);
    git(clone, "config", "protocol.allow", "always");
    git(clone, "config", "protocol.file.allow", "always");
    const scope = tempDir("oats-scope-");
    const before = snapshotTree(scope);
    await assert.rejects(
      retainSource(scope, { identity: IDENTITY, revision: commit, dir: clone }),
      (error: { code?: string; details?: Record<string, unknown> }) => {
        // git 2.39.5+ stops at GIT_NO_LAZY_FETCH (git-failed); an older one, at the forbidden
        // transport (object-missing).
        assert.ok(
          ["invalid-input/git-failed", "invalid-artifact/object-missing"].includes(
            `${error.code}/${String(error.details?.["reason"])}`,
          ),
          JSON.stringify(error),
        );
        return true;
      },
    );
    assert.deepEqual(evil.ran(), [], "the promisor remote's upload-pack never ran");
    assert.deepEqual(snapshotTree(scope), before);
  });
});

describe("retainSource of a commit: what the object database hands over is checked", () => {
  test(
    "Given a loose blob whose bytes were swapped under its id, When the " +
      "commit is retained, Then integrity-mismatch object-differs-from-id and " +
      "the store is unchanged",
    async () => {
      const dir = join(tempDir("oats-git-db-"), "repo");
      mkdirSync(dir);
      git(dir, "init", "-q", "-b", "main");
      git(dir, "config", "user.name", "Oats Test");
      git(dir, "config", "user.email", "oats@example.org");
      writeFileSync(join(dir, "payload.txt"), "the reviewed bytes\n");
      git(dir, "add", "-A");
      git(dir, "commit", "-q", "-m", "one");
      const commit = git(dir, "rev-parse", "HEAD");
      const oid = git(dir, "rev-parse", `${commit}:payload.txt`);
      const object = join(dir, ".git", "objects", oid.slice(0, 2), oid.slice(2));
      const swapped = "other bytes, same length\n";
      rmSync(object, { force: true });
      writeFileSync(object, deflateSync(Buffer.from(`blob ${Buffer.byteLength(swapped)}\0${swapped}`)));
      const scope = tempDir("oats-scope-");
      const before = snapshotTree(scope);
      await assert.rejects(
        retainSource(scope, { identity: IDENTITY, revision: commit, dir }),
        (error: { code?: string; details?: Record<string, unknown> }) => {
          assert.equal(error.code, "integrity-mismatch", JSON.stringify(error));
          assert.equal(error.details?.["reason"], "object-differs-from-id");
          assert.equal(error.details?.["entry"], "payload.txt");
          return true;
        },
      );
      assert.deepEqual(snapshotTree(scope), before);
    },
  );

  test(
    "Given a commit with README and readme, When it is retained, Then the " +
      "extractor's case-collision rule refuses it and the store is unchanged",
    async () => {
      const dir = join(tempDir("oats-git-db-"), "repo");
      mkdirSync(dir);
      git(dir, "init", "-q", "-b", "main");
      git(dir, "config", "user.name", "Oats Test");
      git(dir, "config", "user.email", "oats@example.org");
      git(dir, "config", "core.ignorecase", "false");
      writeFileSync(join(dir, "README"), "upper\n");
      writeFileSync(join(dir, "readme"), "lower\n");
      git(dir, "add", "-A");
      git(dir, "commit", "-q", "-m", "both");
      const commit = git(dir, "rev-parse", "HEAD");
      const scope = tempDir("oats-scope-");
      const before = snapshotTree(scope);
      await assert.rejects(
        retainSource(scope, { identity: IDENTITY, revision: commit, dir }),
        (error: { code?: string; details?: Record<string, unknown> }) => {
          assert.equal(error.code, "invalid-artifact", JSON.stringify(error));
          assert.equal(error.details?.["reason"], "case-collision");
          return true;
        },
      );
      assert.deepEqual(snapshotTree(scope), before);
    },
  );
});
