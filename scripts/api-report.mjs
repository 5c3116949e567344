// The API report and the API reference, generated from the built declarations (dist/*.d.ts) of every
// entry package.json names. `npm run docs` writes both; test/api-report.test.ts fails when the
// surface changes and api/oats.api.md does not, when a public function takes `unknown`, and when
// an exported function has no TSDoc.
//
//   node scripts/api-report.mjs            write api/oats.api.md and docs/api.md
//   node scripts/api-report.mjs --print    print { report, reference } as JSON, write nothing
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");

/** A parameter may be typed `unknown` only where its TSDoc says so: `@param name any JSON value`. */
function unknownAllowed(doc, parameter) {
  return new RegExp(`@param ${parameter} any JSON value`).test(doc);
}

/** The entries package.json exports, as [subpath, built declaration file]. */
export function entries(root = ROOT) {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  return Object.entries(pkg.exports)
    .filter(([, conditions]) => typeof conditions !== "string")
    .map(([key, conditions]) => [key === "." ? pkg.name : `${pkg.name}/${key.slice(2)}`, join(root, conditions.types)]);
}

const KINDS = [
  [ts.SyntaxKind.FunctionDeclaration, "function"],
  [ts.SyntaxKind.ClassDeclaration, "class"],
  [ts.SyntaxKind.InterfaceDeclaration, "interface"],
  [ts.SyntaxKind.TypeAliasDeclaration, "type"],
  [ts.SyntaxKind.VariableDeclaration, "const"],
  [ts.SyntaxKind.EnumDeclaration, "enum"],
];

/** The declaration's text as the .d.ts says it, without its doc comment. */
function declarationText(node) {
  if (ts.isVariableDeclaration(node)) return `declare const ${node.getText()};`;
  return node
    .getText()
    .replace(/^export declare /, "declare ")
    .replace(/^export /, "");
}

/** Parameter types of a function or of a class's constructor and public methods. */
function parameters(node) {
  const signatures = ts.isClassDeclaration(node)
    ? node.members.filter((member) => ts.isConstructorDeclaration(member) || ts.isMethodDeclaration(member))
    : ts.isFunctionDeclaration(node)
      ? [node]
      : [];
  // A type guard (`value is T`) takes anything by design: telling what it is is its job.
  return signatures
    .filter((signature) => !(signature.type && ts.isTypePredicateNode(signature.type)))
    .flatMap((signature) =>
      signature.parameters.map((parameter) => ({
        name: parameter.name.getText(),
        type: parameter.type?.getText() ?? "",
      })),
    );
}

/** Every export of every entry, with its declaration, whether it is documented and any `unknown` parameter. */
export function surface(root = ROOT) {
  const list = entries(root);
  const program = ts.createProgram(
    list.map(([, file]) => file),
    { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, noEmit: true },
  );
  const checker = program.getTypeChecker();
  const declarations = new Map();
  const result = [];
  for (const [entry, file] of list) {
    const module = checker.getSymbolAtLocation(program.getSourceFile(file));
    const names = [];
    for (const exported of checker.getExportsOfModule(module)) {
      const symbol = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
      const nodes = (symbol.declarations ?? []).filter((node) => KINDS.some(([kind]) => kind === node.kind));
      const where = relative(join(root, "dist"), nodes[0].getSourceFile().fileName).replace(/\.d\.ts$/, ".ts");
      const key = `${where}#${symbol.name}`;
      if (!declarations.has(key)) {
        const docs = nodes.map((node) =>
          ts
            .getJSDocCommentsAndTags(node)
            .map((doc) => doc.getText())
            .join("\n"),
        );
        const doc = docs.find((text) => text.length > 0) ?? "";
        declarations.set(key, {
          key,
          source: `src/${where}`,
          name: symbol.name,
          kind: KINDS.find(([kind]) => kind === nodes[0].kind)[1],
          text: nodes.map(declarationText).join("\n"),
          doc,
          documented: doc.length > 0,
          unknownParameters: nodes
            .flatMap(parameters)
            // An error's cause is anything thrown, as Error's own is.
            .filter((parameter) => /\bunknown\b/.test(parameter.type.replace(/cause\?: unknown;?/, "")))
            .filter((parameter) => !unknownAllowed(doc, parameter.name))
            .map((parameter) => `${parameter.name}: ${parameter.type}`),
        });
      }
      names.push({ name: exported.name, key });
    }
    names.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    result.push({ entry, names });
  }
  return { entries: result, declarations };
}

/** api/oats.api.md: what each entry exports, then every declaration once, without prose. */
export function report(root = ROOT) {
  const { entries: list, declarations } = surface(root);
  const lines = [
    "# oats-retention: API report",
    "",
    "Generated by `npm run docs` (scripts/api-report.mjs) from the built declarations; do not edit.",
    "test/api-report.test.ts fails when the package's surface and this file differ.",
    "",
  ];
  for (const { entry, names } of list) {
    lines.push(`## ${entry}`, "");
    for (const { name, key } of names) {
      const declaration = declarations.get(key);
      const alias = name === declaration.name ? "" : ` (${declaration.name})`;
      lines.push(`- ${declaration.kind} \`${name}\`${alias}: ${declaration.source}`);
    }
    lines.push("");
  }
  lines.push("## Declarations", "");
  for (const key of [...declarations.keys()].sort()) {
    lines.push(`### ${key}`, "", "```ts", declarations.get(key).text, "```", "");
  }
  return `${lines.join("\n").trimEnd()}\n`;
}

/** docs/api.md: the reference a reader follows, each export with its TSDoc and declaration. */
export function reference(root = ROOT) {
  const { entries: list, declarations } = surface(root);
  const lines = [
    "# API reference",
    "",
    "Generated by `npm run docs` from the TSDoc of the package's built declarations; do not edit.",
    "Each entry below is an import path of the package; the root entry holds every layer's names.",
    "",
  ];
  for (const { entry } of list) lines.push(`- [\`${entry}\`](#${entry.replace(/[^a-z0-9-]/g, "")})`);
  lines.push("");
  const shown = new Set();
  for (const { entry, names } of list) {
    lines.push(`## ${entry}`, "");
    for (const { name, key } of names) {
      const declaration = declarations.get(key);
      if (shown.has(`${entry}:${key}`)) continue;
      shown.add(`${entry}:${key}`);
      if (entry !== list[0].entry) {
        lines.push(`- \`${name}\`: see [\`${declaration.name}\`](#${declaration.name.toLowerCase()})`);
        continue;
      }
      const doc = declaration.doc
        .replace(/^\/\*\*\s?/, "")
        .replace(/\s*\*\/$/, "")
        .split("\n")
        .map((line) => line.replace(/^\s*\* ?/, ""))
        .join("\n")
        .trim();
      lines.push(`### ${name}`, "", "```ts", declaration.text, "```", "", doc || "_Undocumented._", "");
    }
    lines.push("");
  }
  return `${lines.join("\n").trimEnd()}\n`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const generated = { report: report(), reference: reference() };
  if (process.argv.includes("--print")) process.stdout.write(JSON.stringify(generated));
  else {
    mkdirSync(join(ROOT, "api"), { recursive: true });
    writeFileSync(join(ROOT, "api/oats.api.md"), generated.report);
    writeFileSync(join(ROOT, "docs/api.md"), generated.reference);
  }
}
