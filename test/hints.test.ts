/**
 * Every hint names help that ships. A user meets oats's pointers to further help in the second line of an error
 * (src/cli/support/*remedies.ts, render.ts), in the command help (docs/cli.md is that help, generated and checked
 * by cli-docs.test.ts) and in the schemas `oats schema` prints. Each pointer must name an `oats help <command>` (or
 * `oats <command> --help`) that exists, or a document the package ships (package.json "files"): never a file only
 * a clone of the repository has.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, normalize, relative } from "node:path";
import { describe, test } from "node:test";
import { REPO } from "./helpers.js";

const FILES = (JSON.parse(readFileSync(join(REPO, "package.json"), "utf8")) as { files: string[] }).files;
const CLI_MD = readFileSync(join(REPO, "docs/cli.md"), "utf8");
/** The commands `oats help …` answers: the headings of the generated reference. */
const COMMANDS = new Set([...CLI_MD.matchAll(/^#{2,3} oats (.+)$/gm)].map((m) => m[1]!.trim()));

function shipped(path: string): boolean {
  return FILES.some((entry) => {
    const e = entry.replace(/^\.\//, "").replace(/\/$/, "");
    return path === e || path.startsWith(`${e}/`);
  });
}

/** The pointers in a text, each with what is wrong with it (null when it names help that ships). */
export function pointers(text: string): { pointer: string; problem: string | null }[] {
  const found: { pointer: string; problem: string | null }[] = [];
  for (const [written] of text.matchAll(/\bdocs\/[\w./-]*\w/g)) {
    const path = normalize(written);
    const problem = !existsSync(join(REPO, path))
      ? "no such file"
      : !shipped(path)
        ? 'not in the package (package.json "files")'
        : null;
    found.push({ pointer: written, problem });
  }
  for (const m of text.matchAll(/\boats help ([a-z][a-z-]*(?: [a-z][a-z-]*)?)/g))
    found.push({ pointer: m[0], problem: helpProblem(m[1]!) });
  for (const m of text.matchAll(/\boats ([a-z][a-z-]*(?: [a-z][a-z-]*)?) --help\b/g))
    found.push({ pointer: m[0], problem: helpProblem(m[1]!) });
  for (const m of text.matchAll(/\bman oats\b/g))
    found.push({ pointer: m[0], problem: shipped("man/oats.1") ? null : "man/oats.1 is not in the package" });
  return found;
}

function helpProblem(words: string): string | null {
  // `oats help resolution verify`, or `oats help fsck` followed by prose: the longest prefix that is a command.
  const parts = words.split(" ");
  for (let n = parts.length; n > 0; n--) if (COMMANDS.has(parts.slice(0, n).join(" "))) return null;
  return `no command ${JSON.stringify(parts[0])} answers oats help`;
}

/** Source text without its comments: what the program can print. */
function code(file: string): string {
  return readFileSync(file, "utf8")
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/^\s*\/\/.*$/gm, "");
}

function tsFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return tsFiles(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** Every text a user can be shown: the program's strings, its help and the schemas it prints. */
function userTexts(): { where: string; text: string }[] {
  const texts = tsFiles(join(REPO, "src")).map((file) => ({ where: relative(REPO, file), text: code(file) }));
  texts.push({ where: "docs/cli.md (the command help)", text: CLI_MD });
  for (const name of readdirSync(join(REPO, "docs/design")).filter((n) => n.endsWith(".schema.json")))
    texts.push({ where: `docs/design/${name}`, text: readFileSync(join(REPO, "docs/design", name), "utf8") });
  return texts;
}

describe("every hint names help that ships", () => {
  test("each pointer in the program's text, help and schemas names an oats help command or a shipped doc", () => {
    const problems: string[] = [];
    const seen = new Set<string>();
    for (const { where, text } of userTexts()) {
      for (const { pointer, problem } of pointers(text)) {
        seen.add(pointer);
        if (problem) problems.push(`${where}: ${pointer}: ${problem}`);
      }
    }
    assert.deepEqual(problems, []);
    // The scan sees the hints it is about (an fsck finding's and a registry refusal's, and the help's own).
    for (const pointer of ["docs/design/fsck.md", "docs/design/fleet.md", "oats help resolution verify"])
      assert.ok(seen.has(pointer), `the scan found ${pointer}`);
  });

  test("the check refuses a doc the package does not ship, a missing doc and a command that does not exist", () => {
    const problems = (text: string) => pointers(text).map((p) => p.problem);
    assert.deepEqual(problems("see docs/design/fsck.md or `oats help fsck`, `oats run show --help`, man oats"), [
      null,
      null,
      null,
      null,
    ]);
    assert.match(String(problems(`see ${"docs"}/design/nothing-here.md`)[0]), /no such file/);
    assert.match(String(problems("see docs/../test/helpers.ts")[0]), /not in the package/);
    assert.match(String(problems("run `oats help frobnicate`")[0]), /no command "frobnicate"/);
    assert.match(String(problems("run `oats frobnicate --help`")[0]), /no command "frobnicate"/);
  });

  test("every help topic a hint names is answered by the built CLI (docs/cli.md is its help)", () => {
    for (const topic of ["fsck", "repair", "resolution verify", "run seal", "push"])
      assert.ok(COMMANDS.has(topic), topic);
  });
});
