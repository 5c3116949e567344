/**
 * The stored half of a kept retain, started before the source is walked
 * (src/retention/store/kept-early.ts): it only reads; the source's verdict
 * still comes first, nothing in the store is touched before both verdicts
 * are in, and a check that is not used is stopped.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import type { OatsError } from "../src/core/errors.js";
import { retainTree } from "../src/index.js";
import { setParallelism, workersHeld } from "../src/retention/parallel/pool.js";
import { listingShape } from "../src/retention/digest/listing-shape.js";
import { setReadHook } from "../src/engine/read-hook.js";
import { walkTree } from "../src/retention/digest/walk.js";
import { mayMatch } from "../src/retention/store/kept-candidate.js";
import { startEarlyCheck } from "../src/retention/store/kept-early.js";
import { firstDifference, manifestPath } from "../src/retention/store/manifest.js";
import { resolveScope } from "../src/retention/store/components.js";
import { snapshotTree, tempDir, makeTree, tamper } from "./helpers.js";
import { rejection, refusal } from "./support/refusals.js";

after(() => setParallelism(null));

const EXEC = "oats.tree-exec.v1" as const;
const OLD = new Date(1_000_000_000);

/** The refusal `promise` rejects with, once it has handed back the worker of its early check (held, it would keep the
 * process alive). */
const errorOf = async (promise: Promise<unknown>): Promise<OatsError> => {
  const error = await rejection(promise);
  assert.equal(workersHeld(), 0);
  return error;
};

/** `promise`, or a failure after `ms` (the timer does not keep the process alive). */
const within = <T>(promise: Promise<T>, ms: number): Promise<T> =>
  Promise.race([
    promise,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`not settled within ${ms} ms`)), ms).unref()),
  ]);

const request = (scope: string, expected?: string) => ({
  scope: resolveScope(scope),
  kind: "capture" as const,
  key: "nightly",
  nameFormat: EXEC,
  formats: [EXEC],
  ...(expected ? { expected } : {}),
});

test(
  "startEarlyCheck: the expected revision, else the newest; none without a " +
    "revision or a second core; it only reads; a damaged revision's refusal " +
    "is held, not thrown",
  async () => {
    setParallelism(2);
    const scope = tempDir("oats-early-unit-");
    const source = makeTree({ "a.txt": "one", "b/c.txt": "two" });
    try {
      assert.equal(startEarlyCheck(request(scope)), null, "no store yet");
      const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
      writeFileSync(join(source, "a.txt"), "uno");
      const second = await retainTree(scope, { kind: "capture", key: "nightly", source });
      utimesSync(first.dir, OLD, OLD);

      assert.equal(
        startEarlyCheck(request(scope, `sha256-${"0".repeat(64)}`)),
        null,
        "an expected revision that is not there",
      );
      const expected = startEarlyCheck(request(scope, first.integrity.value))!;
      assert.equal(expected.dir, first.dir);
      assert.deepEqual(await expected.outcome, { ok: true, digests: { [EXEC]: first.integrity.value } });
      // Only read: the revision's mtime (gc's grace period) is for the retain to restart once the source agrees.
      assert.equal(lstatSync(first.dir).mtimeMs, OLD.getTime());
      await expected.release();
      await expected.release(); // idempotent

      const newest = startEarlyCheck(request(scope))!;
      assert.equal(newest.dir, second.dir);
      assert.equal(newest.value, second.integrity.value);
      await newest.release();

      setParallelism(1);
      assert.equal(
        startEarlyCheck(request(scope, first.integrity.value)),
        null,
        "one lane: the retain reads both on its own thread",
      );
      setParallelism(2);

      tamper(join(first.dir, "b", "c.txt"));
      const damaged = startEarlyCheck(request(scope, first.integrity.value))!;
      const outcome = await damaged.outcome;
      await damaged.release();
      assert.equal(outcome.ok, false);
      const refusal = (outcome as { error: unknown }).error as OatsError;
      assert.equal(refusal.code, "integrity-mismatch");
      assert.equal(refusal.details["reason"], "damaged-revision");
    } finally {
      setParallelism(null);
    }
  },
);

