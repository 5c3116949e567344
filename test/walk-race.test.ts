/**
 * A walk that cannot be redirected. While `retainTree`
 * runs round after round, another process keeps swapping a directory inside
 * the source for a symlink to a directory outside it: a 0700 directory the
 * retaining user (root) can read and the swapper cannot, holding a file of
 * the same name as the one inside (so a path-based reader would take its
 * bytes in place of the real one) and a secret of its own. No retained
 * revision may ever hold the outside bytes or names, and every round that
 * fails must be a typed refusal of a changed tree.
 *
 * The swapper runs as root, and again as `nobody` owning the source tree
 * (the real attacker: another local user whose tree root retains). The
 * source has a few thousand files around the swapped directory so that the
 * time between the walk and the reads spans many swaps; rounds are bounded.
 * On the path-based walk this test fails within a few rounds. Every test
 * runs both ways: with the addon's directory calls and without.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  renameSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { setNativeReads } from "../src/engine/native-reads.js";
import { setReadHook } from "../src/engine/read-hook.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { digestTree, retainTree } from "../src/retention/index.js";
import { addonSkip, tempDir } from "./helpers.js";

const NOBODY = 65534;
const ROUNDS = 40;
const SECRET = "outside-secret-bytes\n";
const INNER = "the real inner file\n";

/** Typed refusals a swap may cause: the walk or a read saw the tree change, or the walk saw the symlink itself. */
const ALLOWED_REFUSALS = new Set(["changed-while-reading", "escaping-symlink", "absolute-symlink", "broken-symlink"]);

interface Layout {
  readonly source: string;
  readonly outside: string;
}

function layout(owner: number | null): Layout {
  const base = tempDir("oats-race-");
  chmodSync(base, 0o755);
  const source = join(base, "src");
  // Many files before and after the swapped directory (names sort around "m-victim"), so the reads span many swaps.
  for (const group of ["a", "z"]) {
    for (let d = 0; d < 20; d++) {
      const dir = join(source, `${group}-${d}`);
      mkdirSync(dir, { recursive: true });
      for (let f = 0; f < 100; f++) writeFileSync(join(dir, `f${f}`), `${group}${d}/${f}\n`.repeat(20));
    }
  }
  mkdirSync(join(source, "m-victim"));
  writeFileSync(join(source, "m-victim/inner.txt"), INNER);
  // The outside: a 0700 directory only root can enter, with the same name inside and a secret.
  const vault = join(base, "vault");
  mkdirSync(vault, { mode: 0o700 });
  chmodSync(vault, 0o700);
  const outside = join(vault, "dir");
  mkdirSync(outside);
  writeFileSync(join(outside, "inner.txt"), SECRET);
  writeFileSync(join(outside, "SECRET"), SECRET);
  if (owner !== null) chownTree(source, owner);
  return { source, outside };
}

function chownTree(path: string, uid: number): void {
  chownSync(path, uid, uid);
  if (lstatSync(path).isDirectory()) for (const name of readdirSync(path)) chownTree(join(path, name), uid);
}

/**
 * Swap m-victim for a symlink to the outside and back, as fast as it can,
 * until killed (or after 120 s at most). Not atomic: in between the name is
 * briefly missing, which the walk may also see.
 */
function startSwapper(source: string, outside: string, uid: number | null): ChildProcess {
  const script = `
    const fs = require("fs");
    const [victim, outside] = [process.argv[1], process.argv[2]];
    const hidden = victim + ".real";
    const until = Date.now() + 120000;
    const pause = new Int32Array(new SharedArrayBuffer(4));
    process.stdout.write("ready\\n");
    while (Date.now() < until) {
      try {
        fs.renameSync(victim, hidden);
        fs.symlinkSync(outside, victim);
        Atomics.wait(pause, 0, 0, 1);
        fs.unlinkSync(victim);
        fs.renameSync(hidden, victim);
        Atomics.wait(pause, 0, 0, 1);
      } catch {}
    }
  `;
  return spawn(process.execPath, ["-e", script, join(source, "m-victim"), outside], {
    stdio: ["ignore", "pipe", "inherit"],
    ...(uid === null ? {} : { uid, gid: uid }),
  });
}

