/**
 * fsck's fast path (docs/design/fsck.md, "Anchored manifests"): a revision
 * whose manifest is anchored in the operator's private state (the SHA-256 of
 * its manifest bytes, recorded when this account verified the revision at
 * publication) is verified by its structure and the held files it links,
 * without reading its bytes; anything that does not match, or no record, or
 * private state that cannot be trusted, re-hashes it as before.
 *
 * The attacker is a writer of the scope (`nobody`, owning `.agents/`): it
 * swaps a revision's file for a link to another valid held file and
 * rewrites the revision's manifest to match.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  realpathSync,
  rmSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import { afterEach, describe, test } from "node:test";
import { fsckScope, retainTree, type ScopeFsckReport } from "../src/index.js";
import { setNativeReads } from "../src/engine/native-reads.js";
import { setFaultHook } from "../src/retention/store/faults.js";
import { tempDir } from "./helpers.js";

const NOBODY = { uid: 65534, gid: 65534 };
const asRoot = process.getuid?.() === 0;
const KEY = "b".repeat(64);

afterEach(() => {
  setFaultHook(null);
  setNativeReads(true);
});

const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

function heldPath(scope: string, content: string, exec = false): string {
  const hex = sha256(content);
  return join(scope, ".agents/files/sha256", hex.slice(0, 2), `${hex.slice(2)}${exec ? ".x" : ""}`);
}

function manifestOf(dir: string): string {
  return join(dirname(dir), `.manifest-${basename(dir)}.json`);
}

/** The record of a revision's anchored manifest in the operator's private state (retention's manifest-anchor.ts). */
function recordOf(scope: string, dir: string): string {
  const state = process.env["OATS_STATE_DIR"]!;
  const hex = basename(dir).replace(/^sha256-/, "");
  return join(state, "scopes", sha256(realpathSync(scope)), "manifests", hex);
}

const FILES: Record<string, string> = {
  "lib/a.js": "module a\n".repeat(30),
  "lib/b.js": "module b\n".repeat(30),
  "lib/deep/c.js": "module c\n".repeat(30),
  "bin/run": "#!/bin/sh\necho run\n",
};

/** A scope readable by others, with `count` revisions of one tree, each with its own version.txt. */
async function revisions(count: number): Promise<{ scope: string; dirs: string[] }> {
  const base = tempDir("oats-anchored-");
  chmodSync(base, 0o755);
  const scope = join(base, "scope");
  mkdirSync(scope);
  const source = join(base, "source");
  for (const [path, text] of Object.entries(FILES)) {
    mkdirSync(dirname(join(source, path)), { recursive: true });
    writeFileSync(join(source, path), text, { mode: path === "bin/run" ? 0o755 : 0o644 });
  }
  const dirs: string[] = [];
  for (let n = 0; n < count; n++) {
    writeFileSync(join(source, "version.txt"), `version ${n}\n`);
    const receipt = await retainTree(scope, { kind: "source", key: KEY, source });
    assert.equal(receipt.status, "retained");
    dirs.push(receipt.dir);
  }
  return { scope, dirs };
}

function revisionFindings(report: ScopeFsckReport) {
  return report.classes.revisions.filter((finding) => finding.kind !== "notice");
}

/** Whether each of `dirs` (in that order) was verified by its anchored manifest. */
function anchored(report: ScopeFsckReport, dirs: readonly string[]): boolean[] {
  assert.equal(report.outcomes.length, dirs.length);
  return dirs.map((dir) => report.outcomes.find((outcome) => outcome.dir === dir)?.anchored === true);
}

/** Replace `rel` of the revision with a link to `held` and (unless `manifest` is false) rewrite the manifest row. */
function swapScript(): string {
  return `
    const fs = require("node:fs");
    const path = require("node:path");
    const { createHash } = require("node:crypto");
    const [dir, rel, held, rewrite] = process.argv.slice(1);
    const file = path.join(dir, rel);
    const parent = path.dirname(file);
    fs.chmodSync(parent, 0o755);
    fs.unlinkSync(file);
    fs.linkSync(held, file);
    fs.chmodSync(parent, 0o555);
    if (rewrite === "rewrite") {
      const manifest = path.join(path.dirname(dir), ".manifest-" + path.basename(dir) + ".json");
      const bytes = fs.readFileSync(held);
      const doc = JSON.parse(fs.readFileSync(manifest, "utf8"));
      const row = doc.rows.find((r) => r.path === rel);
      row.sha256 = createHash("sha256").update(bytes).digest("hex");
      row.size = bytes.length;
      fs.rmSync(manifest, { force: true });
      fs.writeFileSync(manifest, JSON.stringify(doc) + "\\n", { mode: 0o444 });
    }
  `;
}

