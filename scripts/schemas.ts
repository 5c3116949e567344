/**
 * Generate the JSON Schemas of the documented formats into docs/design/
 * (<name>.schema.json) from their zod schemas (src/schemas/json-schema.ts).
 *
 *   npm run schema                        # write every file
 *   npx tsx scripts/schemas.ts --check    # exit 1 when a file is stale
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { SCHEMA_NAMES, formatJsonSchemaText, schemaFileName, type SchemaName } from "../src/schemas/json-schema.js";

export const DESIGN_DIR = join(resolve(import.meta.dirname, ".."), "docs", "design");

export function schemaFile(name: SchemaName): string {
  return join(DESIGN_DIR, schemaFileName(name));
}

let stale = 0;
for (const name of SCHEMA_NAMES) {
  const file = schemaFile(name);
  const text = formatJsonSchemaText(name);
  if (process.argv.includes("--check")) {
    let current = "";
    try {
      current = readFileSync(file, "utf8");
    } catch {
      // missing counts as stale
    }
    if (current !== text) {
      console.error(`${file} is stale; run \`npm run schema\``);
      stale += 1;
    }
  } else {
    writeFileSync(file, text);
    console.error(`wrote ${file}`);
  }
}
process.exitCode = stale ? 1 : 0;