/** Every file under a retained revision: its path and bytes. */
function retainedFiles(dir: string, prefix = ""): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const rel = prefix ? `${prefix}/${name}` : name;
    const stats = lstatSync(path);
    if (stats.isDirectory()) for (const [p, b] of retainedFiles(path, rel)) out.set(p, b);
    else if (stats.isFile()) out.set(rel, readFileSync(path, "utf8"));
  }
  return out;
}

async function raceRounds(owner: number | null): Promise<{ retained: number; refused: Record<string, number> }> {
  const { source, outside } = layout(owner);
  const scope = tempDir("oats-race-scope-");
  const swapper = startSwapper(source, outside, owner);
  const refused: Record<string, number> = {};
  let retained = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      swapper.stdout!.once("data", () => resolve());
      swapper.once("exit", (code) => reject(new Error(`the swapper exited early (${code})`)));
    });
    for (let round = 0; round < ROUNDS; round++) {
      try {
        const receipt = await retainTree(scope, { kind: "capability", key: "demo.race", source });
        retained += 1;
        const files = retainedFiles(receipt.dir);
        assert.equal(
          files.has("m-victim/SECRET"),
          false,
          `round ${round}: a file from outside the source was retained`,
        );
        for (const [path, bytes] of files)
          assert.notEqual(bytes, SECRET, `round ${round}: ${path} holds the outside file's bytes`);
      } catch (error) {
        if (error instanceof assert.AssertionError) throw error;
        assert.ok(
          error instanceof OatsError,
          `round ${round}: not a typed refusal: ${error instanceof Error ? error.stack : String(error)}`,
        );
        const reason = String(error.details.reason);
        assert.ok(
          (error.code === "invalid-artifact" || error.code === "artifact-not-contained") &&
            ALLOWED_REFUSALS.has(reason),
          `round ${round}: unexpected refusal ${error.code} (${reason}): ${error.message}`,
        );
        refused[reason] = (refused[reason] ?? 0) + 1;
      }
    }
  } finally {
    swapper.kill("SIGKILL");
  }
  return { retained, refused };
}

