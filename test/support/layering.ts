import { existsSync, readdirSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import ts from "typescript";

/**
 * The import graph of a source tree, read with the TypeScript compiler, and
 * the rules the layers keep (docs/design/foundation.md):
 *
 * - every folder directly under the root is a layer named in `layers`, with an
 *   index.ts that is its interface to the layers above it;
 * - an import across layers goes down, never up (so no two layers import each
 *   other and no folder cycle can form);
 * - an import across layers goes through the target's index.ts, or names only
 *   what that index.ts exports (a lazy `import()` of one module keeps the CLI's
 *   start small, but may not reach a name the layer keeps to itself);
 * - a module never imports its own layer's index.ts (the index is a facade for
 *   the layers above, and importing it from inside invites load-order cycles);
 * - no cycle among folders at any depth: a layer's own subfolders import each
 *   other one way only, as the layers do.
 *
 * Files directly under the root (the package entries) stand above every layer.
 */

export interface Violation {
  readonly rule: "unplaced-folder" | "missing-index" | "upward" | "deep" | "own-index" | "cycle";
  readonly file: string;
  readonly detail: string;
}

export interface ImportEdge {
  readonly from: string;
  readonly to: string;
  /** The names imported, or null for a namespace, default or `export *` import. */
  readonly names: readonly string[] | null;
}

const ENTRY = "(entry)";

function sourceFiles(root: string): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.(ts|mts)$/.test(entry.name) && !entry.name.endsWith(".d.ts")) files.push(path);
    }
  };
  walk(root);
  return files;
}

function layerOf(root: string, file: string): string {
  const parts = relative(root, file).split(sep);
  return parts.length === 1 ? ENTRY : parts[0]!;
}

function namesOf(node: ts.ImportDeclaration | ts.ExportDeclaration): string[] | null {
  if (ts.isImportDeclaration(node)) {
    const clause = node.importClause;
    if (!clause || clause.name || !clause.namedBindings || ts.isNamespaceImport(clause.namedBindings)) return null;
    return clause.namedBindings.elements.map((element) => (element.propertyName ?? element.name).text);
  }
  if (!node.exportClause || !ts.isNamedExports(node.exportClause)) return null;
  return node.exportClause.elements.map((element) => (element.propertyName ?? element.name).text);
}

/** `const { a, b } = await import("./x.js")` names a and b; any other use of import() names nothing. */
function dynamicNames(call: ts.CallExpression): string[] | null {
  let parent: ts.Node = call.parent;
  if (ts.isAwaitExpression(parent)) parent = parent.parent;
  if (!ts.isVariableDeclaration(parent) || !ts.isObjectBindingPattern(parent.name)) return null;
  return parent.name.elements.map((element) => ((element.propertyName ?? element.name) as ts.Identifier).text);
}