test(
  "startEarlyCheck inspects the store first: a store component that is a " + "symlink is refused before any read",
  async () => {
    setParallelism(2);
    const scope = tempDir("oats-early-link-");
    const source = makeTree({ "a.txt": "one" });
    try {
      const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
      // The key's directory moved away and replaced by a symlink to it.
      const keyDir = dirname(dirname(first.dir));
      const elsewhere = join(tempDir("oats-early-elsewhere-"), "nightly");
      cpSync(keyDir, elsewhere, { recursive: true, verbatimSymlinks: true });
      rmSync(keyDir, { recursive: true, force: true });
      symlinkSync(elsewhere, keyDir);
      assert.throws(() => startEarlyCheck(request(scope, first.integrity.value)), refusal("invalid-artifact-store"));
      const refused = await errorOf(
        retainTree(scope, { kind: "capture", key: "nightly", source, expect: first.integrity }),
      );
      assert.equal(refused.code, "invalid-artifact-store");
    } finally {
      setParallelism(null);
    }
  },
);

for (const expect of [true, false]) {
  test(
    `a refused kept retain ${expect ? "with" : "without"} --expect touches ` +
      `nothing, not even the revision's mtime; the source's refusals come first`,
    async () => {
      setParallelism(2);
      const scope = tempDir("oats-early-refused-");
      const source = makeTree({ "a.txt": "one", "b/c.txt": "two" });
      try {
        const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
        const ask = () =>
          retainTree(scope, {
            kind: "capture",
            key: "nightly",
            source,
            ...(expect ? { expect: first.integrity } : {}),
          });
        // A source the walk refuses (a FIFO), one that hashes to something else, one that is gone: the source's
        // refusal, whether the stored copy is intact (its read finishes in the worker meanwhile) or damaged; and
        // the revision's mtime (gc's grace period) is not restarted by a refused retain.
        const sourceRefusals = async () => {
          execFileSync("mkfifo", [join(source, "b", "pipe")]);
          const special = await errorOf(ask());
          assert.equal(special.code, "invalid-artifact");
          assert.equal(special.details["reason"], "special-file");
          rmSync(join(source, "b", "pipe"));
          if (expect) {
            writeFileSync(join(source, "a.txt"), "ONE");
            const differs = await errorOf(ask());
            assert.equal(differs.details["reason"], "source-differs");
            writeFileSync(join(source, "a.txt"), "one");
          }
          const moved = `${source}.gone`;
          renameSync(source, moved);
          const missing = await errorOf(ask());
          assert.equal(missing.code, "invalid-input");
          assert.equal(missing.details["reason"], "source-missing");
          renameSync(moved, source);
        };
        utimesSync(first.dir, OLD, OLD);
        let before = snapshotTree(scope);
        await sourceRefusals();
        assert.equal(lstatSync(first.dir).mtimeMs, OLD.getTime());
        assert.deepEqual(snapshotTree(scope), before);

        // The stored copy damaged: refused, untouched; the source's refusals still come first.
        tamper(join(first.dir, "b", "c.txt"));
        utimesSync(first.dir, OLD, OLD);
        before = snapshotTree(scope);
        const damaged = await errorOf(ask());
        assert.equal(damaged.details["reason"], "damaged-revision");
        await sourceRefusals();
        assert.equal(lstatSync(first.dir).mtimeMs, OLD.getTime());
        assert.deepEqual(snapshotTree(scope), before);
      } finally {
        setParallelism(null);
      }
    },
  );
}