/** As nobody (the scope writer, owning `.agents/`) when the tests run as root; else as this user. */
function swap(scope: string, dir: string, rel: string, held: string, rewrite: boolean): void {
  const args = ["-e", swapScript(), dir, rel, held, rewrite ? "rewrite" : "keep"];
  if (asRoot) {
    const chowned = spawnSync("chown", ["-R", `${NOBODY.uid}:${NOBODY.gid}`, join(scope, ".agents")], {
      encoding: "utf8",
    });
    assert.equal(chowned.status, 0, chowned.stderr);
  }
  const run = spawnSync(process.execPath, args, { ...(asRoot ? NOBODY : {}), encoding: "utf8" });
  assert.equal(run.status, 0, `the scope writer's step failed: ${run.stderr}`);
}

describe("fsck of revisions with anchored manifests", () => {
  test("Given revisions retained by this account, Then fsck verifies them without re-hashing them", async () => {
    const { scope, dirs } = await revisions(3);
    for (const dir of dirs) {
      const record = readFileSync(recordOf(scope, dir), "utf8");
      assert.equal(record, `${sha256(readFileSync(manifestOf(dir)))}\n`, "the record is the manifest's SHA-256");
    }
    const report = await fsckScope(scope);
    assert.equal(report.ok, true, JSON.stringify(report.worst));
    assert.deepEqual(anchored(report, dirs), [true, true, true], "every revision verified by its anchored manifest");
    assert.equal(report.counts.revisions, 3);
  });

  test(
    "Given a revision whose file a scope writer swapped for a link to another valid held file, the manifest " +
      "rewritten to match, Then fsck re-hashes it and reports integrity-mismatch",
    async () => {
      const { scope, dirs } = await revisions(2);
      swap(scope, dirs[1]!, "lib/a.js", heldPath(scope, FILES["lib/b.js"]!), true);
      const report = await fsckScope(scope);
      assert.equal(report.ok, false);
      const findings = revisionFindings(report);
      assert.equal(findings.length, 1, JSON.stringify(findings));
      assert.equal(findings[0]!.code, "integrity-mismatch");
      assert.equal(findings[0]!.path, dirs[1]);
      assert.deepEqual(anchored(report, dirs), [true, false], "the other revision still takes the fast path");
      assert.equal(report.classes.files.filter((finding) => finding.kind !== "notice").length, 0);
    },
  );

  test("Given no native addon (every entry lstat'd), Then the fast path and its refusal are the same", async () => {
    const { scope, dirs } = await revisions(2);
    setNativeReads(false);
    const clean = await fsckScope(scope);
    assert.equal(clean.ok, true, JSON.stringify(clean.worst));
    assert.deepEqual(anchored(clean, dirs), [true, true]);
    swap(scope, dirs[1]!, "lib/a.js", heldPath(scope, FILES["lib/b.js"]!), true);
    const report = await fsckScope(scope);
    assert.deepEqual(
      revisionFindings(report).map((finding) => [finding.code, finding.path]),
      [["integrity-mismatch", dirs[1]]],
    );
    assert.deepEqual(anchored(report, dirs), [true, false]);
  });

  test("Given a swapped file, the manifest left alone, Then fsck reports the revision and the link", async () => {
    const { scope, dirs } = await revisions(1);
    swap(scope, dirs[0]!, "lib/a.js", heldPath(scope, FILES["lib/b.js"]!), false);
    const report = await fsckScope(scope);
    assert.deepEqual(
      revisionFindings(report).map((finding) => finding.code),
      ["integrity-mismatch"],
    );
    assert.ok(report.classes.files.some((finding) => finding.details["reason"] === "broken-link"));
    assert.deepEqual(anchored(report, dirs), [false]);
  });

  test(
    "Given a revision's file replaced by a private copy of other bytes of the same size, Then the copy is hashed " +
      "against its row and fsck reports the revision",
    async () => {
      const { scope, dirs } = await revisions(1);
      const file = join(dirs[0]!, "lib/deep/c.js");
      const parent = dirname(file);
      chmodSync(parent, 0o755);
      unlinkSync(file);
      writeFileSync(file, "module C\n".repeat(30), { mode: 0o444 });
      chmodSync(parent, 0o555);
      const report = await fsckScope(scope);
      assert.deepEqual(
        revisionFindings(report).map((finding) => finding.code),
        ["integrity-mismatch"],
      );
      assert.deepEqual(anchored(report, dirs), [false]);
    },
  );

  test("Given a private copy of the same bytes, Then the revision still takes the fast path", async () => {
    const { scope, dirs } = await revisions(1);
    const file = join(dirs[0]!, "lib/deep/c.js");
    const parent = dirname(file);
    chmodSync(parent, 0o755);
    unlinkSync(file);
    writeFileSync(file, FILES["lib/deep/c.js"]!, { mode: 0o444 });
    chmodSync(parent, 0o555);
    const report = await fsckScope(scope);
    assert.equal(revisionFindings(report).length, 0, JSON.stringify(report.worst));
    assert.deepEqual(anchored(report, dirs), [true]);
  });

  test("Given an entry the manifest does not list (an empty directory), Then the revision is re-hashed", async () => {
    const { scope, dirs } = await revisions(1);
    chmodSync(dirs[0]!, 0o755);
    mkdirSync(join(dirs[0]!, "extra"), { mode: 0o555 });
    chmodSync(dirs[0]!, 0o555);
    const report = await fsckScope(scope);
    assert.deepEqual(anchored(report, dirs), [false]);
    assert.equal(revisionFindings(report).length, 0, "identity does not cover an empty directory: it verifies");
  });

  test("Given no record, Then fsck re-hashes the revision and still finds the swap", async () => {
    const { scope, dirs } = await revisions(2);
    for (const dir of dirs) rmSync(recordOf(scope, dir));
    const clean = await fsckScope(scope);
    assert.equal(clean.ok, true, JSON.stringify(clean.worst));
    assert.deepEqual(anchored(clean, dirs), [false, false], "no record: the full path");
    swap(scope, dirs[0]!, "lib/a.js", heldPath(scope, FILES["lib/b.js"]!), true);
    const report = await fsckScope(scope);
    assert.deepEqual(
      revisionFindings(report).map((finding) => [finding.code, finding.path]),
      [["integrity-mismatch", dirs[0]]],
    );
  });

  test(
    "Given private state that cannot be trusted (a state root others can write), Then retain records nothing and " +
      "fsck re-hashes every revision",
    async () => {
      const saved = process.env["OATS_STATE_DIR"];
      const open = tempDir("oats-open-state-");
      chmodSync(open, 0o777);
      process.env["OATS_STATE_DIR"] = open;
      try {
        const { scope, dirs } = await revisions(2);
        assert.equal(existsSync(join(open, "scopes")), false, "nothing written into the untrusted state");
        const clean = await fsckScope(scope);
        assert.equal(clean.ok, true, JSON.stringify(clean.worst));
        assert.deepEqual(anchored(clean, dirs), [false, false]);
        swap(scope, dirs[1]!, "lib/a.js", heldPath(scope, FILES["lib/b.js"]!), true);
        const report = await fsckScope(scope);
        assert.deepEqual(
          revisionFindings(report).map((finding) => finding.code),
          ["integrity-mismatch"],
        );
      } finally {
        process.env["OATS_STATE_DIR"] = saved;
      }
    },
  );

  test("Given a record that is not the manifest's (another revision's), Then the revision is re-hashed", async () => {
    const { scope, dirs } = await revisions(2);
    writeFileSync(recordOf(scope, dirs[1]!), readFileSync(recordOf(scope, dirs[0]!)));
    const report = await fsckScope(scope);
    assert.equal(report.ok, true, JSON.stringify(report.worst));
    assert.deepEqual(anchored(report, dirs), [true, false]);
  });

  test("Given a publication whose staged copy fails its verifying read, Then no record is written", async () => {
    const base = tempDir("oats-anchored-");
    const scope = join(base, "scope");
    mkdirSync(scope);
    const source = join(base, "source");
    mkdirSync(source);
    writeFileSync(join(source, "a.txt"), "a\n");
    setFaultHook((step, detail) => {
      // The staged copy changes before its read-back: the publication is refused.
      if (step === "verify-staged") {
        const file = join(detail, "a.txt");
        chmodSync(detail, 0o755);
        rmSync(file);
        writeFileSync(file, "not a\n");
      }
    });
    await assert.rejects(retainTree(scope, { kind: "source", key: KEY, source }));
    setFaultHook(null);
    const manifests = join(process.env["OATS_STATE_DIR"]!, "scopes", sha256(realpathSync(scope)), "manifests");
    assert.deepEqual(existsSync(manifests) ? readdirSync(manifests) : [], [], "no record of an unverified read");
    // The same tree published after a verified read is recorded.
    const receipt = await retainTree(scope, { kind: "source", key: KEY, source });
    assert.equal(existsSync(recordOf(scope, receipt.dir)), true);
  });

  test("Given a revision kept (already present), Then a publication that read nothing records nothing", async () => {
    const { scope, dirs } = await revisions(1);
    rmSync(recordOf(scope, dirs[0]!));
    const source = tempDir("oats-anchored-again-");
    for (const [path, text] of Object.entries(FILES)) {
      mkdirSync(dirname(join(source, path)), { recursive: true });
      writeFileSync(join(source, path), text, { mode: path === "bin/run" ? 0o755 : 0o644 });
    }
    writeFileSync(join(source, "version.txt"), "version 0\n");
    const receipt = await retainTree(scope, { kind: "source", key: KEY, source });
    assert.equal(receipt.status, "kept");
    assert.equal(existsSync(recordOf(scope, dirs[0]!)), false);
  });
});
