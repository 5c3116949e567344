/**
 * Retained trees are read-only to everyone but their owner (contract
 * section 3). A source with 0666/0777 modes is retained by a
 * child running with umask 000 (copied, adopted from a tarball, and imported
 * from a bundle); then a real other local user, `nobody` (uid/gid 65534),
 * tries to rewrite a retained file, create a file in a revision directory,
 * and rename or fill the revision directory and each of its parent
 * components. Every attempt must fail with EACCES or EPERM, and verify must
 * still pass.
 *
 * The scope is a mkdtemp directory (0700) made 0755, so that nobody can
 * reach the store at all: otherwise every attempt would fail at the scope's
 * own mode and the test would prove nothing about the store's.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, lstatSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { describe, test } from "node:test";
import { REPO, tempDir } from "./helpers.js";

const NOBODY = 65534;
const canRunAsNobody = process.getuid?.() === 0;

/** The built CLI in a child whose umask is 000 (set by sh; the operands reach node as arguments, never as shell
 * text). */
function oatsUmask0(scope: string, args: string[]) {
  const run = spawnSync(
    "sh",
    [
      "-c",
      'umask 000 && exec "$0" "$@"',
      process.execPath,
      join(REPO, "dist/cli/bin.js"),
      "--json",
      "--scope",
      scope,
      ...args,
    ],
    { encoding: "utf8" },
  );
  assert.equal(run.status, 0, run.stdout + run.stderr);
  return JSON.parse(run.stdout) as { result: Record<string, any> };
}

/** A source whose modes are as loose as a umask of 000 or a vfat mount makes them, plus a setuid file. */
function looseSource(): string {
  const parent = tempDir("oats-loose-");
  const source = join(parent, "src");
  mkdirSync(join(source, "sub/deeper"), { recursive: true });
  writeFileSync(join(source, "plain.txt"), "plain\n");
  writeFileSync(join(source, "sub/run.sh"), "#!/bin/sh\necho run\n");
  writeFileSync(join(source, "sub/deeper/setuid"), "x\n");
  chmodSync(join(source, "plain.txt"), 0o666);
  chmodSync(join(source, "sub/run.sh"), 0o777);
  chmodSync(join(source, "sub/deeper/setuid"), 0o4777);
  chmodSync(join(source, "sub/deeper"), 0o777);
  chmodSync(join(source, "sub"), 0o3777);
  chmodSync(source, 0o777);
  return source;
}

/** A scope nobody can reach (see the header). */
function reachableScope(): string {
  const scope = tempDir("oats-modes-");
  chmodSync(scope, 0o755);
  return scope;
}

/** Every directory and file under the scope, with its mode, for those group or other may write or that keep special
 * bits. */
function looseModes(scope: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      const stats = lstatSync(path);
      if (stats.isSymbolicLink()) continue;
      if ((stats.mode & 0o7022) !== 0) out.push(`${relative(scope, path)} ${(stats.mode & 0o7777).toString(8)}`);
      if (stats.isDirectory()) walk(path);
    }
  };
  walk(scope);
  return out;
}

/**
 * As nobody: try to write `file`, create a file in `revision`, rename it,
 * and rename or create inside each of `components`. Returns what each try
 * got: an errno code, or "ok" when it succeeded.
 */
/** The layer's held file that a revision's file links (same inode), found by its content's SHA-256. */
function heldFileOf(scope: string, file: string): string {
  const hex = createHash("sha256").update(readFileSync(file)).digest("hex");
  const exec = (lstatSync(file).mode & 0o100) !== 0;
  return join(scope, ".agents/files/sha256", hex.slice(0, 2), `${hex.slice(2)}${exec ? ".x" : ""}`);
}

