/**
 * What a non-root operator does to the store's read-only trees (a published
 * revision's directories are 0555, its files 0444), through the built CLI
 * (dist/; `npm run build` first) run as nobody on a scope nobody owns. As
 * root, which the other tests run as, the permission bits stop nothing, so
 * a step that needs write on a read-only directory (moving it to another
 * parent, which rewrites its `..`; removing what is in it) passes there
 * whether or not oats grants itself that write first.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { hostname } from "node:os";
import {
  chmodSync,
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD } from "./helpers.js";
import { NOBODY, asOperator, giveToNobody, operatorHome, operatorSkip } from "./support/operator.js";

const mode = (path: string) => lstatSync(path).mode & 0o7777;

/** A tree nobody owns under the operator's home: an executable and a data file. */
function operatorTree(home: string, label: string): string {
  const dir = join(home, "src", label);
  mkdirSync(join(dir, "bin"), { recursive: true });
  writeFileSync(join(dir, "bin/run"), "#!/bin/sh\necho run\n", { mode: 0o755 });
  writeFileSync(join(dir, "data.txt"), `${label}\n`);
  giveToNobody(join(home, "src"));
  return dir;
}

/** The operator retains `source` as capture `name`: its revision's directory and ref. */
function retained(
  home: string,
  source: string,
  name: string,
  ...flags: string[]
): { dir: string; ref: string; verify: string[] } {
  const run = asOperator(home, ["retain", source, "--kind", "capture", "--id", name, ...flags]);
  assert.equal(run.status, 0, run.stdout + run.stderr);
  const result = run.envelope.result;
  const integrity = `oats.tree-exec.v1:${result["execIntegrity"]["value"]}`;
  return {
    dir: result["dir"],
    ref: `capture:${name}@${integrity}`,
    verify: ["verify", "--kind", "capture", name, "--integrity", integrity],
  };
}

/**
 * Damage `file` of a revision as the store leaves it: a file of its own (a revision's files are links to the shared
 * layer's held files, which other revisions share) with other bytes, still nobody's, 0444 in its 0555 directory.
 */
function damage(file: string): void {
  const parent = dirname(file);
  const parentMode = mode(parent);
  chmodSync(parent, 0o755);
  unlinkSync(file);
  writeFileSync(file, "tampered\n", { mode: 0o444 });
  chownSync(file, NOBODY, NOBODY);
  chmodSync(parent, parentMode);
}

describe("a non-root operator", () => {
  test(
    "Given a damaged read-only revision in a scope nobody owns, When nobody repairs it, Then the damaged tree " +
      "is moved into quarantine (read-only still) and a verified copy replaces it",
    (t) => {
      const skip = operatorSkip();
      if (skip !== null) return t.skip(skip);
      const { home } = operatorHome();
      const source = operatorTree(home, "nightly");
      const { dir, ref, verify } = retained(home, source, "nightly");
      assert.equal(mode(dir), 0o555, "a published revision is read-only");
      assert.equal(lstatSync(dir).uid, NOBODY);
      damage(join(dir, "data.txt"));
      assert.equal(asOperator(home, verify).status, 5, "the damage is seen");

      const run = asOperator(home, ["repair", ref, "--from", source]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.equal(run.envelope.result["status"], "repaired");
      const quarantine = run.envelope.result["quarantine"] as string;
      assert.equal(readFileSync(join(quarantine, "data.txt"), "utf8"), "tampered\n", "the damaged bytes are kept");
      assert.equal(mode(quarantine), 0o555, "the quarantined tree keeps its mode");
      assert.equal(readFileSync(join(dir, "data.txt"), "utf8"), "nightly\n");
      assert.equal(mode(dir), 0o555, "the replacement is read-only");
      const verified = asOperator(home, verify);
      assert.equal(verified.status, 0, verified.stdout + verified.stderr);
    },
  );

  test(
    "Given a damaged read-only legacy-named capability in a scope nobody owns, When nobody repairs it with its " +
      "lock, Then it is quarantined and replaced",
    (t) => {
      const skip = operatorSkip();
      if (skip !== null) return t.skip(skip);
      const { home } = operatorHome();
      const kept = asOperator(home, ["retain", FIXTURE_PAYLOAD, "--id", "demo.hello", "--lock", FIXTURE_LOCK]);
      assert.equal(kept.status, 0, kept.stdout + kept.stderr);
      const dir = kept.envelope.result["dir"] as string;
      const ref = `capability:demo.hello@${kept.envelope.result["integrity"]["value"]}`;
      assert.equal(mode(dir), 0o555);
      const intact = readFileSync(join(dir, "oats.json"));
      damage(join(dir, "oats.json"));

      const run = asOperator(home, ["repair", ref, "--from", FIXTURE_PAYLOAD, "--lock", FIXTURE_LOCK]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      const quarantine = run.envelope.result["quarantine"] as string;
      assert.equal(readFileSync(join(quarantine, "oats.json"), "utf8"), "tampered\n");
      assert.equal(mode(quarantine), 0o555);
      assert.deepEqual(readFileSync(join(dir, "oats.json")), intact);
      assert.equal(mode(dir), 0o555);
      const verified = asOperator(home, ["verify", "demo.hello", "--lock", FIXTURE_LOCK]);
      assert.equal(verified.status, 0, verified.stdout + verified.stderr);
    },
  );

  test(
    "Given a revision nothing keeps in a scope nobody owns, When nobody runs gc --delete, Then its read-only tree " +
      "is gone",
    (t) => {
      const skip = operatorSkip();
      if (skip !== null) return t.skip(skip);
      const { home } = operatorHome();
      const { dir } = retained(home, operatorTree(home, "stale"), "stale", "--no-pin");
      assert.equal(mode(dir), 0o555);
      assert.equal(mode(join(dir, "bin")), 0o555);
      const run = asOperator(home, ["gc", "--delete", "--grace", "0"]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.equal(run.envelope.result["deleted"], true, run.stdout);
      assert.ok(
        (run.envelope.result["collect"] as { path: string }[]).some((item) => item.path === dir),
        run.stdout,
      );
      assert.equal(existsSync(dir), false, "the revision is removed");
      // Nothing is left staged beside it (gc removes the revision's parents once they are empty).
      const left = existsSync(dirname(dir)) ? readdirSync(dirname(dir)) : [];
      assert.deepEqual(
        left.filter((name) => name.startsWith(".staging-")),
        [],
      );
    },
  );

  test(
    "Given a crashed retain's read-only staging in a scope nobody owns, When nobody runs cleanup, " +
      "Then the staging is removed",
    (t) => {
      const skip = operatorSkip();
      if (skip !== null) return t.skip(skip);
      const { home } = operatorHome();
      const { dir } = retained(home, operatorTree(home, "crashed"), "crashed");
      // The staging a publisher of this host left when it died: its pid is no process's (past any pid_max).
      const host = createHash("sha256").update(hostname()).digest("hex").slice(0, 8);
      const staging = join(dirname(dir), `.staging-${host}-2147483646-${"0a".repeat(6)}`);
      const copied = spawnSync("cp", ["-a", dir, staging], { uid: NOBODY, gid: NOBODY, encoding: "utf8" });
      assert.equal(copied.status, 0, copied.stderr);
      assert.equal(mode(staging), 0o555);
      assert.equal(mode(join(staging, "bin")), 0o555);
      const run = asOperator(home, ["cleanup"]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.deepEqual(run.envelope.result["removed"], [staging]);
      assert.equal(existsSync(staging), false, "the staging is removed");
      assert.equal(mode(dir), 0o555, "the revision beside it is untouched");
    },
  );
});
