/**
 * Bundles the CLI (src/cli/main.ts with commander, zod, proper-lockfile and
 * the library it loads) into one minified, ASCII-only CommonJS script,
 * dist/cli/bundle/oats.cjs, and each command of FAST_COMMANDS
 * (src/cli/main-<command>.ts, the program with that command alone) into one
 * of its own, dist/cli/bundle/oats-<command>.cjs; and lists the modules each
 * holds in dist/cli/bundle-inputs.json. `npm run build` runs it after tsc;
 * dist/cli/bin.js runs a bundle through dist/cli/load-bundle.js for
 * everything but a lone --version. The bundles are portable JavaScript and
 * ship in the package; their V8 code caches are not (what one V8 made on one
 * machine): the first run of each writes its own (load-bundle.ts says where).
 *
 * Why (docs/design/performance.md, "The CLI's start: bundles and code caches"): unbundled, `oats verify`
 * opened about 220 module files (zod alone 99) and spent 70-150 ms
 * resolving, reading and compiling them before any work. One script with a
 * code cache is read in two files and mostly not compiled at all. Modules a
 * command reaches only through `await import()` (the library, zod's schemas)
 * stay lazy inside the bundle: esbuild evaluates them on first import.
 *
 * The library (dist/index.js and the rest of tsc's output) is unchanged.
 * The digest worker is bundled too, as dist/cli/bundle/digest-worker.cjs
 * (no code cache: a worker that loads nothing starts only about 5 ms
 * sooner), which parallel/pool.ts starts when it is there; the run guard
 * and the JavaScript read-ahead workers still start from tsc's files, found
 * through import.meta.url (see sourceUrls below).
 */
import { build } from "esbuild";
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(root, "src");
const outdir = join(root, "dist", "cli", "bundle");

/**
 * In the bundle, import.meta does not exist (CommonJS) and the bundle's own
 * location is not the source file's: `new URL("./digest-worker.js",
 * import.meta.url)` (parallel/pool.ts), `./run-guard.mjs`
 * (captures/node-guard.ts) and `../../package.json` (cli/version.ts) would
 * all miss. Each source file's import.meta.url becomes the URL of tsc's
 * output for that file, computed from the bundle's own path at run time, so
 * the installed package can live anywhere.
 */
const sourceUrls = {
  name: "source-urls",
  setup(b) {
    b.onLoad({ filter: /\.(ts|mjs)$/ }, async (args) => {
      if (!args.path.startsWith(src + sep)) return undefined;
      let text = await readFile(args.path, "utf8");
      // `createRequire(import.meta.url)("x")`, x a package or a builtin, is how the library loads a module only
      // where it is used (proper-lockfile, child_process, worker_threads). As the bundle's own `require("x")` a
      // package stays bundled, evaluated at that call and not when the bundle starts; a builtin stays node's, loaded
      // there too. A relative path (the addon, native-reads.ts) is a file beside tsc's output and stays as it is.
      // The formatter may break the call across lines, so white space inside it is allowed; a call left unrewritten
      // fails the build rather than loading its module some other way.
      const lazyRequire = /createRequire\(import\.meta\.url\)\(\s*("[^"./][^"]*")\s*,?\s*\)/g;
      text = text.replace(lazyRequire, "require($1)");
      if (/createRequire\(import\.meta\.url\)\(\s*"[^"./]/.test(text)) {
        throw new Error(`bundle-cli: a createRequire(import.meta.url) call in ${args.path} was not rewritten`);
      }
      if (text.includes("import.meta.url")) {
        const compiled = join(root, "dist", relative(src, args.path)).replace(/\.ts$/, ".js");
        const spelled = relative(outdir, compiled).split(sep).join("/");
        text = text.replaceAll(
          "import.meta.url",
          `new URL(${JSON.stringify(spelled)}, require("node:url").pathToFileURL(__filename)).href`,
        );
      }
      // `import { z } from "zod"` binds zod's namespace object as a value, so
      // the bundler keeps all of it, 40-odd locales included (366 KB of
      // 755 KB). Imported as a namespace, `z.object(...)` is a static
      // reference and only what is used is kept. The source only ever reads
      // properties of z (a test checks the locales stay out).
      text = text.replaceAll('import { z } from "zod";', 'import * as z from "zod";');
      return { contents: text, loader: args.path.endsWith(".ts") ? "ts" : "js" };
    });
  },
};

/**
 * commander requires child_process when it loads, for the executable
 * subcommands oats never uses: net, dgram and the rest came with it, about
 * 5 ms of every start. Here it is loaded only by a spawn. The build fails if
 * commander stops requiring it as expected, so an upgrade cannot quietly
 * bring the load back.
 */