test(
  "a kept retain restarts the revision's mtime only once both reads agree, " +
    "and the early check's worker is handed back for the next call",
  async () => {
    setParallelism(2);
    const scope = tempDir("oats-early-kept-");
    const source = makeTree({ "a.txt": "one", "b/c.txt": "two" });
    try {
      const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
      for (const expect of [true, false]) {
        utimesSync(first.dir, OLD, OLD);
        const again = await retainTree(scope, {
          kind: "capture",
          key: "nightly",
          source,
          ...(expect ? { expect: first.integrity } : {}),
        });
        // A kept receipt publishes nothing, so it has no `files`.
        const { files: _files, ...published } = first;
        assert.deepEqual(again, { ...published, status: "kept" });
        assert.equal(workersHeld(), 0);
        assert.ok(lstatSync(first.dir).mtimeMs > OLD.getTime());
      }
    } finally {
      setParallelism(null);
    }
  },
);

test(
  "mayMatch: same paths and types in order as the manifest, else false; " +
    "names and link targets that read like manifest rows; an unreadable " +
    "manifest is no verdict (true)",
  async () => {
    const files = { "a.txt": "one", 'b/q"uote\\d.txt': "two", "b/ünï.txt": "three", "c/d/e.txt": "four" };
    const source = makeTree(files);
    // A symlink whose target reads like a manifest row: escaped inside its string, it must not be taken for one.
    // (to a file whose name reads like one too, so that the link is not broken).
    writeFileSync(join(source, "b", 'x","type":"file"},{"path":"zz'), "five");
    symlinkSync('x","type":"file"},{"path":"zz', join(source, "b", "link"));
    const scope = tempDir("oats-early-maymatch-");
    const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
    const listing = async (dir: string) => walkTree(dir);
    assert.equal(mayMatch(first.dir, await listing(source)), true);
    const variant = (change: (dir: string) => void) => {
      const dir = join(tempDir("oats-early-variant-"), "tree");
      cpSync(source, dir, { recursive: true, verbatimSymlinks: true });
      change(dir);
      return listing(dir);
    };
    assert.equal(
      mayMatch(first.dir, await variant((dir) => writeFileSync(join(dir, "a.txt"), "other content, same shape"))),
      true,
    );
    assert.equal(
      mayMatch(first.dir, await variant((dir) => writeFileSync(join(dir, "c/d/f.txt"), "added"))),
      false,
      "a leaf added at the end",
    );
    assert.equal(
      mayMatch(first.dir, await variant((dir) => writeFileSync(join(dir, "0.txt"), "added"))),
      false,
      "a leaf added at the start",
    );
    assert.equal(
      mayMatch(first.dir, await variant((dir) => rmSync(join(dir, "c/d/e.txt")))),
      false,
      "the last leaf removed",
    );
    const removed = await variant((dir) => rmSync(join(dir, "b/ünï.txt")));
    assert.equal(mayMatch(first.dir, removed), false, "a leaf removed");
    assert.equal(
      mayMatch(first.dir, await variant((dir) => renameSync(join(dir, "a.txt"), join(dir, "A.txt")))),
      false,
      "a leaf renamed",
    );
    assert.equal(
      mayMatch(
        first.dir,
        await variant((dir) => (rmSync(join(dir, "a.txt")), symlinkSync("target", join(dir, "a.txt")))),
      ),
      false,
      "a file become a symlink",
    );
    const manifest = manifestPath(first.dir);
    const canonical = readFileSync(manifest, "utf8");
    writeFileSync(manifest, canonical.slice(0, canonical.length >> 1));
    assert.equal(
      mayMatch(first.dir, await variant((dir) => rmSync(join(dir, "a.txt")))),
      true,
      "a manifest cut short: no verdict",
    );
    rmSync(manifest);
    assert.equal(
      mayMatch(first.dir, await variant((dir) => rmSync(join(dir, "a.txt")))),
      true,
      "no manifest: no verdict",
    );
  },
);

