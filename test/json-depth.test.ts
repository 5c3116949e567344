/**
 * Excessive nesting and duplicate keys in every JSON/YAML reader: operator
 * files (plans, capture specs, classification configs, profiles, locks,
 * installation provenance, legacy instance files) and stored JSON (records,
 * instance refs, queue jobs, chain-log lines, bundle manifests via the
 * canonical reader). 5,000 nested arrays fit in 10 KB; every reader refuses
 * them with its own typed code, never a stack overflow.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import {
  OPERATOR_MAX_DEPTH,
  STORED_MAX_DEPTH,
  nestsDeeperThan,
  scanJsonText,
  valueDepthProblem,
} from "../src/core/json-text.js";
import { checkLine, parseLine } from "../src/ledger/chain-line.js";
import { parseByExtension, parseYamlText } from "../src/resolution/operator-input.js";
import { readLockFile } from "../src/retention/oats-lock.js";
import { retainCapabilityArtifact } from "../src/retention/index.js";
import { readCanonicalJson, readInstanceRef, readResolution, reconstruct } from "../src/resolution/index.js";
import {
  parseClassificationConfig,
  readCaptureProfileFile,
  readCaptureSpecFile,
  readJob,
} from "../src/captures/index.js";
import { verifyAudit } from "../src/ledger/index.js";
import { readPlanFile } from "../src/resolution/plan.js";
import { fixtureCopy, fixtureLock, runOats, snapshotTree, tempDir } from "./helpers.js";
import { refusal, type Expected } from "./support/refusals.js";

const DEEP = 5000;
const deepArrays = (depth = DEEP) => `${"[".repeat(depth)}${"]".repeat(depth)}`;
const nested = (depth: number) => `${"[".repeat(depth)}1${"]".repeat(depth)}`;

/** A refusal whose message does not speak of the call stack: no stack overflow leaked. */
const cleanRefusal = (code: string, ...expected: Expected[]) =>
  refusal(code, ...expected, (error) => assert.doesNotMatch(error.message, /call stack/));

function file(name: string, text: string): string {
  const path = join(tempDir("oats-deep-"), name);
  writeFileSync(path, text);
  return path;
}

/** A store file planted by hand (store root with its managed .gitignore). */
function plant(scope: string, root: readonly string[], name: string, bytes: string | Buffer): string {
  const dir = join(scope, ...root);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, ".gitignore"), "*\n");
  writeFileSync(join(dir, name), bytes);
  return join(dir, name);
}

