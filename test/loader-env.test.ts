/**
 * The loader table (captures/loader-env.ts) against the runtimes' own
 * documentation on this machine, and the loader rule (captures/loader-paths.ts)
 * on real trees: a file a loader variable names must lie inside the
 * executable tree, and dispatch rewrites it to the run copy.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import { isLoaderEnvName, LOADER_VARIABLES, loaderVariable } from "../src/captures/loader-env.js";
import { checkLoaderEnvironment, placeLoaderEnvironment } from "../src/captures/loader-paths.js";
import { joinNodeOptions, nodeOptionKind, splitNodeOptions } from "../src/captures/node-options.js";
import { tempDir } from "./helpers.js";

/** The names a document lists that the table has no row for (a family member without one counts as missing). */
function unclassified(names: Iterable<string>): string[] {
  return [...names].filter((name) => {
    const row = loaderVariable(name);
    return row === null || row.kind === "unknown";
  });
}

/** A man page as text, or null when man or the page is not installed. */
function manPage(section: string, page: string): string | null {
  const result = spawnSync("man", [section, page], {
    encoding: "utf8",
    env: { ...process.env, MANWIDTH: "200", MAN_KEEP_FORMATTING: "0" },
  });
  return result.status === 0 && result.stdout.length > 0 ? result.stdout.replace(/.\x08/g, "") : null;
}

describe("the loader table names its sources and covers what they list", () => {
  test("every row names its runtime, its source document and a kind", () => {
    for (const row of LOADER_VARIABLES) {
      assert.ok(row.runtime.length > 0 && row.source.length > 0, row.name);
      assert.ok(row.kind !== "unknown", row.name);
      if (row.kind === "paths") assert.ok((row.separators ?? "").length > 0, `${row.name}: separators`);
    }
  });

  test("Given `node --help` on this machine, Then every environment variable it lists is classified", () => {
    const help = execFileSync(process.execPath, ["--help"], { encoding: "utf8" });
    const section = help.slice(help.indexOf("Environment variables:"));
    assert.ok(section.length > 0, "node --help has an Environment variables section");
    const names = [...section.matchAll(/^([A-Z][A-Z0-9_]+)(?=\s|$)/gm)].map((match) => match[1]!);
    assert.ok(names.includes("NODE_PATH") && names.includes("NODE_EXTRA_CA_CERTS"), names.join(" "));
    assert.deepEqual(unclassified(names), []);
  });

  test("Given this Node's NODE_OPTIONS flags, Then every one has a row in the NODE_OPTIONS grammar", () => {
    const missing = [...process.allowedNodeEnvironmentFlags].filter((flag) => nodeOptionKind(flag) === null);
    assert.deepEqual(missing, []);
    assert.equal(nodeOptionKind("--require"), "module");
    assert.equal(nodeOptionKind("--openssl-config"), "path");
    assert.equal(nodeOptionKind("--experimental_loader"), "module", "Node reads _ as -");
  });

  test("Given `python3 --help-env`, Then every variable it lists is classified", (t) => {
    const result = spawnSync("python3", ["--help-env"], { encoding: "utf8" });
    if (result.status !== 0) return t.skip("python3 --help-env is not available here");
    const names = [...result.stdout.matchAll(/^(PYTHON[A-Z0-9_]*)/gm)].map((match) => match[1]!);
    assert.ok(names.includes("PYTHONPATH"), names.join(" "));
    assert.deepEqual(unclassified(names), []);
  });

  test("Given ld.so(8), Then every LD_ variable of its ENVIRONMENT section is classified", (t) => {
    const page = manPage("8", "ld.so");
    if (page === null) return t.skip("ld.so(8) is not installed here");
    const section = page.slice(page.indexOf("ENVIRONMENT"), page.indexOf("\nFILES"));
    const names = [...section.matchAll(/^\s{4,}(LD_[A-Z0-9_]+)\b/gm)].map((match) => match[1]!);
    assert.ok(names.includes("LD_PRELOAD") && names.includes("LD_AUDIT"), names.join(" "));
    assert.deepEqual(unclassified(names), []);
  });

  test("Given openssl-env(7), Then every variable it lists is classified", (t) => {
    const page = manPage("7ssl", "openssl-env") ?? manPage("7", "openssl-env");
    if (page === null) return t.skip("openssl-env(7) is not installed here");
    const section = page.slice(page.indexOf("DESCRIPTION"), page.indexOf("COPYRIGHT"));
    const names = [...section.matchAll(/^\s{4,8}([A-Z][A-Za-z0-9_]+(?:, [A-Z][A-Za-z0-9_]+)*)\s*$/gm)].flatMap(
      (match) => match[1]!.split(", "),
    );
    assert.ok(names.includes("OPENSSL_CONF") && names.includes("OPENSSL_MODULES"), names.join(" "));
    assert.deepEqual(unclassified(names), []);
  });

  test("loader variables: every row but an inert one, and an unlisted member of a family", () => {
    for (const name of ["OPENSSL_CONF", "OPENSSL_MODULES", "OPENSSL_ENGINES", "SSL_CERT_FILE", "NODE_OPTIONS"])
      assert.equal(isLoaderEnvName(name), true, name);
    for (const name of ["LD_NEW_THING", "PYTHONNEWTHING", "OPENSSL_NEW", "GIT_CONFIG_KEY_0", "DYLD_X"])
      assert.equal(isLoaderEnvName(name), true, name);
    for (const name of ["TZ", "NO_COLOR", "UV_THREADPOOL_SIZE", "PATH", "HOME", "NODE_ENV", "LOG_LEVEL"])
      assert.equal(isLoaderEnvName(name), false, name);
    assert.equal(loaderVariable("LD_NEW_THING")?.kind, "unknown");
    assert.equal(loaderVariable("GIT_CONFIG_VALUE_3")?.kind, "code");
  });
});

