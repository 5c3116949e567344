import assert from "node:assert/strict";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, test } from "node:test";
import { REPO, tempDir } from "./helpers.js";
import { checkLayering } from "./support/layering.js";

/** The layers, bottom to top: a layer imports only layers before it (docs/design/foundation.md). */
const LAYERS = [
  "core",
  "engine",
  "retention",
  "ledger",
  "attestation",
  "resolution",
  "acquisition",
  "captures",
  "oci",
  "evidence",
  "fleet",
  "lifecycle",
  "scope",
  "schemas",
  "cli",
];

const SRC = join(REPO, "src");

function writeTree(files: Record<string, string>): string {
  const root = tempDir("oats-layering-");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

describe("layering of src/", () => {
  test(
    "the source tree keeps every rule: no folder cycle, no import up a " +
      "layer, no deep import of a name a layer keeps to itself",
    () => {
      const violations = checkLayering(
        SRC,
        LAYERS.filter((layer) => readdirSync(SRC).includes(layer)),
      );
      assert.deepEqual(violations, []);
    },
  );

  test("docs/design/foundation.md describes every folder under src/, in the order of the layers", () => {
    const foundation = readFileSync(join(REPO, "docs/design/foundation.md"), "utf8");
    const described = [...foundation.matchAll(/^src\/([a-z-]+)\/ /gm)].map((match) => match[1]!);
    const folders = readdirSync(SRC, { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name);
    assert.deepEqual([...described].sort(), [...folders].sort(), "one layout line per folder under src/");
    assert.deepEqual(
      described,
      LAYERS.filter((layer) => folders.includes(layer)),
      "the layout lists the layers bottom to top",
    );
  });

  test("nothing below the CLI prints: no console, and process.stdout or stderr only where a caller asks for it", () => {
    const offenders: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) {
          if (path !== join(SRC, "cli")) walk(path);
        } else if (
          /\.(ts|mjs)$/.test(entry.name) &&
          /\bconsole\.(log|error|warn|info)\(/.test(readFileSync(path, "utf8"))
        ) {
          offenders.push(path);
        }
      }
    };
    walk(SRC);
    assert.deepEqual(offenders, []);
  });
});

describe("the layering check has teeth", () => {
  const base = {
    "low/index.ts": 'export { open } from "./open.js";\n',
    "low/open.ts": "export const open = 1;\nexport const hidden = 2;\n",
    "high/index.ts": 'export { top } from "./top.js";\n',
    "high/top.ts": 'import { open } from "../low/index.js";\nexport const top = open;\n',
  };

  test("a clean tree passes", () => {
    assert.deepEqual(checkLayering(writeTree(base), ["low", "high"]), []);
  });

  test("an import up a layer, and the folder cycle it closes, are refused", () => {
    const root = writeTree({
      ...base,
      "low/open.ts": 'import { top } from "../high/index.js";\nexport const open = 1;\nexport const hidden = top;\n',
    });
    const rules = checkLayering(root, ["low", "high"]).map((violation) => violation.rule);
    assert.deepEqual(rules.sort(), ["cycle", "upward"]);
  });

  test("a deep import of a name the index does not export is refused; one the index exports is allowed", () => {
    const hidden = writeTree({
      ...base,
      "high/top.ts": 'import { hidden } from "../low/open.js";\nexport const top = hidden;\n',
    });
    assert.deepEqual(
      checkLayering(hidden, ["low", "high"]).map((violation) => violation.rule),
      ["deep"],
    );
    const published = writeTree({
      ...base,
      "high/top.ts": 'import { open } from "../low/open.js";\nexport const top = open;\n',
    });
    assert.deepEqual(checkLayering(published, ["low", "high"]), []);
    const whole = writeTree({
      ...base,
      "high/top.ts": 'import * as low from "../low/open.js";\nexport const top = low.open;\n',
    });
    assert.deepEqual(
      checkLayering(whole, ["low", "high"]).map((violation) => violation.rule),
      ["deep"],
    );
  });

  test("a cycle between two subfolders of one layer is refused", () => {
    const root = writeTree({
      ...base,
      "low/a/one.ts": 'import { two } from "../b/two.js";\nexport const one = two;\n',
      "low/b/two.ts": 'import { three } from "../a/three.js";\nexport const two = three;\n',
      "low/a/three.ts": "export const three = 3;\n",
    });
    assert.deepEqual(
      checkLayering(root, ["low", "high"]).map((violation) => [violation.rule, violation.detail]),
      [["cycle", "low/a -> low/b -> low/a"]],
    );
  });

  test("a lazy import() is held to the same rule as a static one", () => {
    const root = writeTree({
      ...base,
      "high/top.ts":
        'export async function top() {\n  const { hidden } = await import("../low/open.js");\n  return hidden;\n}\n',
    });
    assert.deepEqual(
      checkLayering(root, ["low", "high"]).map((violation) => violation.rule),
      ["deep"],
    );
  });

  test("a folder outside the order, a layer without index.ts, and a module importing its own index are refused", () => {
    const root = writeTree({
      ...base,
      "stray/x.ts": "export const x = 1;\n",
      "low/open.ts":
        'import { open as again } from "./index.js";\nexport const open = 1;\nexport const hidden = again;\n',
    });
    const rules = checkLayering(root, ["low", "high", "other"]).map((violation) => violation.rule);
    assert.deepEqual(rules.sort(), ["own-index", "unplaced-folder"]);
    const noIndex = writeTree({ "low/open.ts": "export const open = 1;\n" });
    assert.deepEqual(
      checkLayering(noIndex, ["low"]).map((violation) => violation.rule),
      ["missing-index"],
    );
  });
});

describe("line length", () => {
  test("every line of code is within 120 characters, but for a line that holds a URL", () => {
    const long: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(dir, { withFileTypes: true })) {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) walk(path);
        else if (/\.(ts|mts|mjs|cjs|js)$/.test(entry.name)) {
          readFileSync(path, "utf8")
            .split("\n")
            .forEach((line, index) => {
              if (line.length > 120 && !/https?:\/\//.test(line))
                long.push(`${path.slice(REPO.length + 1)}:${index + 1}`);
            });
        }
      }
    };
    for (const top of ["src", "test", "bench", "scripts"]) walk(join(REPO, top));
    assert.deepEqual(long, []);
  });
});
