// The declarations of the CommonJS entries (dist/**/*.d.cts), written after tsc: each is the ES module's own
// declarations, names and types alike, so a TypeScript caller that compiles to require() (module node16 in a
// CommonJS package) types against the same surface an importer does. tsc's own output for a .cjs entry would
// carry the values alone.
import { readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(fileURLToPath(new URL("..", import.meta.url)));
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
for (const [key, conditions] of Object.entries(pkg.exports)) {
  if (typeof conditions === "string") continue;
  if (!conditions.require?.endsWith(".cjs") || !conditions.import?.endsWith(".js"))
    throw new Error(`exports["${key}"]: a require (.cjs) and an import (.js) entry`);
  const esm = `./${basename(conditions.import)}`;
  const text = `import type * as entry from "${esm}" with { "resolution-mode": "import" };\n` + "export = entry;\n";
  writeFileSync(join(root, conditions.require.replace(/\.cjs$/, ".d.cts")), text);
}