function attackAsNobody(file: string, revision: string, components: string[]): Record<string, string> {
  const script = `
    const fs = require("fs");
    const [file, revision, components] = [process.argv[1], process.argv[2], JSON.parse(process.argv[3])];
    const out = {};
    const attempt = (what, action) => {
      try { action(); out[what] = "ok"; } catch (error) { out[what] = error.code; }
    };
    attempt("write retained file", () => fs.closeSync(fs.openSync(file, "r+")));
    attempt("truncate retained file", () => fs.truncateSync(file, 0));
    attempt("chmod retained file", () => fs.chmodSync(file, 0o666));
    attempt("unlink retained file", () => fs.unlinkSync(file));
    attempt("create in revision", () => fs.writeFileSync(revision + "/planted", "x"));
    attempt("rename revision", () => fs.renameSync(revision, revision + ".moved"));
    attempt("replace revision", () => {
      fs.mkdirSync("/tmp/oats-nobody-" + process.pid);
      fs.renameSync("/tmp/oats-nobody-" + process.pid, revision);
    });
    for (const component of components) {
      attempt("rename " + component, () => fs.renameSync(component, component + ".moved"));
      attempt("create in " + component, () => fs.mkdirSync(component + "/planted"));
    }
    try { fs.rmdirSync("/tmp/oats-nobody-" + process.pid); } catch {}
    process.stdout.write(JSON.stringify(out));
  `;
  const run = spawnSync(process.execPath, ["-e", script, file, revision, JSON.stringify(components)], {
    uid: NOBODY,
    gid: NOBODY,
    encoding: "utf8",
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout) as Record<string, string>;
}

/** The revision directory and every store component from it up to the scope. */
function componentsUpTo(scope: string, revision: string): string[] {
  const out: string[] = [];
  for (let dir = join(revision, ".."); dir !== scope && dir.startsWith(scope); dir = join(dir, "..")) out.push(dir);
  return out;
}

function assertRefused(results: Record<string, string>): void {
  const allowed = results;
  assert.ok(Object.keys(allowed).length >= 9, "every attempt was made");
  for (const [what, outcome] of Object.entries(allowed))
    assert.ok(outcome === "EACCES" || outcome === "EPERM", `nobody could ${what}: ${outcome}`);
}

describe("retained modes: group and other never write, whatever the source's modes or the umask", () => {
  test("Given a 0666/0777 source retained by a process with umask 000, When " +
    "nobody attacks the copy, the tarball adoption and the import, Then " +
    "every attempt is refused and verify passes", {
    skip: canRunAsNobody ? false : "needs root to spawn the attacker as nobody (uid 65534)",
  }, () => {
    const source = looseSource();
    const scope = reachableScope();

    const copied = oatsUmask0(scope, ["retain", source, "--id", "demo.loose"]).result;
    const tarball = join(tempDir("oats-tgz-"), "loose.tgz");
    execFileSync("tar", ["-czf", tarball, "-C", join(source, ".."), "--transform", "s,^src,package,", "src"]);
    const adopted = oatsUmask0(scope, ["retain", tarball, "--id", "demo.loose-tgz"]).result;
    assert.equal(adopted.integrity.value, copied.integrity.value, "masking changed no digest");

    const bundle = join(tempDir("oats-bundle-"), "loose.tar");
    const ref = `capability:demo.loose@${copied.integrity.format}:${copied.integrity.value}`;
    oatsUmask0(scope, ["export", ref, "--output", bundle]);
    const target = reachableScope();
    oatsUmask0(target, ["import", bundle]);
    const imported = join(target, relative(scope, copied.dir));

    assert.deepEqual(looseModes(scope), [], "group/other-writable or special modes in the store");
    assert.deepEqual(looseModes(target), [], "group/other-writable or special modes in the imported store");
    // The shared file layer's modes: nobody writes, the owner included; the owner-exec bit is kept as r-x for all.
    assert.equal(lstatSync(join(copied.dir, "plain.txt")).mode & 0o7777, 0o444);
    assert.equal(lstatSync(join(copied.dir, "sub/run.sh")).mode & 0o7777, 0o555);
    assert.equal(lstatSync(join(copied.dir, "sub/deeper/setuid")).mode & 0o7777, 0o555);
    assert.equal(lstatSync(join(copied.dir, "sub")).mode & 0o7777, 0o555);
    assert.equal(lstatSync(copied.dir).mode & 0o7777, 0o555);

    for (const [root, dir] of [
      [scope, copied.dir as string],
      [scope, adopted.dir as string],
      [target, imported],
    ] as const) {
      assertRefused(attackAsNobody(join(dir, "sub/run.sh"), dir, componentsUpTo(root, dir)));
    }
    // The held file every revision links, and the layer above it.
    const run = lstatSync(join(copied.dir, "sub/run.sh"));
    const held = heldFileOf(scope, join(copied.dir, "sub/run.sh"));
    assert.equal(lstatSync(held).ino, run.ino);
    assertRefused(attackAsNobody(held, dirname(held), componentsUpTo(scope, dirname(held))));
    oatsUmask0(scope, ["verify", "demo.loose", "--integrity", `${copied.integrity.format}:${copied.integrity.value}`]);
    oatsUmask0(scope, [
      "verify",
      "demo.loose-tgz",
      "--integrity",
      `${adopted.integrity.format}:${adopted.integrity.value}`,
    ]);
    oatsUmask0(target, ["verify", "demo.loose", "--integrity", `${copied.integrity.format}:${copied.integrity.value}`]);
    oatsUmask0(scope, ["fsck"]);
  });
});