/** Every relative import, export-from and import() in the tree, resolved to the file it names. */
export function importGraph(root: string): { edges: ImportEdge[]; program: ts.Program } {
  const files = sourceFiles(root);
  const options: ts.CompilerOptions = {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
    types: [],
  };
  const program = ts.createProgram(files, options, ts.createCompilerHost(options, true));
  const edges: ImportEdge[] = [];
  for (const file of files) {
    const source = program.getSourceFile(file)!;
    const add = (specifier: string, names: string[] | null) => {
      if (!specifier.startsWith(".")) return;
      edges.push({ from: file, to: resolve(dirname(file), specifier).replace(/\.js$/, ".ts"), names });
    };
    const visit = (node: ts.Node) => {
      if (
        (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
        node.moduleSpecifier &&
        ts.isStringLiteral(node.moduleSpecifier)
      ) {
        add(node.moduleSpecifier.text, namesOf(node));
      } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
        const [argument] = node.arguments;
        if (argument && ts.isStringLiteralLike(argument)) add(argument.text, dynamicNames(node));
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return { edges, program };
}

/** Every violation of the layering rules in the tree under `root`, given the layers bottom to top. */
export function checkLayering(root: string, layers: readonly string[]): Violation[] {
  const violations: Violation[] = [];
  const rank = new Map(layers.map((layer, index) => [layer, index]));
  for (const entry of readdirSync(root, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    if (!rank.has(entry.name))
      violations.push({
        rule: "unplaced-folder",
        file: entry.name,
        detail: `src/${entry.name}/ is not a layer of the order`,
      });
    else if (!existsSync(join(root, entry.name, "index.ts")))
      violations.push({ rule: "missing-index", file: entry.name, detail: `src/${entry.name}/ has no index.ts` });
  }
  const { edges, program } = importGraph(root);
  const checker = program.getTypeChecker();
  const original = (symbol: ts.Symbol) => {
    let current = symbol;
    while (current.flags & ts.SymbolFlags.Alias) current = checker.getAliasedSymbol(current);
    return current;
  };
  const exportsOf = (file: string) => {
    const source = program.getSourceFile(file);
    const symbol = source && checker.getSymbolAtLocation(source);
    return new Map(
      (symbol ? checker.getExportsOfModule(symbol) : []).map((exported) => [exported.name, original(exported)]),
    );
  };
  const layerEdges = new Map<string, Set<string>>();
  const folderEdges = new Map<string, Set<string>>();
  for (const edge of edges) {
    const fromFolder = relative(root, dirname(edge.from)) || ENTRY;
    const toFolder = relative(root, dirname(edge.to)) || ENTRY;
    if (fromFolder !== toFolder && fromFolder !== ENTRY && toFolder !== ENTRY) {
      if (!folderEdges.has(fromFolder)) folderEdges.set(fromFolder, new Set());
      folderEdges.get(fromFolder)!.add(toFolder);
    }
    const from = layerOf(root, edge.from);
    const to = layerOf(root, edge.to);
    const file = relative(root, edge.from);
    const index = join(root, to, "index.ts");
    if (from === to) {
      if (from !== ENTRY && edge.to === index)
        violations.push({ rule: "own-index", file, detail: `imports its own layer's index.ts` });
      continue;
    }
    if (to === ENTRY) {
      violations.push({ rule: "upward", file, detail: `imports the package entry ${relative(root, edge.to)}` });
      continue;
    }
    if (!layerEdges.has(from)) layerEdges.set(from, new Set());
    layerEdges.get(from)!.add(to);
    if (from !== ENTRY && rank.has(from) && rank.has(to) && rank.get(to)! > rank.get(from)!) {
      violations.push({ rule: "upward", file, detail: `${from} imports ${relative(root, edge.to)}, a layer above it` });
    }
    if (edge.to === index) continue;
    const target = relative(root, edge.to);
    if (edge.names === null) {
      violations.push({ rule: "deep", file, detail: `imports ${target} whole; go through ${to}/index.ts` });
      continue;
    }
    const published = exportsOf(index);
    const deep = exportsOf(edge.to);
    for (const name of edge.names) {
      const symbol = deep.get(name);
      if (symbol === undefined || published.get(name) !== symbol) {
        violations.push({
          rule: "deep",
          file,
          detail: `imports ${name} from ${target}, which ${to}/index.ts does not export`,
        });
      }
    }
  }
  // A cycle between layers is also one between their folders: each is said once.
  const said = new Set<string>();
  for (const cycle of [...cycles(layerEdges), ...cycles(folderEdges)]) {
    const detail = cycle.join(" -> ");
    if (said.has(detail)) continue;
    said.add(detail);
    violations.push({ rule: "cycle", file: cycle[0]!, detail });
  }
  return violations;
}

/** Each cycle of the folder graph once, as a path that returns to its start. */
function cycles(graph: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  const found = new Map<string, string[]>();
  const walk = (start: string, node: string, path: string[]) => {
    for (const next of graph.get(node) ?? []) {
      if (next === start) {
        const key = [...path].sort().join(",");
        if (!found.has(key)) found.set(key, [...path, start]);
      } else if (!path.includes(next) && next > start) {
        walk(start, next, [...path, next]);
      }
    }
  };
  for (const start of graph.keys()) walk(start, start, [start]);
  return [...found.values()];
}
