/**
 * The package as an installer meets it (dist/; `npm run build` first): `npm pack`, the tarball installed
 * with npm into a temporary project, then a sample that imports every entry, type-checked and run as ESM,
 * as CommonJS `require`, and as TypeScript under `module: node16` (both module kinds), `nodenext` and
 * `moduleResolution: bundler`. Offline: the package's dependencies are linked in from this checkout's
 * node_modules before npm installs the tarball, and the TypeScript compiler is this checkout's.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, readdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import { FIXTURE_PAYLOAD, REPO, tempDir } from "./helpers.js";

const PACKAGE = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as {
  name: string;
  dependencies: Record<string, string>;
  engines: { node: string };
};
const MODULES = realpathSync(join(REPO, "node_modules"));
const TSC = join(MODULES, "typescript/bin/tsc");
const EXEC = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";
const SUBPATHS = ["retention", "resolution", "captures", "evidence", "fleet"];
/** What every sample prints: the fixture's exec integrity, and that every entry hands out one OatsError. */
const EXPECTED = { integrity: EXEC, sameError: true, code: "artifact-not-found", exitCode: 3 };

/** The sample in TypeScript: typed imports from every entry, a typed call, a typed refusal. */
const SAMPLE_TS = `import { digestTree, isOatsError, OatsError, ERROR_CODES } from "${PACKAGE.name}";
import type { Integrity, TreeDigests } from "${PACKAGE.name}";
import { integrityText, OatsError as E1, parseIntegrity } from "${PACKAGE.name}/retention";
import { OatsError as E2, type ResolutionRecord } from "${PACKAGE.name}/resolution";
import { OatsError as E3, type CaptureSpec } from "${PACKAGE.name}/captures";
import { OatsError as E4, type RunRecord } from "${PACKAGE.name}/evidence";
import { OatsError as E5, isOatsError as is5, type PushReport } from "${PACKAGE.name}/fleet";

type Used = [ResolutionRecord, CaptureSpec, RunRecord, PushReport];
async function main(): Promise<void> {
  const digests: TreeDigests = await digestTree(process.argv[2] as string);
  const integrity: string = "oats.tree-exec.v1:" + digests["oats.tree-exec.v1"];
  const parsed: Integrity = parseIntegrity(integrity);
  const sameError = [E1, E2, E3, E4, E5].every((entry) => entry === OatsError) && is5 === isOatsError;
  const error = new OatsError("artifact-not-found", "not here", {});
  const code: keyof typeof ERROR_CODES = error.code;
  const none: Used | undefined = undefined;
  console.log(JSON.stringify({
    integrity: integrityText(parsed),
    sameError: sameError && isOatsError(error) && none === undefined,
    code,
    exitCode: error.exitCode,
  }));
}
void main();
`;

/** The same sample in JavaScript, for \`import\` (ESM) and \`require\` (CommonJS). */
function sampleJs(load: (specifier: string) => string): string {
  return `${load(PACKAGE.name)}
(async () => {
  const entries = [${SUBPATHS.map((subpath) => `${load(`${PACKAGE.name}/${subpath}`)}`).join(", ")}];
  const digests = await oats.digestTree(process.argv[2]);
  const parsed = entries[0].parseIntegrity("oats.tree-exec.v1:" + digests["oats.tree-exec.v1"]);
  const error = new oats.OatsError("artifact-not-found", "not here", {});
  console.log(JSON.stringify({
    integrity: entries[0].integrityText(parsed),
    sameError: entries.every((entry) => entry.OatsError === oats.OatsError && entry.isOatsError === oats.isOatsError)
      && oats.isOatsError(error),
    code: error.code,
    exitCode: error.exitCode,
  }));
})();
`;
}

let project = "";

/** The package's runtime dependencies and theirs, as package-lock.json paths (node_modules/<name>). */
function dependencyClosure(): string[] {
  const lock = JSON.parse(readFileSync(join(REPO, "package-lock.json"), "utf8")) as {
    packages: Record<string, { dependencies?: Record<string, string> }>;
  };
  const seen = new Set<string>();
  const visit = (name: string) => {
    const path = `node_modules/${name}`;
    if (seen.has(path) || lock.packages[path] === undefined) return;
    seen.add(path);
    for (const dependency of Object.keys(lock.packages[path]?.dependencies ?? {})) visit(dependency);
  };
  for (const name of Object.keys(PACKAGE.dependencies)) visit(name);
  return [...seen];
}

/**
 * A project directory with the tarball installed by npm, offline. There is no registry here: the
 * dependencies npm would fetch are copied (never linked: npm prunes inside what it finds in
 * node_modules) from this checkout's node_modules first, so npm finds them satisfied.
 */
