/**
 * Property 7: redaction is wired into the capture path. Every case of the
 * redaction corpus (test/conformance/redaction-corpus.json, the
 * specification of redaction) is printed by a real capture whose record
 * names the case's credentials and whose profile holds its patterns; the log
 * must hold the expected output, and over-masking cases stay untouched. The
 * credential values are looked for in the log file's bytes and the record
 * here, not asked of the driver.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { CaptureRequest, DriverScope, RedactPattern } from "../driver.js";
import { assertRan, captureName, node, sh, texts, type Property } from "./support.js";

type Rule = { name: string; kind: "literal"; value: string } | { name: string; kind: "pattern"; source: string; flags?: string };

interface CorpusCase {
  readonly name: string;
  readonly rules: readonly Rule[];
  readonly input: string;
  readonly expected: string;
}

const HERE = join(import.meta.dirname, "..");
export const CORPUS = join(HERE, "redaction-corpus.json");
const SAMPLE = join(HERE, "redaction-corpus.sample.json");

/** The corpus cases (over-masking cases expect their input back unless they say otherwise). */
export function loadCorpus(): { path: string; cases: CorpusCase[] } {
  const path = existsSync(CORPUS) ? CORPUS : SAMPLE;
  const value = JSON.parse(readFileSync(path, "utf8")) as { cases?: unknown[]; overMasking?: unknown[] };
  const cases: CorpusCase[] = [];
  for (const [list, over] of [
    [value.cases ?? [], false],
    [value.overMasking ?? [], true],
  ] as const) {
    for (const raw of list) {
      const item = raw as Partial<CorpusCase>;
      assert.equal(typeof item.input, "string", `corpus case ${JSON.stringify(raw)}: input is a string`);
      assert.ok(Array.isArray(item.rules), `corpus case ${JSON.stringify(raw)}: rules is a list`);
      const expected = item.expected ?? (over ? item.input : undefined);
      assert.equal(typeof expected, "string", `corpus case ${JSON.stringify(raw)}: expected is a string`);
      assert.ok(!/[\n]/.test(item.input!), `corpus case ${item.name}: one line`);
      cases.push({ name: item.name ?? item.input!, rules: item.rules!, input: item.input!, expected: expected! });
    }
  }
  assert.ok(cases.length > 0, `the corpus ${path} has cases`);
  return { path, cases };
}

/** The capture that configures exactly `rules`: literals as credentials, patterns in the profile. */
function configured(rules: readonly Rule[]): Pick<CaptureRequest, "credentials" | "profile"> {
  const credentials: Record<string, string> = {};
  const redact: RedactPattern[] = [];
  for (const rule of rules) {
    if (rule.kind === "literal") {
      const match = /^credential:([A-Za-z_][A-Za-z0-9_]*)$/.exec(rule.name);
      assert.ok(match, `a literal rule is named credential:<ENV_NAME>: ${rule.name}`);
      credentials[match[1]!] = rule.value;
    } else {
      const match = /^profile:(.+)$/.exec(rule.name);
      assert.ok(match, `a pattern rule is named profile:<name>: ${rule.name}`);
      redact.push({ name: match[1]!, source: rule.source, ...(rule.flags === undefined ? {} : { flags: rule.flags }) });
    }
  }
  return { credentials, profile: { redact } };
}

function count(haystack: string, needle: string): number {
  return haystack.split(needle).length - 1;
}

async function runGroup(scope: DriverScope, rules: readonly Rule[], cases: readonly CorpusCase[]): Promise<string[]> {
  const problems: string[] = [];
  const capture = await scope.queue({
    name: captureName("redact"),
    ...configured(rules),
    // Node writes exactly these characters; a shell would interpret some.
    script: node(`process.stdout.write(${JSON.stringify(cases.map((c) => `${c.input}\n`).join(""))});`),
  });
  const outcome = await scope.dispatch(capture).done;
  assertRan(outcome, `the corpus capture for rules ${rules.map((rule) => rule.name).join(", ")}`);
  const run = await scope.readRun(outcome.runId);
  const got = texts(run.lines, "out");
  cases.forEach((item, index) => {
    if (got[index] !== item.expected) problems.push(`${item.name}: expected ${JSON.stringify(item.expected)}, the log has ${JSON.stringify(got[index])}`);
  });
  if (got.length !== cases.length) problems.push(`${cases.length} lines printed, ${got.length} in the log`);

  // The redaction statement: rule names and counts, never content.
  const statement = (run.record?.["redactions"] ?? []) as Array<{ rule: string; count: number }>;
  for (const rule of rules) {
    const expected = cases.reduce((sum, item) => sum + count(item.expected, `[REDACTED:${rule.name}]`), 0);
    const stated = statement.find((entry) => entry.rule === rule.name)?.count ?? 0;
    if (stated !== expected) problems.push(`the record states ${stated} redactions by ${rule.name}, the expected output has ${expected}`);
  }
  const fileText = readFileSync(run.logPath, "utf8");
  const recordText = JSON.stringify(run.record);
  for (const rule of rules) {
    if (rule.kind !== "literal" || cases.some((item) => item.expected.includes(rule.value))) continue;
    if (fileText.includes(rule.value)) problems.push(`the log file holds the value of ${rule.name}`);
    if (recordText.includes(rule.value)) problems.push(`the record holds the value of ${rule.name}`);
  }
  return problems;
}

export const redaction: Property = {
  name: "redaction",
  title: "7. credential values the record names and the profile's patterns are masked in the log before it is written; over-masking is asserted too (the corpus)",
  async run(context) {
    const scope = await context.sharedScope();
    const corpus = loadCorpus();
    context.diagnostic(`corpus ${corpus.path}: ${corpus.cases.length} cases`);
    const groups = new Map<string, { rules: readonly Rule[]; cases: CorpusCase[] }>();
    for (const item of corpus.cases) {
      const key = JSON.stringify(item.rules);
      const group = groups.get(key) ?? { rules: item.rules, cases: [] };
      group.cases.push(item);
      groups.set(key, group);
    }
    const problems = (await Promise.all([...groups.values()].map((group) => runGroup(scope, group.rules, group.cases)))).flat();

    // A credential split across two writes and one on stderr: redaction works on lines, not on chunks.
    const secret = "split-secret-4c1d";
    const capture = await scope.queue({
      name: captureName("redact-split"),
      credentials: { SPLIT_TOKEN: secret },
      script: sh(`printf 'before ${secret.slice(0, 7)}'`, "sleep 0.3", `printf '${secret.slice(7)} after\\n'`, `echo "err ${secret}" >&2`),
    });
    const outcome = await scope.dispatch(capture).done;
    assertRan(outcome, "the split-credential capture");
    const run = await scope.readRun(outcome.runId);
    assert.deepEqual(texts(run.lines, "out"), ["before [REDACTED:credential:SPLIT_TOKEN] after"], "a value split across writes is masked");
    assert.deepEqual(texts(run.lines, "err"), ["err [REDACTED:credential:SPLIT_TOKEN]"], "stderr is masked too");
    assert.equal(readFileSync(run.logPath, "utf8").includes(secret), false, "the log file never holds the value");

    assert.deepEqual(problems, [], `every corpus case holds:\n${problems.join("\n")}`);
  },
};
