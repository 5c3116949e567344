/**
 * The operator's private checkpoint of the chain logs (chain-state.ts,
 * chain-sync.ts): where it lives, when it is trusted, and what a change to
 * already-verified bytes does. Real files, a real second state directory
 * standing in for "someone else appended", real concurrent processes.
 */
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, test } from "node:test";
import { appendEntry, readEntries, verifyChain, type ChainEntry, type ChainLog } from "../src/ledger/chain-log.js";
import { entryHash } from "../src/ledger/chain-line.js";
import { loadCheckpoint, scopeState, scopeStateDir, stateRoot } from "../src/ledger/chain-state.js";
import { syncLog } from "../src/ledger/chain-sync.js";
import { canonicalJson } from "../src/core/canonical-json.js";
import { REPO, tempDir } from "./helpers.js";
import { runTogether } from "./support/go.js";
import { realpathSync } from "node:fs";
import { refusal } from "./support/refusals.js";

const AUDIT: ChainLog = { dir: [".agents", "audit"], file: "audit.jsonl" };
const KEY = ".agents~audit~audit.jsonl";
const saved = process.env["OATS_STATE_DIR"];

function logPath(scope: string): string {
  return join(scope, ".agents", "audit", "audit.jsonl");
}

function lines(scope: string): string[] {
  return readFileSync(logPath(scope), "utf8").split("\n").slice(0, -1);
}

/** A fresh private state directory for this process (what a new operator account would have). */
function freshState(): string {
  const dir = join(tempDir("oats-state-test-"), "state");
  process.env["OATS_STATE_DIR"] = dir;
  return dir;
}

async function logWith(count: number): Promise<{ scope: string; entries: ChainEntry[] }> {
  const scope = tempDir("oats-anchor-");
  const entries: ChainEntry[] = [];
  for (let n = 0; n < count; n++) entries.push(await appendEntry(scope, AUDIT, { action: "dispatch", n }));
  return { scope, entries };
}

/** Rewrite line `index` with `change` and re-chain everything after it, as a scope writer with a hash function can. */
function rechain(scope: string, index: number, change: (entry: Record<string, unknown>) => void): void {
  const parsed = lines(scope).map((line) => JSON.parse(line) as Record<string, unknown>);
  change(parsed[index]!);
  for (let i = index; i < parsed.length; i++) {
    if (i > 0) parsed[i]!["prev"] = parsed[i - 1]!["hash"];
    parsed[i]!["hash"] = entryHash(parsed[i]!);
  }
  writeFileSync(logPath(scope), parsed.map((entry) => canonicalJson(entry)).join(""));
}

beforeEach(() => {
  freshState();
});
afterEach(() => {
  process.env["OATS_STATE_DIR"] = saved;
});