describe("NODE_OPTIONS is split as Node splits it", () => {
  test("quotes, escapes inside quotes, literal backslashes outside", () => {
    assert.deepEqual(splitNodeOptions('--title="a b" --x=a\\b "--y" ""--z'), {
      tokens: ["--title=a b", "--x=a\\b", "--y", "--z"],
    });
    assert.deepEqual(splitNodeOptions('--title="a\\"b\\\\c"'), { tokens: ['--title=a"b\\c'] });
    assert.ok("error" in splitNodeOptions('--title="open'));
  });

  test("Given arguments joined by joinNodeOptions, When a real Node reads them, Then it sees the same ones", () => {
    for (const title of ["a b", 'a"b', "a\\b", 'x "y\\" z', "tab\there"]) {
      const value = joinNodeOptions([`--title=${title}`]);
      assert.deepEqual(splitNodeOptions(value), { tokens: [`--title=${title}`] });
      const seen = execFileSync(process.execPath, ["-p", "process.title"], {
        encoding: "utf8",
        env: { ...process.env, NODE_OPTIONS: value },
      });
      assert.equal(seen.trimEnd(), title);
    }
  });
});

/** A tree with a file, a directory, in-tree symlinks and symlinks out. */
function tree() {
  const base = tempDir("oats-loader-paths-");
  const root = join(base, "tree");
  const outside = join(base, "outside");
  mkdirSync(join(root, "conf"), { recursive: true });
  mkdirSync(join(root, "lib", "deep"), { recursive: true });
  mkdirSync(join(root, "mods"), { recursive: true });
  mkdirSync(join(root, "bad"), { recursive: true });
  mkdirSync(outside);
  writeFileSync(join(outside, "evil.so"), "");
  writeFileSync(join(root, "conf", "openssl.cnf"), "");
  writeFileSync(join(root, "lib", "hook.js"), "");
  writeFileSync(join(root, "lib", "deep", "x.so"), "");
  symlinkSync("deep/x.so", join(root, "lib", "inside.so"));
  symlinkSync("../lib", join(root, "conf", "lib-again"));
  symlinkSync(join(outside, "evil.so"), join(root, "bad", "abs-out.so"));
  symlinkSync("../../outside/evil.so", join(root, "bad", "climb-out.so"));
  symlinkSync(outside, join(root, "out-dir"));
  symlinkSync(join(outside, "evil.so"), join(root, "mods", "legacy.so"));
  return { root, outside };
}