test(
  "listingShape: the same for the same leaves (types and paths, in order) " +
    "wherever the tree is; different when a leaf is added, removed, renamed, " +
    "moved to another directory or changes type; contents are not part of it",
  async () => {
    const source = makeTree({
      "a.txt": "one",
      "b/c.txt": "two",
      "b/ünï.txt": "three",
      "c/d/e.txt": "four",
      "c/e.txt": "five",
    });
    const shape = async (dir: string) => listingShape(await walkTree(dir));
    const original = await shape(source);
    assert.match(original, /^5:[0-9a-f]{16}$/);
    const variant = async (change: (dir: string) => void) => {
      const dir = join(tempDir("oats-shape-variant-"), "tree");
      cpSync(source, dir, { recursive: true, verbatimSymlinks: true });
      change(dir);
      return shape(dir);
    };
    assert.equal(await variant(() => undefined), original, "a copy elsewhere");
    assert.equal(await variant((dir) => writeFileSync(join(dir, "a.txt"), "other content, same shape")), original);
    assert.equal(await variant((dir) => mkdirSync(join(dir, "empty"))), original, "an empty directory is no leaf");
    const different: Record<string, (dir: string) => void> = {
      "a leaf added at the end": (dir) => writeFileSync(join(dir, "c/e2.txt"), "added"),
      "a leaf added at the start": (dir) => writeFileSync(join(dir, "0.txt"), "added"),
      "the last leaf removed": (dir) => rmSync(join(dir, "c/e.txt")),
      "a leaf removed": (dir) => rmSync(join(dir, "b/ünï.txt")),
      "a leaf renamed": (dir) => renameSync(join(dir, "a.txt"), join(dir, "A.txt")),
      "a leaf moved to another directory, same name": (dir) => renameSync(join(dir, "c/d/e.txt"), join(dir, "b/e.txt")),
      "a directory renamed": (dir) => renameSync(join(dir, "c/d"), join(dir, "c/D")),
      "a file become a symlink": (dir) => (rmSync(join(dir, "a.txt")), symlinkSync("b/c.txt", join(dir, "a.txt"))),
    };
    const seen = new Set([original]);
    for (const [what, change] of Object.entries(different)) {
      const changed = await variant(change);
      assert.ok(!seen.has(changed), what);
      seen.add(changed);
    }
  },
);

test(
  "a kept retain without --expect tells a changed source by its shape, " +
    "told by the early check's worker, not by the manifest: the source is " +
    "read once, for its copy, even with the manifest gone",
  async () => {
    setParallelism(2);
    const scope = tempDir("oats-early-shape-");
    const files = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`d${i % 3}/f${i}.txt`, `file ${i}\n`]));
    const source = makeTree(files);
    const reads = new Map<string, number>();
    const counted = async <T>(body: () => Promise<T>): Promise<T> => {
      reads.clear();
      setReadHook((path) => void reads.set(path, (reads.get(path) ?? 0) + 1));
      try {
        return await body();
      } finally {
        setReadHook(null);
      }
    };
    try {
      const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
      // The early check's shape: that of the revision's listing.
      const early = startEarlyCheck(request(scope))!;
      try {
        assert.equal(await early.shape, listingShape(await walkTree(first.dir)));
      } finally {
        await early.release();
      }

      rmSync(manifestPath(first.dir));
      const again = await counted(() => retainTree(scope, { kind: "capture", key: "nightly", source }));
      assert.equal(again.status, "kept", "the same shape without a manifest: kept");
      // On this thread, the source only (the revision is read in the worker).
      assert.deepEqual([...reads.values()], Array(40).fill(1));

      writeFileSync(join(source, "d0/added.txt"), "new\n");
      const changed = await counted(() => retainTree(scope, { kind: "capture", key: "nightly", source }));
      assert.equal(changed.status, "retained");
      // The copy reads each source file once; the staged copy is links to held files, checked by structure, and
      // the one file written is hashed again outside the tree read: once a path here. A source read first only to
      // be hashed (taken for the revision's shape) would make it two.
      assert.equal(reads.size, 41);
      assert.deepEqual(
        [...reads].filter(([, count]) => count !== 1),
        [],
        "each path read for the copy only",
      );
    } finally {
      setParallelism(null);
    }
  },
);