describe("chain checkpoint: where it lives", () => {
  test(
    "Given OATS_STATE_DIR, When a log is appended to, Then the checkpoint is " +
      "under <state>/scopes/<sha256 of the scope's realpath>, 0700, and " +
      "nothing is added to the scope",
    async () => {
      const state = process.env["OATS_STATE_DIR"]!;
      const { scope, entries } = await logWith(2);
      const dir = scopeStateDir(realpathSync(scope))!;
      assert.ok(dir.startsWith(join(state, "scopes")));
      const checkpoint = loadCheckpoint(dir, KEY)!;
      assert.equal(checkpoint.seq, 2);
      assert.equal(checkpoint.head, entries[1]!.hash);
      assert.equal(checkpoint.offset, readFileSync(logPath(scope)).length);
      for (const path of [state, join(state, "scopes"), dir])
        assert.equal((await import("node:fs")).statSync(path).mode & 0o777, 0o700, path);
      assert.deepEqual(readdirSync(join(scope, ".agents", "audit")).sort(), [".gitignore", "audit.jsonl"]);
    },
  );

  test("Given no OATS_STATE_DIR, Then XDG_STATE_HOME/oats, else ~/.local/state/oats is the state root", () => {
    assert.equal(stateRoot({ XDG_STATE_HOME: "/x/state" }), "/x/state/oats");
    assert.equal(stateRoot({ OATS_STATE_DIR: "/y", XDG_STATE_HOME: "/x/state" }), "/y");
    assert.match(stateRoot({}), /\/\.local\/state\/oats$/);
    assert.match(
      stateRoot({ XDG_STATE_HOME: "relative" }),
      /\/\.local\/state\/oats$/,
      "a relative XDG_STATE_HOME is ignored",
    );
  });

  for (const [name, unsafe] of [
    [
      "group-writable",
      (dir: string) => {
        mkdirSync(dir, { recursive: true });
        chmodSync(dir, 0o770);
      },
    ],
    [
      "world-writable",
      (dir: string) => {
        mkdirSync(dir, { recursive: true });
        chmodSync(dir, 0o707);
      },
    ],
    [
      "a symlink to a private directory",
      (dir: string) => {
        const real = tempDir("oats-state-real-");
        symlinkSync(real, dir);
      },
    ],
  ] as const) {
    test(
      `Given a state directory that is ${name}, When logs are appended and ` +
        `read, Then it is not used (nothing written into it) and every read is a ` +
        `full verification`,
      async () => {
        const state = process.env["OATS_STATE_DIR"]!;
        unsafe(state);
        const { scope } = await logWith(3);
        const sync = syncLog(scope, AUDIT);
        assert.equal(sync.persistent, false);
        assert.equal(sync.how, "full");
        assert.equal(sync.checkpointUse.anchored, false);
        assert.equal(sync.checkpointUse.reason, "state-unusable");
        assert.equal(syncLog(scope, AUDIT).how, "full");
        assert.equal(sync.seq, 3);
        assert.deepEqual(readdirSync(state), []);
      },
    );
  }

  test("Given a state directory owned by another user, Then it is not used", async (t) => {
    if (process.getuid?.() !== 0) return t.skip("needs root to give the directory to nobody");
    const state = process.env["OATS_STATE_DIR"]!;
    mkdirSync(state, { recursive: true, mode: 0o700 });
    (await import("node:fs")).chownSync(state, 65534, 65534);
    const { scope } = await logWith(1);
    assert.equal(syncLog(scope, AUDIT).persistent, false);
    assert.deepEqual(readdirSync(state), []);
  });
});