function install(): string {
  const base = tempDir("oats-consumer-");
  execFileSync("npm", ["pack", "--ignore-scripts", "--pack-destination", base, REPO], { stdio: "pipe" });
  const tarball = readdirSync(base).find((name) => name.endsWith(".tgz"));
  assert.ok(tarball, "npm pack wrote a tarball");
  const dir = join(base, "project");
  mkdirSync(join(dir, "node_modules"), { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  for (const path of dependencyClosure())
    cpSync(join(MODULES, path.slice("node_modules/".length)), join(dir, path), { recursive: true, dereference: true });
  execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", join(base, tarball)], {
    cwd: dir,
    stdio: "pipe",
  });
  return dir;
}

/** A sub-project of the installed one: its own package.json (module kind) and files. */
function variant(name: string, type: "module" | "commonjs", files: Record<string, string>): string {
  const dir = join(project, name);
  mkdirSync(dir);
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, private: true, type }));
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  return dir;
}

function run(dir: string, file: string): unknown {
  const result = spawnSync(process.execPath, [file, FIXTURE_PAYLOAD], { cwd: dir, encoding: "utf8" });
  assert.equal(result.status, 0, result.stderr);
  assert.doesNotMatch(result.stderr, /Error|Warning/);
  return JSON.parse(result.stdout);
}

/** Type-check and compile the TypeScript sample under `options`, then run what tsc wrote. */
function typescript(name: string, type: "module" | "commonjs", options: Record<string, unknown>): unknown {
  const dir = variant(name, type, {
    "main.ts": SAMPLE_TS,
    "tsconfig.json": JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        strict: true,
        outDir: "out",
        types: ["node"],
        typeRoots: [join(MODULES, "@types")],
        ...options,
      },
      files: ["main.ts"],
    }),
  });
  const tsc = spawnSync(process.execPath, [TSC, "-p", "tsconfig.json"], { cwd: dir, encoding: "utf8" });
  assert.equal(tsc.status, 0, `tsc (${name}):\n${tsc.stdout}${tsc.stderr}`);
  return run(dir, "out/main.js");
}

describe("an installed package, as each kind of consumer meets it", () => {
  before(() => {
    project = install();
  });

  test("npm installed the tarball itself, not a link to this checkout", () => {
    const installed = join(project, "node_modules", PACKAGE.name);
    assert.equal(realpathSync(installed), installed);
    assert.ok(readdirSync(join(installed, "dist")).includes("index.d.ts"));
  });

  test("ESM: import of every entry", () => {
    const dir = variant("esm", "module", {
      "main.js": sampleJs((specifier) =>
        specifier === PACKAGE.name ? `import * as oats from "${specifier}";` : `await import("${specifier}")`,
      ),
    });
    assert.deepEqual(run(dir, "main.js"), EXPECTED);
  });

  test("CommonJS: require of every entry", () => {
    const dir = variant("cjs", "commonjs", {
      "main.js": sampleJs((specifier) =>
        specifier === PACKAGE.name ? `const oats = require("${specifier}");` : `require("${specifier}")`,
      ),
    });
    assert.deepEqual(run(dir, "main.js"), EXPECTED);
  });

  test("TypeScript, module node16, as an ES module", () => {
    assert.deepEqual(typescript("node16-esm", "module", { module: "node16", moduleResolution: "node16" }), EXPECTED);
  });

  test("TypeScript, module node16, as CommonJS", () => {
    assert.deepEqual(typescript("node16-cjs", "commonjs", { module: "node16", moduleResolution: "node16" }), EXPECTED);
  });

  test("TypeScript, module nodenext", () => {
    assert.deepEqual(typescript("nodenext", "module", { module: "nodenext", moduleResolution: "nodenext" }), EXPECTED);
  });

  test("TypeScript, moduleResolution bundler", () => {
    assert.deepEqual(typescript("bundler", "module", { module: "esnext", moduleResolution: "bundler" }), EXPECTED);
  });

  test("engines.node states the oldest Node these consumers ran on", () => {
    const oldest = /^>=(\d+)(?:\.(\d+))?/.exec(PACKAGE.engines.node);
    assert.ok(oldest, "engines.node is >=<major>[.<minor>]");
    const [major, minor] = process.versions.node.split(".").map(Number) as [number, number];
    assert.ok(
      major > Number(oldest[1]) || (major === Number(oldest[1]) && minor >= Number(oldest[2] ?? 0)),
      `this Node ${process.version} satisfies ${PACKAGE.engines.node}`,
    );
  });
});