test(
  "with an expected digest the early check's worker hashes no listing " +
    "shape: only a retain without --expect compares shapes",
  async () => {
    setParallelism(2);
    const scope = tempDir("oats-early-expect-noshape-");
    const source = makeTree({ "a.txt": "one", "b/c.txt": "two" });
    try {
      const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
      const early = startEarlyCheck(request(scope, first.integrity.value))!;
      let outcome;
      try {
        assert.equal(await within(early.shape, 30_000), null);
        outcome = await early.outcome;
      } finally {
        await early.release();
      }
      assert.equal(outcome.ok, true, "the revision itself is still verified");
      const again = await retainTree(scope, { kind: "capture", key: "nightly", source, expect: first.integrity });
      assert.equal(again.status, "kept");
    } finally {
      setParallelism(null);
    }
  },
);

test(
  "the early check tells no shape (null) when the revision's walk refuses, " + "and the retain then refuses as before",
  async () => {
    setParallelism(2);
    const scope = tempDir("oats-early-noshape-");
    const source = makeTree({ "a.txt": "one", "b/c.txt": "two" });
    try {
      const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
      chmodSync(join(first.dir, "b"), 0o755);
      execFileSync("mkfifo", [join(first.dir, "b", "pipe")]);
      const early = startEarlyCheck(request(scope))!;
      let outcome;
      try {
        // Bounded: a shape never told would leave a retain without --expect waiting for it forever.
        assert.equal(await within(early.shape, 30_000), null);
        outcome = await early.outcome;
      } finally {
        await early.release();
      }
      assert.equal(outcome.ok, false);
      const refused = await errorOf(within(retainTree(scope, { kind: "capture", key: "nightly", source }), 30_000));
      assert.equal(refused.code, "invalid-artifact");
    } finally {
      setParallelism(null);
    }
  },
);

test(
  "a revision's manifest is read as a store file, never through a symlink " +
    "and never from a FIFO: mayMatch, firstDifference and gc take either for " +
    "an unknown manifest (a FIFO without a writer would block its open for ever)",
  async () => {
    const source = makeTree({ "a.txt": "one", "b/c.txt": "two" });
    const scope = tempDir("oats-manifest-planted-");
    const first = await retainTree(scope, { kind: "capture", key: "nightly", source });
    const other = await retainTree(tempDir("oats-manifest-other-"), {
      kind: "capture",
      key: "nightly",
      source: makeTree({ "z.txt": "another shape" }),
    });
    const manifest = manifestPath(first.dir);
    // Followed, the other tree's manifest would say the source cannot match.
    rmSync(manifest);
    symlinkSync(manifestPath(other.dir), manifest);
    assert.equal(mayMatch(first.dir, await walkTree(source)), true, "a symlinked manifest is not read");
    assert.equal(await firstDifference(first.dir), null);

    rmSync(manifest);
    execFileSync("mkfifo", [manifest]);
    // In a child, bounded: a blocked open would stop this process's event loop, and its timers with it.
    const src = (path: string) => JSON.stringify(new URL(`../src/${path}`, import.meta.url).href);
    const script = `
    const { mayMatch } = await import(${src("retention/store/kept-candidate.ts")});
    const { firstDifference } = await import(${src("retention/store/manifest.ts")});
    const { walkTree } = await import(${src("retention/digest/walk.ts")});
    const { gc } = await import(${src("lifecycle/gc.ts")});
    const report = await gc(${JSON.stringify(scope)}, { graceMs: 0 });
    console.log(JSON.stringify({
      mayMatch: mayMatch(${JSON.stringify(first.dir)}, await walkTree(${JSON.stringify(source)})),
      firstDifference: await firstDifference(${JSON.stringify(first.dir)}),
      collected: report.collect.map((item) => item.path),
    }));`;
    const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 60_000,
      killSignal: "SIGKILL",
    });
    assert.equal(
      child.signal,
      null,
      `the child was stopped (${child.signal}): a read of the FIFO blocked\n${child.stderr}`,
    );
    assert.equal(child.status, 0, child.stderr);
    assert.deepEqual(JSON.parse(child.stdout), { mayMatch: true, firstDifference: null, collected: [first.dir] });
    assert.ok(lstatSync(manifest).isFIFO(), "a dry run removes nothing");
  },
);