describe("scanJsonText: one linear pass for depth and duplicate keys", () => {
  test("depth: exactly the bound passes, one more is refused with the pointer of the container", () => {
    assert.equal(scanJsonText(nested(10), 10), null);
    assert.deepEqual(scanJsonText(nested(11), 10), {
      reason: "too-deep",
      pointer: "/0/0/0/0/0/0/0/0/0/0",
      maxDepth: 10,
    });
    assert.deepEqual(scanJsonText('{"a":[1,{"b":{"c":[]}}]}', 3), {
      reason: "too-deep",
      pointer: "/a/1/b",
      maxDepth: 3,
    });
    assert.equal(scanJsonText(deepArrays(100_000), 100_000), null, "iterative: no stack use however deep");
  });

  test(
    "duplicates: per object, decoded (escapes), in document order; arrays " + "and sibling objects are separate scopes",
    () => {
      assert.deepEqual(scanJsonText('{"a":1,"b":{"x":1},"a":2}', 64), {
        reason: "duplicate-key",
        pointer: "/a",
        key: "a",
      });
      assert.deepEqual(scanJsonText('{"a":"\\u0061","\\u0061":2}', 64), {
        reason: "duplicate-key",
        pointer: "/a",
        key: "a",
      });
      assert.deepEqual(scanJsonText('{"l":[{"k":1},{"k":2,"k":3}]}', 64), {
        reason: "duplicate-key",
        pointer: "/l/1/k",
        key: "k",
      });
      assert.equal(scanJsonText('[{"k":1},{"k":2}]', 64), null);
      assert.equal(scanJsonText('{"a":{"k":1},"b":{"k":1}}', 64), null);
      assert.deepEqual(scanJsonText('{"a/b~":1,"a/b~":2}', 64), {
        reason: "duplicate-key",
        pointer: "/a~1b~0",
        key: "a/b~",
      });
      assert.deepEqual(scanJsonText('{"__proto__":1,"__proto__":2}', 64), {
        reason: "duplicate-key",
        pointer: "/__proto__",
        key: "__proto__",
      });
    },
  );

  test("strings are opaque: brackets, quotes, commas and backslashes inside them count for nothing", () => {
    assert.equal(scanJsonText(JSON.stringify({ a: "[[[{{{", b: 'x\\"},"a":', c: "\\", d: '"' }), 2), null);
    assert.equal(scanJsonText(JSON.stringify({ 'k,"k': 1, k: 2 }), 2), null);
    assert.equal(scanJsonText(JSON.stringify([{ v: "]" }, { v: "," }]), 2), null);
  });

  test("depth comes first: a repeated key before the deep part does not hide it", () => {
    // Reported in document order before, the duplicate hid the depth from a caller checking for "too-deep" alone.
    assert.deepEqual(scanJsonText(`{"a":1,"a":2,"b":${nested(11)}}`, 10), {
      reason: "too-deep",
      pointer: `/b${"/0".repeat(9)}`,
      maxDepth: 10,
    });
    assert.deepEqual(scanJsonText(`{"a":1,"a":2,"b":${nested(9)}}`, 10), {
      reason: "duplicate-key",
      pointer: "/a",
      key: "a",
    });
  });

  test("nestsDeeperThan gives scanJsonText's depth verdict, strings opaque, a stray closer no credit", () => {
    const texts = [
      nested(10),
      nested(11),
      '{"a":[1,{"b":{"c":[]}}]}',
      JSON.stringify({ a: "[[[{{{", b: 'x\\"},"a":', c: "\\", d: '"' }),
      '["\\\\[[[[[[[[[[[["]',
      `]]]]]${nested(10)}`,
      `}}}}${nested(11)}`,
      `{"a":1,"a":2,"b":${nested(11)}}`,
      '"[[[[[[[[[[[[',
      // An escaped quote does not end the string: the brackets after it are text.
      '["\\"[[[[[[[[[[[["]',
    ];
    for (const text of texts) {
      for (const bound of [3, 10])
        assert.equal(
          nestsDeeperThan(text, bound),
          scanJsonText(text, bound)?.reason === "too-deep",
          `${text} at ${bound}`,
        );
    }
    assert.equal(nestsDeeperThan(deepArrays(100_000), 100_000), false, "iterative");
    assert.equal(nestsDeeperThan(deepArrays(100_001), 100_000), true);
  });

  test("valueDepthProblem bounds a built value iteratively", () => {
    let value: unknown = 1;
    for (let index = 0; index < 100_000; index += 1) value = [value];
    assert.equal(valueDepthProblem(value, OPERATOR_MAX_DEPTH), `/${Array(OPERATOR_MAX_DEPTH).fill("0").join("/")}`);
    assert.equal(valueDepthProblem({ a: [{ b: 1 }] }, 3), null);
    assert.equal(valueDepthProblem({ a: [{ b: [] }] }, 3), "/a/0/b");
  });
});

