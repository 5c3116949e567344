/**
 * The package as a consumer meets it (dist/; `npm run build` first): loaded
 * with require() as well as import, under its own name, from a real child
 * process; a LICENSE that ships; and `oats` on PATH through a global install.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { FIXTURE_PAYLOAD, REPO, tempDir } from "./helpers.js";

const PACKAGE = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as {
  name: string;
  version: string;
  license: string;
  files: string[];
  exports: Record<string, unknown>;
};
const EXEC = "oats.tree-exec.v1:sha256-82f8a3ffa30e6a05a161d469ff412e364cf55bfd02e74bc6114810f9c95c2a45";

/** A consumer project whose node_modules holds this package under its name. */
function consumer(): string {
  const dir = tempDir("oats-consumer-");
  mkdirSync(join(dir, "node_modules"));
  symlinkSync(REPO, join(dir, "node_modules", PACKAGE.name));
  return dir;
}

describe("require() and import", () => {
  test("require('oats-retention') and require('oats-retention/retention') load the library in a CommonJS child", () => {
    const dir = consumer();
    writeFileSync(
      join(dir, "main.cjs"),
      `const oats = require(${JSON.stringify(PACKAGE.name)});
const retention = require(${JSON.stringify(`${PACKAGE.name}/retention`)});
(async () => {
  const digest = await oats.digestTree(${JSON.stringify(FIXTURE_PAYLOAD)});
  const esm = await import(${JSON.stringify(PACKAGE.name)});
  console.log(JSON.stringify({
    digest: "oats.tree-exec.v1:" + digest["oats.tree-exec.v1"],
    same: esm.OatsError === oats.OatsError && retention.retainTree === oats.retainTree,
    error: new oats.OatsError("artifact-not-found", "x", {}).exitCode,
  }));
})();
`,
    );
    const run = spawnSync(process.execPath, ["main.cjs"], { cwd: dir, encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), { digest: EXEC, same: true, error: 3 });
    assert.doesNotMatch(run.stderr, /Error/);
  });

  test("node -e 'require(...)' works too, and import keeps working", () => {
    const dir = consumer();
    const required = execFileSync(
      process.execPath,
      ["-e", `console.log(typeof require(${JSON.stringify(PACKAGE.name)}).retainTree)`],
      { cwd: dir, encoding: "utf8" },
    );
    assert.equal(required, "function\n");
    const imported = execFileSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { retainTree } from ${JSON.stringify(PACKAGE.name)}; console.log(typeof retainTree)`,
      ],
      { cwd: dir, encoding: "utf8" },
    );
    assert.equal(imported, "function\n");
  });
});

describe("what ships", () => {
  test("an MIT LICENSE, as package.json says, listed in files", () => {
    assert.equal(PACKAGE.license, "MIT");
    assert.ok(PACKAGE.files.includes("LICENSE"));
    const text = readFileSync(join(REPO, "LICENSE"), "utf8");
    assert.match(text, /^MIT License\n/);
    assert.match(text, /Permission is hereby granted, free of charge/);
  });

  test("a global install puts `oats` on PATH (npm install -g <checkout>, offline)", (t) => {
    if (spawnSync("npm", ["--version"]).status !== 0)
      return t.skip("npm is not installed here: the PATH instructions cannot be exercised");
    const prefix = tempDir("oats-prefix-");
    execFileSync(
      "npm",
      ["install", "-g", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", prefix, REPO],
      { stdio: "pipe" },
    );
    const bin = join(prefix, "bin", "oats");
    assert.ok(existsSync(bin));
    const run = spawnSync("oats", ["version"], {
      env: { ...process.env, PATH: `${join(prefix, "bin")}:${process.env["PATH"]}` },
      encoding: "utf8",
    });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, `${PACKAGE.version}\n`);
  });
});
