/**
 * The package as npm packs it: the files `npm pack` would put in the
 * tarball (from the build in dist/, as `npm pack` leaves it), what they may
 * be, how large they may grow, the metadata an installer and a registry read,
 * and the install script that builds the native addon on the machine that
 * installs the package (scripts/build-native.mjs). Nothing in the tarball is
 * made for one machine: no V8 code cache, no compiled addon.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { loadAddonFile } from "../src/engine/native-reads.js";
import { REPO, tempDir } from "./helpers.js";

interface Packed {
  readonly size: number;
  readonly unpackedSize: number;
  readonly entryCount: number;
  readonly files: readonly { readonly path: string; readonly size: number }[];
}

/** What `npm pack` would write, from the build as it is (prepare, which builds, is not run again). */
function dryRun(): Packed {
  assert.ok(existsSync(join(REPO, "dist/cli/bin.js")), "dist/ is missing: run npm run build first");
  const out = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
    cwd: REPO,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  return (JSON.parse(out) as Packed[])[0]!;
}

/** The only places a shipped file may be: the build, the addon's sources and build script, the man page, the docs. */
const ALLOWED = [
  /^dist\//,
  /^native\/[\w-]+\.[ch]$/,
  /^native\/include\/[\w.-]+$/,
  /^scripts\/build-native\.mjs$/,
  /^man\/[\w.-]+\.\d$/,
  /^docs\/[\w/.-]+\.(md|schema\.json)$/,
  /^(README\.md|LICENSE|CHANGELOG\.md|package\.json)$/,
];