describe("operator files: 5,000 nested arrays in 10 KB are invalid-input (too-deep), never a stack overflow", () => {
  const yamlForms: [string, string][] = [
    ["flow sequences", deepArrays()],
    ["flow mappings", `${"{a: ".repeat(DEEP)}1${"}".repeat(DEEP)}`],
    ["block sequences", `${"- ".repeat(DEEP)}x\n`],
    [
      "block mappings (indentation)",
      `${Array.from({ length: 600 }, (_, index) => `${" ".repeat(index)}k:`).join("\n")}\n${" ".repeat(600)}v: 1\n`,
    ],
    ["just past the bound", `${"[".repeat(OPERATOR_MAX_DEPTH + 1)}${"]".repeat(OPERATOR_MAX_DEPTH + 1)}`],
  ];
  for (const [name, text] of yamlForms) {
    test(`YAML ${name}`, () => {
      assert.throws(() => parseYamlText(text, "plan"), cleanRefusal("invalid-input", "too-deep"));
    });
  }
  test("YAML at the bound is accepted", () => {
    assert.ok(parseYamlText(`${"[".repeat(OPERATOR_MAX_DEPTH)}${"]".repeat(OPERATOR_MAX_DEPTH)}`, "plan"));
  });
  test("JSON plan text, and JSON at the bound still parses", () => {
    assert.throws(() => parseByExtension(deepArrays(), ".json", "plan"), cleanRefusal("invalid-input", "too-deep"));
    assert.deepEqual(
      parseByExtension(nested(OPERATOR_MAX_DEPTH), ".json", "plan"),
      JSON.parse(nested(OPERATOR_MAX_DEPTH)),
    );
  });
  for (const ext of [".json", ".yaml"]) {
    test(`a plan file (${ext}) with a deep config value`, () => {
      const text = `{"schemaVersion":1,"instance":"a","config":{"x":{"value":${deepArrays()}}}}`;
      assert.throws(() => readPlanFile(file(`plan${ext}`, text)), cleanRefusal("invalid-input", "too-deep"));
    });
    test(`a capture spec (${ext})`, () => {
      assert.throws(
        () => readCaptureSpecFile(file(`spec${ext}`, `{"name":"n","env":${deepArrays()}}`)),
        cleanRefusal("invalid-input", "too-deep"),
      );
    });
  }
  test("a classification config and a capture profile", () => {
    assert.throws(
      () => parseClassificationConfig(Buffer.from(`schemaVersion: 1\nrules: ${deepArrays()}\n`)),
      cleanRefusal("invalid-input", "too-deep"),
    );
    assert.throws(
      () => readCaptureProfileFile(file("profile.yaml", `schemaVersion: 1\nenv: ${deepArrays()}\n`)),
      cleanRefusal("invalid-input", "too-deep"),
    );
  });
  test("a lock file is invalid-lock (too-deep)", () => {
    assert.throws(
      () => readLockFile(file("oats-lock.json", `{"lockfileVersion":2,"packages":${deepArrays()}}`)),
      cleanRefusal("invalid-lock", "too-deep"),
    );
  });
  test("a legacy instance.json is invalid-input (too-deep), nothing written", async () => {
    const scope = tempDir("oats-scope-");
    const home = tempDir("oats-home-");
    writeFileSync(join(home, "instance.json"), `{"name":"a","command":${deepArrays()}}`);
    const before = snapshotTree(scope);
    await assert.rejects(reconstruct(scope, home), cleanRefusal("invalid-input", "too-deep"));
    assert.deepEqual(snapshotTree(scope), before);
  });
  test("a capability's .oats-installation.json is provenance-mismatch (too-deep), nothing retained", async () => {
    const scope = tempDir("oats-scope-");
    const source = fixtureCopy();
    writeFileSync(join(source, ".oats-installation.json"), `{"package":${deepArrays()}}`);
    const lockPath = file("oats-lock.json", JSON.stringify(fixtureLock()));
    await assert.rejects(retainCapabilityArtifact(scope, source, "demo.hello", readLockFile(lockPath)), (error) => {
      // The tree no longer digests to the lock's integrity either; whichever check runs first, it is typed.
      assert.ok(
        error instanceof OatsError && ["provenance-mismatch", "integrity-mismatch"].includes(error.code),
        String(error),
      );
      return true;
    });
  });
  test("the CLI: `oats prepare` of a 5,000-deep plan exits 4 with invalid-input, not internal-error", () => {
    const scope = tempDir("oats-scope-");
    const plan = file("plan.json", `{"schemaVersion":1,"instance":"a","capabilities":${deepArrays()}}`);
    const run = runOats(["--json", "--scope", scope, "prepare", plan]);
    assert.equal(run.status, 4, run.stdout + run.stderr);
    const error = (JSON.parse(run.stdout) as { error: { code: string; details: Record<string, unknown> } }).error;
    assert.equal(error.code, "invalid-input");
    assert.equal(error.details["reason"], "too-deep");
  });
});