function refused(reason: string, variable: string, check: (error: OatsError) => void = () => {}) {
  return (error: unknown) => {
    assert.ok(error instanceof OatsError, String(error));
    assert.equal(error.code, "invalid-input", error.message);
    assert.equal(error.details["reason"], reason, error.message);
    assert.equal(error.details["variable"], variable);
    assert.ok(error.message.includes(variable), error.message);
    check(error);
    return true;
  };
}

describe("the loader rule on a real tree", () => {
  test("Given paths inside the tree, When placed for dispatch, Then each is rewritten to its place in the root", () => {
    const { root } = tree();
    const placed = placeLoaderEnvironment(
      {
        OPENSSL_CONF: "conf/openssl.cnf",
        LD_PRELOAD: "lib/inside.so lib/deep/x.so",
        LD_LIBRARY_PATH: "lib;conf/lib-again/deep",
        PYTHONPATH: "conf",
        NODE_OPTIONS: '--max-old-space-size=64 --require ./lib/hook.js --import=./lib/hook.js --title "a b"',
        PATH: "/usr/bin",
        LD_BIND_NOW: "1",
      },
      root,
    );
    assert.deepEqual(Object.fromEntries(placed), {
      OPENSSL_CONF: join(root, "conf/openssl.cnf"),
      LD_PRELOAD: `${join(root, "lib/deep/x.so")} ${join(root, "lib/deep/x.so")}`,
      LD_LIBRARY_PATH: `${join(root, "lib")}:${join(root, "lib/deep")}`,
      PYTHONPATH: join(root, "conf"),
      NODE_OPTIONS:
        `--max-old-space-size=64 --require ${join(root, "lib/hook.js")} ` +
        `--import=${pathToFileURL(join(root, "lib/hook.js")).href} --title "a b"`,
    });
  });

  test("Given a missing file inside the tree, Then it passes (nothing outside can be read through it)", () => {
    const { root } = tree();
    assert.equal(
      placeLoaderEnvironment({ OPENSSL_CONF: "conf/none.cnf" }, root).get("OPENSSL_CONF"),
      join(root, "conf/none.cnf"),
    );
    // Back out of a missing directory into a symlink out: the normalized path is checked.
    assert.throws(
      () => checkLoaderEnvironment({ OPENSSL_CONF: "none/../bad/abs-out.so" }, root),
      refused("loader-path-symlink-out", "OPENSSL_CONF"),
    );
  });

  for (const [what, env, reason, variable] of [
    ["an absolute path", { OPENSSL_CONF: "/etc/ssl/openssl.cnf" }, "loader-path-outside-tree", "OPENSSL_CONF"],
    ["a path that climbs out", { OPENSSL_MODULES: "lib/../../x" }, "loader-path-outside-tree", "OPENSSL_MODULES"],
    ["a symlink to an absolute path", { LD_PRELOAD: "bad/abs-out.so" }, "loader-path-symlink-out", "LD_PRELOAD"],
    ["a symlink that climbs out", { LD_AUDIT: "bad/climb-out.so" }, "loader-path-symlink-out", "LD_AUDIT"],
    [
      "a path through a symlinked directory out",
      { BASH_ENV: "out-dir/evil.so" },
      "loader-path-symlink-out",
      "BASH_ENV",
    ],
    ["a directory holding a symlink out", { OPENSSL_MODULES: "mods" }, "loader-path-symlink-out", "OPENSSL_MODULES"],
    ["the root, which holds symlinks out", { PYTHONPATH: "." }, "loader-path-symlink-out", "PYTHONPATH"],
    ["one list entry outside", { NODE_PATH: "lib:/usr/lib/node" }, "loader-path-outside-tree", "NODE_PATH"],
    ["an empty list entry", { LD_LIBRARY_PATH: "lib::conf" }, "loader-value-unchecked", "LD_LIBRARY_PATH"],
    ["a token ld.so expands", { LD_LIBRARY_PATH: "$ORIGIN/lib" }, "loader-value-unchecked", "LD_LIBRARY_PATH"],
    ["a command substitution bash runs", { BASH_ENV: "$(touch x)" }, "loader-value-unchecked", "BASH_ENV"],
    ["code", { PS4: "+ " }, "loader-value-unchecked", "PS4"],
    ["options oats does not parse", { RUBYOPT: "-W0" }, "loader-value-unchecked", "RUBYOPT"],
    ["an unlisted member of a family", { LD_FUTURE: "x" }, "loader-value-unchecked", "LD_FUTURE"],
    ["a name that is a path", { PYTHONPLATLIBDIR: "../../x" }, "loader-path-outside-tree", "PYTHONPLATLIBDIR"],
    [
      "--require of an absolute path",
      { NODE_OPTIONS: "--require /tmp/x.js" },
      "loader-path-outside-tree",
      "NODE_OPTIONS",
    ],
    ["-r of a bare specifier", { NODE_OPTIONS: "-r evil" }, "loader-value-unchecked", "NODE_OPTIONS"],
    [
      "--import of a data: module",
      { NODE_OPTIONS: "--import=data:text/javascript,1" },
      "loader-value-unchecked",
      "NODE_OPTIONS",
    ],
    [
      "--import of a file: URL",
      { NODE_OPTIONS: "--import file:///tmp/x.mjs" },
      "loader-value-unchecked",
      "NODE_OPTIONS",
    ],
    [
      "--experimental_loader (Node reads _ as -)",
      { NODE_OPTIONS: "--experimental_loader /x.mjs" },
      "loader-path-outside-tree",
      "NODE_OPTIONS",
    ],
    ["--require of a directory", { NODE_OPTIONS: "--require ./lib" }, "loader-value-unchecked", "NODE_OPTIONS"],
    [
      "--require through a symlink out",
      { NODE_OPTIONS: "--require ./bad/abs-out.so" },
      "loader-path-symlink-out",
      "NODE_OPTIONS",
    ],
    [
      "--openssl-config outside",
      { NODE_OPTIONS: "--openssl-config=/tmp/x.cnf" },
      "loader-path-outside-tree",
      "NODE_OPTIONS",
    ],
    ["an option oats does not know", { NODE_OPTIONS: "--future-preload=x" }, "loader-value-unchecked", "NODE_OPTIONS"],
    ["an argument that is not an option", { NODE_OPTIONS: "./lib/hook.js" }, "loader-value-unchecked", "NODE_OPTIONS"],
    [
      "a value that is another option",
      { NODE_OPTIONS: "--title --require=/x.js" },
      "loader-value-unchecked",
      "NODE_OPTIONS",
    ],
  ] as const) {
    test(`Given ${what}, When checked, Then invalid-input ${reason} naming ${variable}`, () => {
      const { root } = tree();
      assert.throws(() => checkLoaderEnvironment(env, root), refused(reason, variable));
      assert.throws(() => placeLoaderEnvironment(env, root), refused(reason, variable));
    });
  }

  test("Given switches, inert variables and builtins, Then they pass as pinned", () => {
    const { root } = tree();
    const env = {
      LD_BIND_NOW: "1",
      TZ: "UTC",
      NODE_TLS_REJECT_UNAUTHORIZED: "1",
      PYTHONPLATLIBDIR: "lib64",
      NODE_OPTIONS: "--require node:util --test-reporter=spec --inspect=127.0.0.1:0 --no_warnings",
    };
    checkLoaderEnvironment(env, root);
    assert.equal(placeLoaderEnvironment(env, root).size, 0);
  });

  test("Given a run copy whose path holds a list separator, When placed, Then refused rather than split", () => {
    const base = tempDir("oats-loader-colon-");
    const root = join(base, "a:b", "tree");
    mkdirSync(join(root, "lib"), { recursive: true });
    checkLoaderEnvironment({ LD_LIBRARY_PATH: "lib" }, root);
    assert.throws(
      () => placeLoaderEnvironment({ LD_LIBRARY_PATH: "lib" }, root),
      refused("loader-path-unrepresentable", "LD_LIBRARY_PATH"),
    );
    // A single path has no separator to fear; NODE_OPTIONS quotes.
    assert.equal(placeLoaderEnvironment({ OPENSSL_CONF: "lib" }, root).get("OPENSSL_CONF"), join(root, "lib"));
  });
});
