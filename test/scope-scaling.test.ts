/**
 * The whole-scope readers grow linearly: `fsckScope`, `gc` (dry run),
 * `listRetained` (`oats ls`) and `listPins` (`oats pins`) read each
 * directory listing and each small file a fixed number of times, however
 * many revisions, pins and records the scope holds. Counted, not timed: the
 * file-system calls of the calling thread (readdirSync and openSync, through
 * node:fs's own exports), on scopes of N, 2N and 3N revisions. A reader
 * that read every pin or record again for each revision, or listed the
 * store once per revision, would add a term that grows with N squared.
 */
import assert from "node:assert/strict";
import fs, { mkdirSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  fsckScope,
  gc,
  listPins,
  listRetained,
  pin,
  retainTree,
  writeInstanceRef,
  writeResolution,
} from "../src/index.js";
import { setParallelism } from "../src/retention/parallel/pool.js";
import { tempDir } from "./helpers.js";

/** Per revision: one pin in PIN_EVERY, one record (named by an instance ref) in RECORD_EVERY. */
const PIN_EVERY = 3;
const RECORD_EVERY = 3;
const SIZES = [6, 12, 18];

/** A small complete instance record running `bin/run` of one revision. */
function instanceRecord(ref: { kind: string; key: string; integrity: { format: string; value: string } }, n: number) {
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: `inst-${n}` },
    source: null,
    artifacts: {
      [ref.key]: {
        artifact: ref,
        package: { id: ref.key, source: `path:/test/${ref.key}`, version: "1.0.0", commit: null, integrity: null },
        legacyIntegrity: null,
      },
    },
    config: {},
    bindings: {},
    messaging: null,
    entrypoints: { run: { artifact: ref, path: "bin/run", args: [], role: "command" } },
    capture: null,
    evidence: [],
    unresolved: [],
  };
}

/** A scope of `count` two-file revisions, each under its own key, with pins, records and instance refs. */
async function scopeOf(count: number): Promise<{ scope: string; keyDirs: string[] }> {
  const dir = tempDir("oats-scaling-");
  const scope = join(dir, "scope");
  const source = join(dir, "tree");
  mkdirSync(scope);
  mkdirSync(join(source, "bin"), { recursive: true });
  writeFileSync(join(source, "bin", "run"), "#!/bin/sh\nexit 0\n", { mode: 0o755 });
  const keyDirs: string[] = [];
  for (let i = 0; i < count; i++) {
    writeFileSync(join(source, "revision.txt"), `revision ${i}\n`);
    const receipt = await retainTree(scope, {
      kind: "capability",
      key: `test.rev-${String(i).padStart(3, "0")}`,
      source,
    });
    keyDirs.push(join(receipt.dir, ".."));
    const ref = { kind: "capability", key: receipt.key, integrity: receipt.integrity };
    if (i % PIN_EVERY === 0)
      await pin(scope, `capability:${receipt.key}@${receipt.integrity.format}:${receipt.integrity.value}`);
    if (i % RECORD_EVERY === 0) {
      const { id } = writeResolution(scope, instanceRecord(ref, i));
      writeInstanceRef(scope, `inst-${i}`, id);
    }
  }
  return { scope, keyDirs };
}

type Calls = Map<string, number>;
let calls: Calls | null = null;
const original = { readdirSync: fs.readdirSync, openSync: fs.openSync };

function counted<F extends (...args: never[]) => unknown>(name: string, call: F): F {
  return ((...args: Parameters<F>) => {
    if (calls !== null) {
      const key = `${name} ${String(args[0])}`;
      calls.set(key, (calls.get(key) ?? 0) + 1);
    }
    return call(...args);
  }) as F;
}

/** The calling thread's readdirSync and openSync calls of `body`, by call and path. */
async function callsOf(body: () => unknown): Promise<Calls> {
  calls = new Map();
  try {
    await body();
    return calls;
  } finally {
    calls = null;
  }
}

const total = (counts: Calls) => [...counts.values()].reduce((sum, n) => sum + n, 0);

describe("whole-scope readers grow linearly", { concurrency: false }, () => {
  const scopes: { scope: string; keyDirs: string[] }[] = [];
  before(async () => {
    // One lane: every revision is walked on the calling thread, where the calls are counted.
    setParallelism(1);
    for (const size of SIZES) scopes.push(await scopeOf(size));
    fs.readdirSync = counted("readdir", original.readdirSync);
    fs.openSync = counted("open", original.openSync);
    syncBuiltinESMExports();
  });
  after(() => {
    fs.readdirSync = original.readdirSync;
    fs.openSync = original.openSync;
    syncBuiltinESMExports();
    setParallelism(null);
  });

  test("fsck lists each revision's key directory once, and opens each record and pin once", async () => {
    const { scope, keyDirs } = scopes.at(-1)!;
    const counts = await callsOf(async () => assert.equal((await fsckScope(scope)).ok, true));
    for (const dir of keyDirs) assert.equal(counts.get(`readdir ${dir}`), 1, `${dir} listed once`);
    const opened = [...counts].filter(([key]) => /\/\.agents\/(resolutions|pins)\/[^/]+\.json$/.test(key));
    assert.equal(opened.length, SIZES.at(-1)! / RECORD_EVERY + SIZES.at(-1)! / PIN_EVERY);
    for (const [key, n] of opened) assert.equal(n, 1, `${key} opened once`);
  });

  const readers: [string, (scope: string) => unknown][] = [
    ["fsckScope", (scope) => fsckScope(scope)],
    ["gc dry run", (scope) => gc(scope)],
    ["listRetained (oats ls)", (scope) => listRetained(scope)],
    ["listPins (oats pins)", (scope) => listPins(scope)],
  ];
  for (const [name, read] of readers) {
    test(`${name}: each step of N revisions adds the same number of reads`, async () => {
      // A first call of each reader on each scope records what readers record once (the chain logs' checkpoints).
      for (const { scope } of scopes) await read(scope);
      const reads: number[] = [];
      for (const { scope } of scopes) reads.push(total(await callsOf(() => read(scope))));
      assert.ok(reads[1]! > reads[0]!, `${name} reads more of a larger scope: ${reads.join(", ")}`);
      assert.equal(reads[2]! - reads[1]!, reads[1]! - reads[0]!, `${name} reads ${reads.join(", ")}: not linear`);
    });
  }
});