describe("duplicate keys in JSON operator files are refused, as YAML refuses them", () => {
  test("a JSON plan: invalid-input (duplicate-key), naming the pointer", () => {
    const path = file("plan.json", '{"schemaVersion":1,"instance":"a","instance":"b"}');
    assert.throws(() => readPlanFile(path), cleanRefusal("invalid-input", "duplicate-key", { pointer: "/instance" }));
  });
  test("the same plan in YAML is refused too (yaml's own DUPLICATE_KEY)", () => {
    assert.throws(
      () => readPlanFile(file("plan.yaml", "schemaVersion: 1\ninstance: a\ninstance: b\n")),
      cleanRefusal("invalid-input"),
    );
  });
  test("a JSON capture spec, a lock, an instance.json", async () => {
    assert.throws(
      () => readCaptureSpecFile(file("spec.json", '{"name":"a","env":{"X":"1","X":"2"}}')),
      cleanRefusal("invalid-input", "duplicate-key"),
    );
    const lock = JSON.stringify(fixtureLock()).replace(
      '"lockfileVersion":2',
      '"lockfileVersion":2,"lockfileVersion":2',
    );
    assert.throws(() => readLockFile(file("oats-lock.json", lock)), cleanRefusal("invalid-lock", "duplicate-key"));
    const home = tempDir("oats-home-");
    writeFileSync(join(home, "instance.json"), '{"name":"a","name":"b"}');
    await assert.rejects(reconstruct(tempDir("oats-scope-"), home), cleanRefusal("invalid-input", "duplicate-key"));
  });
  test("the CLI names the duplicate key", () => {
    const plan = file("plan.json", '{"schemaVersion":1,"instance":"a","instance":"b"}');
    const run = runOats(["--scope", tempDir("oats-scope-"), "prepare", plan]);
    assert.equal(run.status, 4);
    assert.match(run.stderr, /^oats: invalid-input: .*duplicate key "instance" at \/instance/);
  });
});

describe("stored JSON: deep bytes are refused with the reader's own code", () => {
  const deepBytes = Buffer.from(deepArrays());
  const digest = (bytes: Buffer) => `sha256-${createHash("sha256").update(bytes).digest("hex")}`;

  test("the canonical reader: invalid-resolution (too-deep), at the stored bound", () => {
    assert.throws(() => readCanonicalJson(deepBytes, "record"), cleanRefusal("invalid-resolution", "too-deep"));
    assert.throws(
      () => readCanonicalJson(Buffer.from(nested(STORED_MAX_DEPTH + 1)), "record"),
      cleanRefusal("invalid-resolution", "too-deep"),
    );
    assert.deepEqual(
      readCanonicalJson(Buffer.from(`${nested(STORED_MAX_DEPTH)}\n`), "record"),
      JSON.parse(nested(STORED_MAX_DEPTH)),
    );
  });
  test("a resolution record whose id is its digest", async () => {
    const scope = tempDir("oats-scope-");
    const id = digest(deepBytes);
    plant(scope, [".agents", "resolutions"], `${id}.json`, deepBytes);
    await assert.rejects(readResolution(scope, id), cleanRefusal("invalid-resolution", "too-deep"));
  });
  test("an instance ref (1,500 deep: its file is bounded to 4 KiB)", () => {
    const scope = tempDir("oats-scope-");
    plant(scope, [".agents", "refs", "instances"], "alpha.json", `{"instance":${nested(1500)}}`);
    assert.throws(() => readInstanceRef(scope, "alpha"), cleanRefusal("invalid-resolution", "too-deep"));
  });
  test("a queue job: typed (the job store's own code), not a crash", () => {
    const scope = tempDir("oats-scope-");
    plant(scope, [".agents", "queue"], "nightly.json", deepBytes);
    assert.throws(
      () => readJob(scope, "nightly"),
      (error) => {
        assert.ok(error instanceof OatsError && error.kind === "invalid", String(error));
        assert.match(error.message, /nested deeper/);
        return true;
      },
    );
  });
  test("an audit log line: a broken chain, not a crash", () => {
    const scope = tempDir("oats-scope-");
    plant(scope, [".agents", "audit"], "audit.jsonl", `${deepArrays()}\n`);
    const verdict = verifyAudit(scope);
    assert.equal(verdict.ok, false);
  });
  test(
    "a repeated key before the deep part: still refused as too deep, by the " + "chain reader and the canonical reader",
    () => {
      // checkLine threw RangeError (its reviver recursed) where the scan had reported only the repeated key.
      const line = `{"a":1,"a":2,"b":${deepArrays()}}`;
      assert.deepEqual(checkLine(line), { reason: "bad-json", seq: null });
      assert.deepEqual(checkLine(line.replace('"b"', '"__proto__"')), { reason: "bad-json", seq: null });
      assert.throws(() => parseLine(line), /nested too deep/);
      assert.throws(
        () => readCanonicalJson(Buffer.from(line), "record"),
        cleanRefusal("invalid-resolution", "too-deep"),
      );
      const scope = tempDir("oats-scope-");
      plant(scope, [".agents", "audit"], "audit.jsonl", `${line}\n`);
      assert.equal(verifyAudit(scope).ok, false);
    },
  );
});