// Both ways: the walk's directory calls made by the addon (native/directories.c) and, as without it, through
// /proc paths.
for (const { way, native } of [
  { way: "native directory calls", native: true },
  { way: "directory calls from JavaScript", native: false },
] as const) {
  describe(`${way}: walk race: a directory swapped for a symlink to outside the source`, () => {
    beforeEach(() => setNativeReads(native));
    afterEach(() => setNativeReads(true));
    test(
      "Given a root swapper, When retain runs 40 rounds, Then nothing from " +
        "outside is ever retained and every failed round is a typed refusal",
      async (t) => {
        const outcome = await raceRounds(null);
        t.diagnostic(JSON.stringify(outcome));
        assert.ok(Object.keys(outcome.refused).length > 0, "the swapper was seen at work (some round was refused)");
      },
    );

    test("Given nobody owning the source and swapping inside it, When root " +
      "retains it 40 rounds, Then nothing from the 0700 directory is ever " +
      "retained and every failed round is a typed refusal", {
      skip: process.getuid?.() === 0 ? false : "needs root to run the swapper as nobody (uid 65534)",
    }, async (t) => {
      const outcome = await raceRounds(NOBODY);
      t.diagnostic(JSON.stringify(outcome));
      assert.ok(Object.keys(outcome.refused).length > 0, "the swapper was seen at work (some round was refused)");
    });
  });

  describe(`${way}: walk race: a directory replaced by another real directory between the walk and its reads`, () => {
    beforeEach(() => setNativeReads(native));
    afterEach(() => setNativeReads(true));
    /** src/a/ with `files` files, src/b/x, and `arm`: a read hook that replaces b/ with another directory (and does
     * `also`) once a/`trigger` has been read. */
    function treeWithReplacement(
      files: readonly string[],
      trigger: string,
    ): { root: string; arm: (also?: () => void) => void } {
      const root = join(tempDir("oats-replace-"), "src");
      mkdirSync(join(root, "a"), { recursive: true });
      mkdirSync(join(root, "b"));
      for (const name of files) writeFileSync(join(root, "a", name), "a\n");
      writeFileSync(join(root, "b/x"), "b\n");
      const other = join(root, "..", "other");
      mkdirSync(other);
      writeFileSync(join(other, "x"), "not what was listed\n");
      const arm = (also?: () => void) =>
        setReadHook((path) => {
          if (path !== `a/${trigger}`) return;
          setReadHook(null);
          renameSync(join(root, "b"), join(root, "..", "b-old"));
          renameSync(other, join(root, "b"));
          also?.();
        });
      return { root, arm };
    }

    // a/ holds more files than one native call takes (128), so b/ is opened by a later call than a/x000's read.
    test(
      "Given b/ replaced (same names, other bytes) after a/'s first file is " +
        "read and before b/ is opened, When the tree is digested, Then " +
        "invalid-artifact changed-while-reading: reads never mix a listing with " +
        "another directory's files",
      async () => {
        const { root, arm } = treeWithReplacement(
          Array.from({ length: 130 }, (_, at) => `x${String(at).padStart(3, "0")}`),
          "x000",
        );
        arm();
        try {
          await assert.rejects(digestTree(root), (error) => {
            assert.ok(error instanceof OatsError, String(error));
            assert.equal(error.code, "invalid-artifact");
            assert.deepEqual(
              [error.details.reason, error.details.path, error.details.changed],
              ["changed-while-reading", "b", "directory"],
            );
            return true;
          });
        } finally {
          setReadHook(null);
        }
      },
    );

    // The native run that holds a/x128 and a/x129 stops before b/; the refusal is the one a file-by-file read
    // meets first.
    test(
      "Given a/x129 replaced by a FIFO and b/ replaced, both before either is " +
        "opened, When the tree is digested, Then the refusal names a/x129, the " +
        "earlier in order",
      async () => {
        const { root, arm } = treeWithReplacement(
          Array.from({ length: 130 }, (_, at) => `x${String(at).padStart(3, "0")}`),
          "x000",
        );
        arm(() => {
          unlinkSync(join(root, "a/x129"));
          execFileSync("mkfifo", [join(root, "a/x129")]);
        });
        try {
          await assert.rejects(digestTree(root), (error) => {
            assert.ok(error instanceof OatsError, String(error));
            assert.deepEqual(
              [error.code, error.details.reason, error.details.path, error.details.changed],
              ["invalid-artifact", "changed-while-reading", "a/x129", "no longer a regular file"],
            );
            return true;
          });
        } finally {
          setReadHook(null);
        }
      },
    );

    // Only the native reads take a run of files across directories; from JavaScript each file is opened on its own.
    if (native)
      test("Given b/ replaced after its descriptor is held for a run of files that " +
        "spans a/ and b/, When the tree is digested, Then the digest is the " +
        "listed tree's: b/x is read inside the directory that was listed", { skip: addonSkip() }, async () => {
        const { root, arm } = treeWithReplacement(["x"], "x");
        const listed = await digestTree(root);
        arm();
        try {
          assert.deepEqual(await digestTree(root), listed);
          assert.equal(readFileSync(join(root, "b/x"), "utf8"), "not what was listed\n", "the replacement happened");
        } finally {
          setReadHook(null);
        }
      });
  });

  describe(`${way}: walk race: a directory above the root swapped for a symlink`, () => {
    beforeEach(() => setNativeReads(native));
    afterEach(() => setNativeReads(true));
    test(
      "Given a resolved root whose parent is then swapped for a symlink to " +
        "another directory, When it is walked, Then invalid-artifact " +
        "changed-while-reading (root): the kernel's name for what was opened " +
        "must be the root asked for",
      async () => {
        const base = tempDir("oats-root-swap-");
        mkdirSync(join(base, "parent/pkg"), { recursive: true });
        writeFileSync(join(base, "parent/pkg/f"), "real\n");
        mkdirSync(join(base, "elsewhere/pkg"), { recursive: true });
        writeFileSync(join(base, "elsewhere/pkg/f"), "elsewhere\n");
        const root = join(base, "parent/pkg");
        // As if the swap happened between the caller's realpath and the walk's open.
        renameSync(join(base, "parent"), join(base, "parent-real"));
        symlinkSync(join(base, "elsewhere"), join(base, "parent"));
        await assert.rejects(walkTree(root), (error) => {
          assert.ok(error instanceof OatsError, String(error));
          assert.equal(error.code, "invalid-artifact");
          assert.deepEqual(
            [error.details.reason, error.details.changed, error.details.opened],
            ["changed-while-reading", "root", join(base, "elsewhere/pkg")],
          );
          return true;
        });
      },
    );
  });
}