describe("chain checkpoint: every ancestor of the state (StrictModes)", () => {
  const NOBODY = 65534;
  const asRoot = process.getuid?.() === 0;
  /** A directory other users may enter, whose parent chain is root's and safe. */
  function open(): string {
    const dir = tempDir("oats-state-path-");
    chmodSync(dir, 0o755);
    return dir;
  }
  function refusedAt(path: string, reason: string) {
    const state = scopeState(realpathSync(tempDir("oats-anchor-")));
    assert.equal(state.usable, false, `expected ${path} to be refused`);
    if (state.usable) return;
    assert.equal(state.problem.path, path);
    assert.equal(state.problem.reason, reason);
    assert.ok(state.problem.fix.length > 0);
  }

  test("Given an ancestor writable by its group and not sticky, Then the state is refused there", () => {
    const base = open();
    mkdirSync(join(base, "shared"));
    chmodSync(join(base, "shared"), 0o775);
    process.env["OATS_STATE_DIR"] = join(base, "shared", "me", "state");
    refusedAt(join(base, "shared"), "writable");
    assert.equal(existsSync(join(base, "shared", "me")), false, "nothing is created below it");
  });

  test("Given an ancestor owned by another user, Then the state is refused there", { skip: !asRoot }, async () => {
    const base = open();
    mkdirSync(join(base, "theirs"), { mode: 0o755 });
    (await import("node:fs")).chownSync(join(base, "theirs"), NOBODY, NOBODY);
    process.env["OATS_STATE_DIR"] = join(base, "theirs", "state");
    refusedAt(join(base, "theirs"), "owner");
  });

  test("Given a sticky world-writable ancestor and a state root of the operator's, Then the state is used; " +
    "a state root another user made there first is refused", { skip: !asRoot }, async () => {
    const base = open();
    const shared = join(base, "shared");
    mkdirSync(shared);
    chmodSync(shared, 0o1777);
    process.env["OATS_STATE_DIR"] = join(shared, "mine");
    assert.equal(scopeState(realpathSync(tempDir("oats-anchor-"))).usable, true);
    mkdirSync(join(shared, "theirs"), { mode: 0o700 });
    (await import("node:fs")).chownSync(join(shared, "theirs"), NOBODY, NOBODY);
    process.env["OATS_STATE_DIR"] = join(shared, "theirs");
    refusedAt(join(shared, "theirs"), "owner");
    process.env["OATS_STATE_DIR"] = join(shared, "theirs", "below");
    refusedAt(join(shared, "theirs"), "owner");
  });

  test("Given a symlink among the ancestors, Then it is followed like the kernel does and the directories it " +
    "leads through are checked; a symlink another user owns, or one that leads through their directory, is refused", {
    skip: !asRoot,
  }, async () => {
    const { chownSync, lchownSync } = await import("node:fs");
    const base = open();
    mkdirSync(join(base, "real", "deep"), { recursive: true });
    mkdirSync(join(base, "links"));
    // A relative target that climbs: `..` is taken from the directory the link is in, as the kernel does.
    symlinkSync(join("..", "real", "deep"), join(base, "links", "link"));
    process.env["OATS_STATE_DIR"] = join(base, "links", "link", "state");
    const state = scopeState(realpathSync(tempDir("oats-anchor-")));
    assert.equal(state.usable, true);
    if (state.usable) assert.ok(state.dir.startsWith(join(base, "real", "deep", "state", "scopes")), state.dir);

    mkdirSync(join(base, "theirs"), { mode: 0o755 });
    mkdirSync(join(base, "theirs", "dir"), { mode: 0o755 });
    chownSync(join(base, "theirs"), NOBODY, NOBODY);
    symlinkSync(join(base, "theirs", "dir"), join(base, "through"));
    process.env["OATS_STATE_DIR"] = join(base, "through", "state");
    refusedAt(join(base, "theirs"), "owner");

    symlinkSync(join(base, "real"), join(base, "planted"));
    lchownSync(join(base, "planted"), NOBODY, NOBODY);
    process.env["OATS_STATE_DIR"] = join(base, "planted", "state");
    refusedAt(join(base, "planted"), "owner");
  });

  test("Given a state root at /, Then it is refused", () => {
    process.env["OATS_STATE_DIR"] = "/";
    refusedAt("/", "root-directory");
  });
});