/** What must never ship, each with the reason a listing is refused for. */
const FORBIDDEN: readonly [RegExp, string][] = [
  [/(^|\/)(test|tests|__tests__|fixtures)\/|\.(test|spec)\.[cm]?[jt]sx?$/, "a test"],
  [/(^|\/)bench(es)?\/|(^|\/)bench[\w-]*\.[cm]?[jt]s$/, "a benchmark"],
  [/probe/i, "a probe"],
  [/\.log$|(^|\/)logs?\/|-log\.(md|txt)$/i, "a log"],
  [/\.cache$|(^|\/)code-cache\//, "a V8 code cache (made on first use, for one machine)"],
  [/\.(node|so|dylib|dll|o|a)$/, "compiled native code (built at install, for one machine)"],
  [/(^|\/)(scratch|tmp|\.tmp)\/|\.tmp$|~$|\.swp$|\.orig$|\.rej$/, "scratch"],
  [/\.tsbuildinfo$|(^|\/)src\/|\.map$/, "build input or debugging output"],
];

/** Why a tarball of these paths is refused: one line per path, empty when none. */
function listingProblems(paths: readonly string[]): string[] {
  const problems: string[] = [];
  for (const path of paths) {
    const forbidden = FORBIDDEN.find(([pattern]) => pattern.test(path));
    if (forbidden) problems.push(`${path}: ${forbidden[1]}`);
    else if (!ALLOWED.some((pattern) => pattern.test(path))) problems.push(`${path}: not a file the package ships`);
  }
  return problems;
}

/** The budget: the tarball, what it unpacks to, and how many files. Past it, look at what grew before raising it
 * (the TSDoc of every public function ships in the declarations and docs/api.md). */
const BUDGET = { size: 1_500_000, unpackedSize: 5_500_000, entryCount: 900 };

type Manifest = Record<string, unknown>;

/** Every path a manifest's exports, main, types, bin and man name (strings anywhere in the exports tree). */
function namedPaths(pkg: Manifest): string[] {
  const strings = (value: unknown): string[] =>
    typeof value === "string"
      ? [value]
      : value && typeof value === "object"
        ? Object.values(value).flatMap(strings)
        : [];
  return [pkg["main"], pkg["types"], pkg["exports"], pkg["bin"], pkg["man"]]
    .flatMap(strings)
    .map((path) => path.replace(/^\.\//, ""));
}

/** Why this manifest, packed with these files, is not complete: one line per field, empty when it is. */
function metadataProblems(pkg: Manifest, shipped: ReadonlySet<string>, read: (path: string) => string): string[] {
  const problems: string[] = [];
  const description = pkg["description"];
  if (typeof description !== "string" || description.trim().length < 30) problems.push("description: a sentence");
  const keywords = pkg["keywords"];
  if (
    !Array.isArray(keywords) ||
    keywords.length < 5 ||
    new Set(keywords).size !== keywords.length ||
    !keywords.every((word) => typeof word === "string" && /^[a-z0-9][a-z0-9-]*$/.test(word))
  )
    problems.push("keywords: five or more, distinct, lower case");
  if (typeof pkg["license"] !== "string" || !/^[A-Za-z0-9.-]+$/.test(pkg["license"]))
    problems.push("license: an SPDX identifier");
  else if (!shipped.has("LICENSE") || !read("LICENSE").includes(`${pkg["license"]} License`))
    problems.push(`license: LICENSE ships and is the ${pkg["license"]} License`);
  const engines = pkg["engines"] as Manifest | undefined;
  const oldest = typeof engines?.["node"] === "string" ? /^>=\s*(\d+)(?:\.(\d+))?/.exec(engines["node"]) : null;
  if (oldest === null) problems.push("engines.node: >= the oldest Node it runs on");
  const bin = pkg["bin"];
  if (!bin || typeof bin !== "object" || Object.keys(bin).length === 0) problems.push("bin: the CLI");
  else
    for (const [name, path] of Object.entries(bin as Record<string, string>)) {
      const file = path.replace(/^\.\//, "");
      if (shipped.has(file) && !read(file).startsWith("#!/usr/bin/env node\n"))
        problems.push(`bin.${name}: ${file} starts with #!/usr/bin/env node`);
    }
  const exports = pkg["exports"] as Manifest | undefined;
  const root = exports?.["."] as Manifest | undefined;
  if (!root || !["types", "import", "require"].every((kind) => typeof root[kind] === "string"))
    problems.push('exports: "." with types, import and require');
  if (!Array.isArray(pkg["files"])) problems.push("files: the list of what ships");
  if (typeof pkg["type"] !== "string") problems.push("type: module or commonjs");
  if (pkg["private"] === true) problems.push("private: a package that is published");
  for (const path of namedPaths(pkg))
    if (!shipped.has(path)) problems.push(`${path}: named by the manifest and not in the tarball`);
  const install = (pkg["scripts"] as Manifest | undefined)?.["install"];
  if (typeof install === "string")
    for (const script of install.match(/[\w./-]+\.[cm]?js/g) ?? [])
      if (!shipped.has(script)) problems.push(`scripts.install: ${script} is not in the tarball`);
  return problems;
}

/** The dependencies that no shipped JavaScript file imports or requires. */
function unusedDependencies(pkg: Manifest, shipped: readonly string[], read: (path: string) => string): string[] {
  const code = shipped
    .filter((path) => /\.[cm]?js$/.test(path))
    .map(read)
    .join("\n");
  return Object.keys((pkg["dependencies"] as Manifest | undefined) ?? {}).filter((name) => {
    const quoted = `["']${name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}(/[^"']*)?["']`;
    // `from "x"`, `require("x")`, `import("x")`, and `createRequire(import.meta.url)("x")`.
    return !new RegExp(`(from\\s*|require\\(\\s*|import\\(\\s*|\\)\\(\\s*)${quoted}`).test(code);
  });
}

const PKG = JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as Manifest;
const readRepo = (path: string) => readFileSync(join(REPO, path), "utf8");

describe("the tarball", () => {
  const packed = dryRun();
  const paths = packed.files.map(({ path }) => path);

  test(
    "holds only the build, the addon's sources and build script, the man page and the docs: " +
      "no test, bench, probe, log, code cache, compiled addon or scratch",
    () => {
      assert.deepEqual(listingProblems(paths), []);
      // What a user needs is there: the CLI, the library, the man page, what the install script compiles.
      for (const path of [
        "dist/cli/bin.js",
        "dist/cli/bundle/oats.cjs",
        "dist/index.js",
        "dist/index.d.ts",
        "man/oats.1",
        "native/addon.c",
        "native/include/node_api.h",
        "scripts/build-native.mjs",
      ])
        assert.ok(paths.includes(path), `${path} ships`);
      // The checkout's own machine-specific output is there to leave out (the build made it; runs wrote caches).
      assert.ok(existsSync(join(REPO, "dist/native")) || process.platform !== "linux", "the build made dist/native/");
    },
  );

  test(
    "the listing check refuses each kind of file that must not ship, " + "and any file outside the package's places",
    () => {
      const refused = [
        "test/cli.test.ts",
        "dist/cli/cli.test.js",
        "fixtures/packages/hello/README",
        "bench/run.mjs",
        "dist/bench-digest.js",
        "dist/engine/probe-io.js",
        "npm-debug.log",
        "docs/design/work-log.txt",
        "dist/code-cache/node-v20-linux-x64/oats-0123456789abcdef.cache",
        "dist/cli/bundle/oats.cjs.cache",
        "dist/native/oats.node",
        "native/read-small.o",
        "scratch/notes.md",
        "dist/cli/bin.js.orig",
        "tsconfig.build.tsbuildinfo",
        "src/index.ts",
        "dist/index.js.map",
        ".ci/run",
        "scripts/demo.mjs",
      ];
      const problems = listingProblems(refused);
      assert.equal(problems.length, refused.length, problems.join("\n"));
      assert.deepEqual(listingProblems(["dist/cli/bin.js", "native/addon.h", "LICENSE", "man/oats.1"]), []);
    },
  );

  test(
    `keeps its size budget: packed ${BUDGET.size} bytes, ` +
      `unpacked ${BUDGET.unpackedSize}, ${BUDGET.entryCount} files`,
    () => {
      const report = `${packed.size} bytes packed, ${packed.unpackedSize} unpacked, ${packed.entryCount} files`;
      assert.ok(packed.size <= BUDGET.size, report);
      assert.ok(packed.unpackedSize <= BUDGET.unpackedSize, report);
      assert.ok(packed.entryCount <= BUDGET.entryCount, report);
    },
  );

  test(
    "its metadata is complete: description, keywords, license, bin, engines, type, exports and files, " +
      "each path it names shipped",
    () => {
      assert.deepEqual(metadataProblems(PKG, new Set(paths), readRepo), []);
      const oldest = /^>=\s*(\d+)\.(\d+)/.exec(String((PKG["engines"] as Manifest)["node"]));
      const [major, minor] = process.versions.node.split(".").map(Number);
      assert.ok(oldest, "engines.node names a major and minor version");
      assert.ok(
        major! > Number(oldest[1]) || (major === Number(oldest[1]) && minor! >= Number(oldest[2])),
        `this Node ${process.version} satisfies engines.node`,
      );
    },
  );

  test(
    "the metadata check refuses a manifest with a field missing or wrong, " + "or naming a file that does not ship",
    () => {
      const shipped = new Set(paths);
      const without = (field: string) => Object.fromEntries(Object.entries(PKG).filter(([name]) => name !== field));
      const cases: [Manifest, RegExp][] = [
        [without("description"), /^description/],
        [{ ...PKG, description: "a tool" }, /^description/],
        [without("keywords"), /^keywords/],
        [{ ...PKG, keywords: ["a", "b", "c", "d", "d"] }, /^keywords/],
        [without("license"), /^license/],
        [{ ...PKG, license: "Apache-2.0" }, /^license: LICENSE ships/],
        [without("bin"), /^bin/],
        [{ ...PKG, bin: { oats: "dist/index.js" } }, /^bin\.oats/],
        [{ ...PKG, bin: { oats: "dist/cli/oats.js" } }, /^dist\/cli\/oats\.js: named by the manifest/],
        [without("engines"), /^engines/],
        [{ ...PKG, engines: { node: "*" } }, /^engines/],
        [without("exports"), /^exports/],
        [{ ...PKG, exports: { ...(PKG["exports"] as Manifest), "./gone": "./dist/gone.js" } }, /^dist\/gone\.js/],
        [without("files"), /^files/],
        [without("type"), /^type/],
        [{ ...PKG, private: true }, /^private/],
        [{ ...PKG, scripts: { install: "node scripts/not-shipped.cjs" } }, /^scripts\.install/],
      ];
      for (const [manifest, expected] of cases) {
        const problems = metadataProblems(manifest, shipped, readRepo);
        assert.ok(
          problems.some((line) => expected.test(line)),
          `${expected}: ${problems.join("; ") || "no problem found"}`,
        );
      }
    },
  );

  test("every dependency it lists is imported by code it ships", () => {
    assert.deepEqual(unusedDependencies(PKG, paths, readRepo), []);
    assert.deepEqual(
      unusedDependencies(
        { dependencies: { ...(PKG["dependencies"] as Manifest), "fs-extra": "^11" } },
        paths,
        readRepo,
      ),
      ["fs-extra"],
    );
  });
});

/** The packed tarball, unpacked: what `npm install` puts in node_modules/oats-retention before its install script. */
function unpacked(): string {
  const dir = tempDir("oats-pack-");
  const out = execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", dir], {
    cwd: REPO,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  const { filename } = (JSON.parse(out) as { filename: string }[])[0]!;
  execFileSync("tar", ["-xzf", join(dir, filename), "-C", dir]);
  return join(dir, "package");
}

/** The package's install script, as npm runs it in the installed package. */
function install(root: string, cc: string) {
  return spawnSync(process.execPath, ["scripts/build-native.mjs", "--install"], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, CC: cc },
  });
}

const compilerRuns = spawnSync(process.env["CC"] || "cc", ["--version"], { stdio: "ignore" }).status === 0;

describe("the install script", { skip: process.platform !== "linux" && "the addon is built on Linux only" }, () => {
  test(
    "Given the unpacked tarball and no compiler, or one that fails after writing part of its output, When the " +
      "install script runs, Then it exits 0, says in one line that digests use the JavaScript reads, leaves no " +
      "addon, and the CLI digests and `oats doctor` says why",
    () => {
      const root = unpacked();
      assert.ok(!existsSync(join(root, "dist/native")), "no addon ships");
      const failing = join(tempDir("oats-cc-"), "cc");
      // A compiler that writes half a file where -o points and fails.
      writeFileSync(
        failing,
        '#!/bin/sh\nwhile [ $# -gt 1 ]; do [ "$1" = -o ] && printf "\\177ELF half" > "$2"; shift; done\nexit 1\n',
      );
      chmodSync(failing, 0o755);
      for (const cc of [join(root, "no-such-compiler"), failing]) {
        const run = install(root, cc);
        assert.equal(run.status, 0, run.stderr);
        const lines = run.stdout.split("\n").filter(Boolean);
        assert.equal(lines.length, 1, run.stdout);
        assert.match(lines[0]!, /^oats-retention: .* failed \(.*\); .*digests use the JavaScript reads$/);
        assert.deepEqual(readdirSync(join(root, "dist/native")), [], `${cc}: nothing is left behind`);
      }
      symlinkSync(join(REPO, "node_modules"), join(root, "node_modules"));
      const digest = spawnSync(process.execPath, ["dist/cli/bin.js", "digest", join(REPO, "fixtures/packages/hello")], {
        cwd: root,
        encoding: "utf8",
        input: "",
      });
      assert.equal(digest.status, 0, digest.stderr);
      assert.equal(digest.stderr, "");
      const doctor = spawnSync(process.execPath, ["dist/cli/bin.js", "--json", "doctor"], {
        cwd: root,
        encoding: "utf8",
      });
      const { nativeReads } = (JSON.parse(doctor.stdout) as { result: { nativeReads: { state: string } } }).result;
      assert.equal(nativeReads.state, "missing");
    },
  );

  test("Given the unpacked tarball and a C compiler, When the install script runs, Then it builds the addon for this " +
    "machine, which loads", { skip: !compilerRuns && "no C compiler here" }, () => {
    const root = unpacked();
    const run = install(root, process.env["CC"] || "cc");
    assert.equal(run.status, 0, run.stderr);
    assert.match(run.stdout, /^oats-retention: built .*dist\/native\/oats\.node\n$/);
    const { status } = loadAddonFile(join(root, "dist/native/oats.node"));
    assert.equal(status.state, "loaded", JSON.stringify(status));
  });

  test("Given a checkout (src/ is there), When the install script runs, Then it leaves the addon to the build", () => {
    const root = tempDir("oats-checkout-");
    for (const dir of ["scripts", "src/cli", "dist/native"]) mkdirSync(join(root, dir), { recursive: true });
    writeFileSync(join(root, "scripts/build-native.mjs"), readRepo("scripts/build-native.mjs"));
    writeFileSync(join(root, "src/cli/bin.ts"), "");
    writeFileSync(join(root, "dist/native/oats.node"), "the build's own addon");
    const run = install(root, "false");
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout, "");
    assert.equal(readFileSync(join(root, "dist/native/oats.node"), "utf8"), "the build's own addon");
  });
});
