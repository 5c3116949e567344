/**
 * The README is the newcomer's way in, so it is held to its order and its tutorial cannot drift: its sections come in
 * the order a newcomer needs them (what and why, install, a five-minute tutorial, concepts and a glossary, the
 * references), and every `sh` block of the tutorial runs, in order, as an ordinary user in a fresh directory, against
 * the built CLI (dist/cli/bin.js; `npm run build` first). The push and pull step runs against a real registry
 * (test/support/registry.ts) and is skipped by name without one.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { REPO, tempDir } from "./helpers.js";
import { NO_REGISTRY, type Registry, registryBinary, startRegistry } from "./support/registry.js";

const README = readFileSync(join(REPO, "README.md"), "utf8");
const SECTIONS = ["Install", "Tutorial: five minutes", "Concepts and glossary", "Reference"];
const TUTORIAL_PARTS = [
  "Retain, verify, tamper, fsck, repair",
  "Prepare, approve, dispatch, run show",
  "Push and pull",
];
const GLOSSARY = [
  "scope",
  "revision",
  "integrity formats",
  "kept / adopted",
  "composition",
  "principal",
  "sovereign",
  "posture",
  "far side",
  "outbox",
];

/** The text of one `## ` section (without its heading). */
function section(title: string): string {
  const start = README.indexOf(`\n## ${title}\n`);
  assert.ok(start >= 0, `README has a section "${title}"`);
  const rest = README.slice(start + title.length + 5);
  const end = rest.search(/^## /m);
  return end < 0 ? rest : rest.slice(0, end);
}

/** The tutorial's shell blocks, in order: each with whether it needs the registry. A block after a
 * `<!-- not run … -->` comment (installing a registry) is left out. */
function tutorialBlocks(): { code: string; registry: boolean }[] {
  const blocks: { code: string; registry: boolean }[] = [];
  for (const m of section("Tutorial: five minutes").matchAll(/(<!-- not run[^>]*-->\n)?```sh\n([\s\S]*?)```/g)) {
    if (m[1]) continue;
    blocks.push({ code: m[2]!, registry: m[2]!.includes("$REGISTRY") });
  }
  return blocks;
}

describe("README", () => {
  test("its sections come in order: what and why in one paragraph, install, tutorial, concepts, references", () => {
    assert.deepEqual(
      [...README.matchAll(/^## (.+)$/gm)].map((m) => m[1]),
      SECTIONS,
    );
    const intro = README.slice(README.indexOf("\n") + 1, README.indexOf("\n## ")).trim();
    assert.ok(intro.length > 200, "an introduction");
    assert.doesNotMatch(intro, /\n\s*\n/, "the introduction is one paragraph");
    assert.deepEqual(
      [...section("Tutorial: five minutes").matchAll(/^### (.+)$/gm)].map((m) => m[1]),
      TUTORIAL_PARTS,
    );
    const glossary = section("Concepts and glossary");
    assert.deepEqual(
      [...glossary.matchAll(/^- \*\*([^*]+)\*\*/gm)].map((m) => m[1]).filter((term) => GLOSSARY.includes(term!)),
      GLOSSARY.filter((term) => glossary.includes(`**${term}**`)),
    );
    for (const term of GLOSSARY) assert.match(glossary, new RegExp(`^- \\*\\*${term}\\*\\*: `, "m"), term);
  });

  test("install keeps the commands CI runs (npm install, npm test) and says what the demo ends with", () => {
    const install = section("Install");
    assert.match(install, /^npm install\b/m);
    assert.match(install, /^npm test\b/m);
    const ci = readFileSync(join(REPO, ".ci/run"), "utf8");
    assert.match(ci, /^npm ci$/m);
    assert.match(ci, /^npm test$/m);
    // The demo's last command is `oats run show`, and its last line starts with the sentence the README quotes.
    const demo = readFileSync(join(REPO, "scripts/demo.mjs"), "utf8");
    const calls = [...demo.matchAll(/\boats\(\s*\[([^\]]*)\]/g)].map((m) => m[1]!);
    assert.match(calls.at(-1)!, /"run",\s*"show"/);
    assert.match(demo, /"\\nEverything behaved as expected: /);
    assert.match(install, /It ends with `oats run show`/);
    assert.match(install, /`Everything behaved as expected`/);
  });

  test("every document the references name exists", () => {
    const reference = section("Reference");
    const docs = [...reference.matchAll(/\b(docs\/[\w/.-]*\w|CHANGELOG\.md)/g)].map((m) => m[1]!);
    assert.ok(docs.length >= 5);
    for (const doc of docs) assert.ok(existsSync(join(REPO, doc)), doc);
    for (const name of reference.matchAll(/\b([a-z-]+\.md)\b/g)) {
      const inDesign = existsSync(join(REPO, "docs/design", name[1]!)) || existsSync(join(REPO, "docs", name[1]!));
      assert.ok(inDesign || name[1] === "CHANGELOG.md", name[1]);
    }
  });
});

describe("README tutorial", () => {
  let registry: Registry | null = null;
  after(async () => registry?.stop());

  /** Runs the tutorial's blocks in a fresh directory as an ordinary user; `oats` is the built CLI. */
  function runTutorial(withRegistry: boolean) {
    const dir = tempDir("oats-readme-");
    mkdirSync(join(dir, "bin"));
    writeFileSync(
      join(dir, "bin/oats"),
      `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(join(REPO, "dist/cli/bin.js"))} "$@"\n`,
    );
    chmodSync(join(dir, "bin/oats"), 0o755);
    chmodSync(dir, 0o755);
    const root = process.getuid?.() === 0;
    if (root) chownSync(dir, 65534, 65534);
    const blocks = tutorialBlocks().filter((block) => withRegistry || !block.registry);
    const script = `set -eu\n${blocks.map((block) => block.code).join("\n")}`;
    const env: NodeJS.ProcessEnv = {
      PATH: `${join(dir, "bin")}:/usr/bin:/bin`,
      HOME: dir,
      LANG: "C.UTF-8",
      ...(withRegistry && registry ? { REGISTRY: registry.host } : {}),
    };
    const run = spawnSync("bash", ["-c", script], {
      cwd: dir,
      env,
      encoding: "utf8",
      ...(root ? { uid: 65534, gid: 65534 } : {}),
    });
    return { ...run, output: run.stdout + run.stderr, blocks };
  }

  test("retain, verify, tamper, fsck, repair; prepare, approve, dispatch, run show: each runs as shown", () => {
    const run = runTutorial(false);
    assert.ok(run.blocks.length >= 3, "the tutorial's blocks were found");
    assert.equal(run.status, 0, run.output);
    assert.match(run.stdout, /^retained capability hello$/m);
    assert.match(run.stdout, /^kept capability hello|^verified capability hello$/m);
    assert.match(run.stderr, /^oats: integrity-mismatch: capability hello: .*first difference: bin\/hello, content/m);
    assert.match(run.stdout, /^refused: exit 5$/m);
    assert.match(run.stdout, /^fsck: exit 5$/m);
    assert.match(run.stdout, /^repaired capability:hello@oats\.tree-exec\.v1:sha256-[0-9a-f]{64}$/m);
    assert.match(run.stdout, /^prepared capture nightly: resolution sha256-/m);
    assert.match(run.stderr, /^oats: approval-required: /m);
    assert.match(run.stdout, /^refused: exit 6$/m);
    assert.match(run.stdout, /^approved composition nightly oats\.json\.v1:sha256-/m);
    assert.match(run.stdout, /^hello, world$/m);
    assert.match(run.stdout, /^\S+Z out hello, world$/m);
    assert.match(run.stdout, /^# RESULT: OK$/m);
  });

  test("push and pull through a registry, as the README shows them", {
    skip: registryBinary() ? false : NO_REGISTRY,
  }, async () => {
    registry = await startRegistry();
    const run = runTutorial(true);
    assert.ok(
      run.blocks.some((block) => block.registry),
      "the push and pull block was found",
    );
    assert.equal(run.status, 0, run.output);
    assert.match(run.stdout, /^pushed 127\.0\.0\.1:\d+\/oats\/tutorial@sha256:[0-9a-f]{64}$/m);
    assert.match(run.stdout, /^pulled oci:\/\/127\.0\.0\.1:\d+\/oats\/tutorial@sha256:/m);
    assert.match(run.stdout, /^not approved here: capture nightly/m);
    assert.match(run.stdout, /^delivered 1 run to http:\/\/127\.0\.0\.1:\d+\/oats\/runs/m);
  });
});