describe("chain checkpoint: fast, incremental and full", () => {
  test(
    "Given a checkpoint and an unchanged file (dev, inode, size, ctime), " +
      "When synced, Then nothing is read (fast); after an append by another " +
      "account's oats, Then incremental; with no state, Then full",
    async () => {
      const { scope, entries } = await logWith(3);
      const fast = syncLog(scope, AUDIT);
      assert.equal(fast.how, "fast");
      assert.equal(fast.seq, 3);
      assert.equal(fast.head, entries[2]!.hash);
      const mine = process.env["OATS_STATE_DIR"];
      freshState(); // another operator account: its own state
      const theirs = await appendEntry(scope, AUDIT, { action: "dispatch", n: 3 });
      process.env["OATS_STATE_DIR"] = mine;
      const incremental = syncLog(scope, AUDIT);
      assert.equal(incremental.how, "incremental");
      assert.equal(incremental.seq, 4);
      assert.equal(incremental.head, theirs.hash);
      assert.equal(syncLog(scope, AUDIT).how, "fast", "the incremental sync moved the checkpoint");
      freshState();
      assert.equal(syncLog(scope, AUDIT).how, "full");
    },
  );

  test(
    "Given a checkpoint, When a middle line is edited and the chain " +
      "recomputed, Then the next append is audit-unavailable " +
      "(history-rewritten) and reading is integrity-mismatch; the file is unchanged",
    async () => {
      const { scope } = await logWith(5);
      freshState();
      assert.equal(syncLog(scope, AUDIT).how, "full", "the checkpoint's hashed prefix now covers all five lines");
      rechain(scope, 2, (entry) => (entry["n"] = 99));
      assert.equal(verifyChain(scope, AUDIT).ok, true, "the rewrite is a valid chain on its own");
      const before = readFileSync(logPath(scope));
      await assert.rejects(
        appendEntry(scope, AUDIT, { action: "dispatch" }),
        refusal("audit-unavailable", { step: "verify", reason: "history-rewritten" }),
      );
      assert.throws(() => syncLog(scope, AUDIT), refusal("integrity-mismatch", "history-rewritten"));
      assert.deepEqual(readFileSync(logPath(scope)), before);
    },
  );

  test(
    "Given a checkpoint, When a middle line is rewritten to the same length " +
      "and the chain recomputed (same size, same inode), Then the changed " +
      "ctime sends it down the checked path: history-rewritten",
    async () => {
      const { scope } = await logWith(5);
      freshState();
      syncLog(scope, AUDIT);
      const size = readFileSync(logPath(scope)).length;
      rechain(scope, 2, (entry) => (entry["n"] = 7));
      assert.equal(readFileSync(logPath(scope)).length, size);
      assert.throws(() => syncLog(scope, AUDIT), refusal("integrity-mismatch", "history-rewritten"));
    },
  );

  test(
    "Given a checkpoint taken after appends on the fast path (anchor " +
      "behind), When a line between the anchor and the checkpoint is rewritten " +
      "and re-chained, Then it is still history-rewritten",
    async () => {
      const { scope } = await logWith(2);
      freshState();
      assert.equal(syncLog(scope, AUDIT).how, "full"); // anchor at seq 2
      // fast path: checkpoint seq 5, anchor seq 2
      for (let n = 0; n < 3; n++) await appendEntry(scope, AUDIT, { action: "dispatch", n: 10 + n });
      rechain(scope, 3, (entry) => (entry["n"] = 99));
      assert.throws(() => syncLog(scope, AUDIT), refusal("integrity-mismatch", "history-rewritten"));
    },
  );

  test(
    "Given no checkpoint, When a middle line is edited without re-chaining, " +
      "Then the next append refuses (the whole log is verified, not only its tail)",
    async () => {
      const { scope } = await logWith(4);
      const all = lines(scope);
      all[1] = all[1]!.replace('"n":1', '"n":7');
      writeFileSync(logPath(scope), `${all.join("\n")}\n`);
      freshState();
      await assert.rejects(
        appendEntry(scope, AUDIT, { action: "dispatch" }),
        refusal("audit-unavailable", { brokenAt: { line: 2, seq: 2, reason: "wrong-hash" } }),
      );
    },
  );

  test(
    "Given a checkpoint, When the last line is removed, Then truncated; When " + "the log is removed, Then log-missing",
    async () => {
      const { scope } = await logWith(3);
      writeFileSync(logPath(scope), `${lines(scope).slice(0, -1).join("\n")}\n`);
      assert.throws(() => syncLog(scope, AUDIT), refusal("integrity-mismatch", "truncated"));
      rmSync(logPath(scope));
      assert.throws(() => syncLog(scope, AUDIT), refusal("integrity-mismatch", "log-missing"));
    },
  );

  test(
    "Given a checkpoint whose bucket objects were lost, When a decision is " +
      "looked up, Then the state is rebuilt from the log and the answer is the same",
    async () => {
      const scope = tempDir("oats-anchor-");
      const body = (n: number) => ({
        action: "approve",
        subject: { kind: "capture", key: "x", integrity: `i-${n}` },
        outcome: "ok",
        details: { ledger: { seq: n, hash: `sha256-${"1".repeat(64)}` } },
      });
      const written = [];
      for (let n = 1; n <= 3; n++) written.push(await appendEntry(scope, AUDIT, body(n)));
      const dir = scopeStateDir(realpathSync(scope))!;
      const { subjectKey } = await import("../src/ledger/decision-key.js");
      const id = subjectKey({ kind: "capture", key: "x", integrity: "i-2" });
      assert.equal(syncLog(scope, AUDIT).lookup(id)?.hash, written[1]!.hash);
      for (const name of readdirSync(join(dir, "objects"))) rmSync(join(dir, "objects", name));
      const sync = syncLog(scope, AUDIT);
      assert.equal(sync.how, "fast");
      const location = sync.lookup(id)!;
      assert.equal(location.hash, written[1]!.hash);
      assert.equal(sync.confirm(location).hash, written[1]!.hash);
    },
  );

  test(
    "Given a checkpoint whose bucket objects were lost, When the log was " +
      "also rewritten into another valid chain, Then the rebuild still refuses " +
      "it (history-rewritten)",
    async () => {
      const scope = tempDir("oats-anchor-");
      for (let n = 1; n <= 3; n++)
        await appendEntry(scope, AUDIT, {
          action: "approve",
          subject: { kind: "capture", key: "x", integrity: `i-${n}` },
          outcome: "ok",
          details: { ledger: { seq: n, hash: `sha256-${"1".repeat(64)}` } },
        });
      const dir = scopeStateDir(realpathSync(scope))!;
      syncLog(scope, AUDIT);
      freshState();
      syncLog(scope, AUDIT);
      process.env["OATS_STATE_DIR"] = join(dir, "..", "..");
      for (const name of readdirSync(join(dir, "objects"))) rmSync(join(dir, "objects", name));
      const { subjectKey } = await import("../src/ledger/decision-key.js");
      const sync = syncLog(scope, AUDIT);
      assert.equal(sync.how, "fast");
      rechain(scope, 0, (entry) => (entry["outcome"] = "ok!"));
      assert.throws(
        () => syncLog(scope, AUDIT).lookup(subjectKey({ kind: "capture", key: "x", integrity: "i-2" })),
        refusal("integrity-mismatch", "history-rewritten"),
      );
      assert.throws(
        () => sync.lookup(subjectKey({ kind: "capture", key: "x", integrity: "i-2" })),
        refusal("integrity-mismatch", "history-rewritten"),
      );
    },
  );
});

describe("chain checkpoint: concurrency", () => {
  test(
    "Given 6 processes appending 15 entries each with one shared state " +
      "directory, Then the chain is valid and the checkpoint names an entry of " +
      "it and still extends",
    async () => {
      const scope = tempDir("oats-anchor-");
      const child = join(REPO, "test/support/chain-append-child.ts");
      const inputs = Array.from({ length: 6 }, (_, writer) => ({
        scope,
        dir: AUDIT.dir,
        file: AUDIT.file,
        writer,
        count: 15,
      }));
      const results = await runTogether(child, inputs, { cwd: REPO, env: { ...process.env } });
      for (const result of results) assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
      const { entries, head } = readEntries(scope, AUDIT);
      assert.equal(entries.length, 90);
      const checkpoint = loadCheckpoint(scopeStateDir(realpathSync(scope))!, KEY);
      assert.ok(checkpoint, "a checkpoint was written");
      assert.equal(entries[checkpoint.seq - 1]!.hash, checkpoint.head);
      const sync = syncLog(scope, AUDIT);
      assert.equal(sync.seq, 90);
      assert.equal(sync.head, head);
      assert.ok(existsSync(logPath(scope)));
    },
  );
});