const CHILD_PROCESS_REQUIRE = "const childProcess = require('node:child_process');";
const lazyChildProcess = {
  name: "lazy-child-process",
  setup(b) {
    b.onLoad({ filter: /[\\/]node_modules[\\/]commander[\\/]lib[\\/]command\.js$/ }, async (args) => {
      const text = await readFile(args.path, "utf8");
      if (!text.includes(CHILD_PROCESS_REQUIRE))
        throw new Error(`${args.path} no longer has ${CHILD_PROCESS_REQUIRE}: look again at lazyChildProcess`);
      // The stand-in has spawn alone: any other use of the module would find nothing there.
      const used = new Set([...text.matchAll(/\bchildProcess\.(\w+)/g)].map((match) => match[1]));
      if ([...used].some((name) => name !== "spawn"))
        throw new Error(
          `${args.path} uses childProcess.${[...used].join(", childProcess.")}: ` +
            `lazyChildProcess stands in for spawn only`,
        );
      return {
        contents: text.replace(
          CHILD_PROCESS_REQUIRE,
          "const childProcess = { spawn: (...args) => require('node:child_process').spawn(...args) };",
        ),
        loader: "js",
      };
    });
  },
};

// The bundles' names, their wrapper and the commands that have one of their own are the loader's (load-bundle.ts).
const { BUNDLE_HEAD, BUNDLE_TAIL, FAST_COMMANDS, STAMP_PREFIX, bundleUrl } = await import(
  pathToFileURL(join(root, "dist", "cli", "load-bundle.js")).href
);
const bundles = [undefined, ...FAST_COMMANDS].map((command) => ({
  command,
  name: basename(fileURLToPath(bundleUrl(command))),
}));
await rm(outdir, { recursive: true, force: true });
const { metafile } = await build({
  absWorkingDir: root,
  // The digest worker too (parallel/pool.ts starts it): one file where tsc's module tree is some twenty, resolved and
  // compiled by every worker before its first job (docs/design/performance.md, "Worker lanes").
  entryPoints: {
    ...Object.fromEntries(
      bundles.map(({ command, name }) => [
        name.slice(0, -".cjs".length),
        join(src, "cli", command === undefined ? "main.ts" : `main-${command}.ts`),
      ]),
    ),
    "digest-worker": join(src, "retention", "parallel", "digest-worker.ts"),
  },
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  outdir,
  outExtension: { ".js": ".cjs" },
  plugins: [sourceUrls, lazyChildProcess],
  // Smaller to read and hash on every start; names stay for stack traces and error names.
  minify: true,
  keepNames: true,
  charset: "ascii",
  metafile: true,
  logLevel: "warning",
  // package.json lists import and require before types on purpose: TypeScript types a require() by the .d.cts
  // beside the .cjs it names (scripts/cjs-types.mjs), and the top "types" serves every other tool.
  logOverride: { "package.json": "silent" },
});
// load-bundle.ts reads a bundle as latin1, which is its text only while every byte is ASCII; the CommonJS wrapper goes
// into the file, so that each start compiles the file's text as it is read (load-bundle.ts, BUNDLE_HEAD). Right after
// the wrapper's head, a comment line stamps the package version and a digest of the text: they name the bundle's code
// cache (load-bundle.ts, codeCacheName), so a cache of another build is never handed to V8.
const { version } = JSON.parse(await readFile(join(root, "package.json"), "utf8"));
const held = {};
for (const { name } of bundles) {
  const emitted = await readFile(join(outdir, name));
  const wide = emitted.findIndex((byte) => byte > 0x7f);
  if (wide !== -1) throw new Error(`dist/cli/bundle/${name} has a byte that is not ASCII at offset ${wide}`);
  const digest = createHash("sha256").update(emitted).digest("hex").slice(0, 16);
  writeFileSync(
    join(outdir, name),
    Buffer.concat([
      Buffer.from(`${BUNDLE_HEAD}${STAMP_PREFIX}${version} ${digest}\n`, "latin1"),
      emitted,
      Buffer.from(BUNDLE_TAIL, "latin1"),
    ]),
  );
  // What the bundle holds, module by module (minified, it names none): the files with bytes in the output, not every
  // file esbuild read.
  const output = Object.entries(metafile.outputs).find(([path]) => path.endsWith(`/${name}`))[1];
  held[name] = Object.entries(output.inputs)
    .filter(([, input]) => input.bytesInOutput > 0)
    .map(([path]) => path)
    .sort();
}
if (!(await readFile(join(outdir, "digest-worker.cjs"), "utf8")).includes("markLaneWorker"))
  throw new Error("dist/cli/bundle/digest-worker.cjs is not the digest worker");
writeFileSync(join(root, "dist", "cli", "bundle-inputs.json"), `${JSON.stringify(held, null, 1)}\n`);
