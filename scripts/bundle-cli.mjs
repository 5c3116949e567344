/**
 * Bundles the CLI (src/cli/main.ts with commander, zod, proper-lockfile and
 * the library it loads) into dist/cli/bundle/: oats.mjs and the chunks its
 * dynamic imports load. `npm run build` runs it after tsc; dist/cli/bin.js
 * imports the bundle for everything but a lone --version.
 *
 * Why: unbundled, `oats verify` opened about 220 module files (zod alone 99)
 * and spent 70-150 ms resolving and loading them before any work; cold, each
 * file is a disk read. Chunks keep the CLI lazy: a command loads only the
 * chunks its imports reach (`oats digest` loads neither zod nor the store).
 *
 * The library (dist/index.js and the rest of tsc's output) is unchanged; the
 * worker threads and the run guard still start from tsc's files, found
 * through import.meta.url (see importMetaUrl below).
 */
import { build } from "esbuild";
import { readFile, rm } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const src = join(root, "src");
const outdir = join(root, "dist", "cli", "bundle");

/**
 * In a bundle, import.meta.url is the chunk's URL, not the source file's:
 * `new URL("./digest-worker.js", import.meta.url)` (parallel/pool.ts),
 * `./run-guard.mjs` (captures/node-guard.ts) and `../../package.json`
 * (cli/version.ts) would all miss. Each source file's import.meta.url
 * becomes the URL of tsc's output for that file, computed from the chunk's
 * own URL, so the installed package can live anywhere.
 */
const importMetaUrl = {
  name: "import-meta-url",
  setup(b) {
    b.onLoad({ filter: /\.(ts|mjs)$/ }, async (args) => {
      if (!args.path.startsWith(src + sep)) return undefined;
      let text = await readFile(args.path, "utf8");
      if (text.includes("import.meta.url")) {
        const compiled = join(root, "dist", relative(src, args.path)).replace(/\.ts$/, ".js");
        const spelled = relative(outdir, compiled).split(sep).join("/");
        text = text.replaceAll("import.meta.url", `new URL(${JSON.stringify(spelled)}, import.meta.url).href`);
      }
      // `import { z } from "zod"` binds zod's namespace object as a value, so
      // the bundler keeps all of it, 40-odd locales included (366 KB of the
      // 755 KB zod chunk). Imported as a namespace, `z.object(...)` is a
      // static reference and only what is used is kept. The source only ever
      // reads properties of z (a test checks the locales stay out).
      text = text.replaceAll('import { z } from "zod";', 'import * as z from "zod";');
      return { contents: text, loader: args.path.endsWith(".ts") ? "ts" : "js" };
    });
  },
};

await rm(outdir, { recursive: true, force: true });
await build({
  absWorkingDir: root,
  entryPoints: { oats: join(src, "cli", "main.ts") },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  splitting: true,
  outdir,
  outExtension: { ".js": ".mjs" },
  chunkNames: "chunk-[hash]",
  // commander, proper-lockfile and graceful-fs are CommonJS and require() node builtins.
  banner: { js: 'import { createRequire as __oatsCreateRequire } from "node:module"; const require = __oatsCreateRequire(import.meta.url);' },
  plugins: [importMetaUrl],
  logLevel: "warning",
});
