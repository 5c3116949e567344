/**
 * Property 7: redaction is wired into the capture path. Every case of the
 * redaction corpus (test/conformance/redaction-corpus.json, the
 * specification of redaction) is printed by a real capture whose record
 * names the case's credentials and whose profile holds its patterns; the log
 * must hold the case's output, the record its redaction statement, and
 * over-masking cases stay untouched. Every refusal of the corpus is refused
 * before anything runs. The credential values are looked for in the log
 * file's bytes and the record here, not asked of the driver.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DriverRefusal, type CaptureRequest, type DriverScope, type RedactPattern } from "../driver.js";
import {
  assertRan,
  captureName,
  limited,
  node,
  sh,
  shQuote,
  texts,
  type Property,
  type PropertyContext,
} from "./support.js";

type Rule =
  | { name: string; kind: "literal"; value: string }
  | { name: string; kind: "pattern"; source: string; flags?: string };

interface CorpusCase {
  readonly name: string;
  readonly rules: readonly Rule[];
  readonly input: readonly string[];
  readonly output: readonly string[];
  readonly statement: ReadonlyArray<{ rule: string; count: number }>;
}

interface CorpusRefusal {
  readonly name: string;
  readonly rules: readonly Rule[];
  readonly code: string;
}

const HERE = join(import.meta.dirname, "..");
export const CORPUS = join(HERE, "redaction-corpus.json");

export function loadCorpus(): { path: string; cases: CorpusCase[]; refusals: CorpusRefusal[] } {
  const path = CORPUS;
  const value = JSON.parse(readFileSync(path, "utf8")) as {
    format?: string;
    cases?: CorpusCase[];
    refusals?: CorpusRefusal[];
  };
  assert.equal(value.format, "oats.redaction-corpus.v1", `${path} is a redaction corpus`);
  const cases = value.cases ?? [];
  for (const item of cases) {
    assert.ok(
      Array.isArray(item.rules) &&
        Array.isArray(item.input) &&
        Array.isArray(item.output) &&
        Array.isArray(item.statement),
      `corpus case ${item.name}: rules, input, output, statement`,
    );
    assert.equal(item.input.length, item.output.length, `corpus case ${item.name}: one output line per input line`);
    for (const line of item.input) assert.ok(!line.includes("\n"), `corpus case ${item.name}: one line each`);
  }
  assert.ok(cases.length > 0, `the corpus ${path} has cases`);
  return { path, cases, refusals: value.refusals ?? [] };
}

/** The capture that configures exactly `rules`: literals as credentials, patterns in the profile, in the given order.
 * */
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
  return { credentials, ...(redact.length === 0 ? {} : { profile: { redact } }) };
}

/** One capture prints every input line of the cases that share these rules; returns what did not hold. */
async function runGroup(scope: DriverScope, rules: readonly Rule[], cases: readonly CorpusCase[]): Promise<string[]> {
  const problems: string[] = [];
  const input = cases.flatMap((item) => item.input);
  const expected = cases.flatMap((item) => item.output);
  const capture = await scope.queue({
    name: captureName("redact"),
    ...configured(rules),
    // Node writes exactly these characters; a shell would interpret some.
    script: node(`process.stdout.write(${JSON.stringify(input.map((line) => `${line}\n`).join(""))});`),
  });
  const outcome = await scope.dispatch(capture).done;
  assertRan(outcome, `the corpus capture for ${cases.map((item) => item.name).join("; ")}`);
  const run = await scope.readRun(outcome.runId);
  const got = texts(run.lines, "out");
  let at = 0;
  for (const item of cases) {
    const mine = got.slice(at, at + item.output.length);
    at += item.output.length;
    if (JSON.stringify(mine) !== JSON.stringify(item.output))
      problems.push(`${item.name}: expected ${JSON.stringify(item.output)}, the log has ${JSON.stringify(mine)}`);
  }
  if (got.length !== expected.length)
    problems.push(
      `${cases.map((item) => item.name).join("; ")}: ${expected.length} lines printed, ${got.length} in the log`,
    );

  // The redaction statement: every rule, in order, with its count; names and counts, never content.
  const statement = rules.map((rule) => ({
    rule: rule.name,
    count: cases.reduce((sum, item) => sum + (item.statement.find((entry) => entry.rule === rule.name)?.count ?? 0), 0),
  }));
  const stated = ((run.record?.["redactions"] ?? []) as Array<{ rule: string; count: number }>).map((entry) => ({
    rule: entry.rule,
    count: entry.count,
  }));
  if (JSON.stringify(stated) !== JSON.stringify(statement))
    problems.push(
      `${cases.map((item) => item.name).join("; ")}: the record states ` +
        `${JSON.stringify(stated)}, the corpus ${JSON.stringify(statement)}`,
    );

  // A 4-character value (the corpus's shortest) turns up by chance inside a
  // microsecond stamp or a hex digest, so those are left out of the search:
  // each log line's text after its stamp, and the record's text fields.
  const fileText = readFileSync(run.logPath, "utf8")
    .split("\n")
    .map((line) => line.replace(/^\d+ /, ""))
    .join("\n");
  const recordText = recordTextFields(run.record).join("\n");
  for (const rule of rules) {
    if (rule.kind !== "literal" || expected.some((line) => line.includes(rule.value))) continue;
    if (fileText.includes(rule.value)) problems.push(`the log file holds the value of ${rule.name}`);
    if (recordText.includes(rule.value)) problems.push(`the record holds the value of ${rule.name}`);
  }
  return problems;
}

/** The record's keys and string values, less digests and timestamps (random hex and digits), where a leaked value
 * would show. */
export function recordTextFields(value: unknown): string[] {
  if (typeof value === "string")
    return /^(sha256-)?[0-9a-f]{64}$|^\d{4}-\d\d-\d\dT[\d:.]+Z$/.test(value) ? [] : [value];
  if (Array.isArray(value)) return value.flatMap(recordTextFields);
  if (value !== null && typeof value === "object")
    return Object.entries(value).flatMap(([key, item]) => [key, ...recordTextFields(item)]);
  return [];
}

/** A corpus refusal: refused at prepare or at dispatch, and nothing runs. */
async function refused(context: PropertyContext, scope: DriverScope, item: CorpusRefusal): Promise<string[]> {
  const marker = join(context.tempDir("oats-conf-redact-refusal-"), "ran");
  try {
    const capture = await scope.queue({
      name: captureName("redact-refusal"),
      ...configured(item.rules),
      script: sh(`touch ${shQuote(marker)}`),
    });
    const outcome = await scope.dispatch(capture).done;
    if (outcome.kind !== "refused") return [`refusal ${item.name}: it ran (${outcome.runId})`];
    if (outcome.code !== item.code)
      return [`refusal ${item.name}: refused with ${outcome.code}, the corpus says ${item.code}: ${outcome.message}`];
  } catch (error) {
    if (!(error instanceof DriverRefusal)) throw error;
    if (error.code !== item.code)
      return [`refusal ${item.name}: refused with ${error.code}, the corpus says ${item.code}: ${error.message}`];
  }
  return existsSync(marker) ? [`refusal ${item.name}: the marker exists, something ran`] : [];
}

export const redaction: Property = {
  name: "redaction",
  title:
    "7. credential values the record names and the profile's patterns are " +
    "masked in the log before it is written; over-masking is asserted too " +
    "(the corpus)",
  async run(context) {
    const scope = await context.scope();
    const corpus = loadCorpus();
    context.diagnostic(`corpus ${corpus.path}: ${corpus.cases.length} cases, ${corpus.refusals.length} refusals`);
    const groups = new Map<string, { rules: readonly Rule[]; cases: CorpusCase[] }>();
    for (const item of corpus.cases) {
      const key = JSON.stringify(item.rules);
      const group = groups.get(key) ?? { rules: item.rules, cases: [] };
      group.cases.push(item);
      groups.set(key, group);
    }
    const problems = (
      await limited(4, [
        ...[...groups.values()].map((group) => () => runGroup(scope, group.rules, group.cases)),
        ...corpus.refusals.map((item) => () => refused(context, scope, item)),
      ])
    ).flat();

    // A credential split across two writes and one on stderr: redaction works on lines, not on chunks.
    const secret = "split-secret-4c1d";
    const capture = await scope.queue({
      name: captureName("redact-split"),
      credentials: { SPLIT_TOKEN: secret },
      script: sh(
        `printf 'before ${secret.slice(0, 7)}'`,
        "sleep 0.3",
        `printf '${secret.slice(7)} after\\n'`,
        `echo "err ${secret}" >&2`,
      ),
    });
    const outcome = await scope.dispatch(capture).done;
    assertRan(outcome, "the split-credential capture");
    const run = await scope.readRun(outcome.runId);
    const split = { out: texts(run.lines, "out"), err: texts(run.lines, "err") };
    const masked = {
      out: ["before [REDACTED:credential:SPLIT_TOKEN] after"],
      err: ["err [REDACTED:credential:SPLIT_TOKEN]"],
    };
    if (JSON.stringify(split) !== JSON.stringify(masked))
      problems.push(
        `a value split across writes, and one on stderr: expected ` +
          `${JSON.stringify(masked)}, the log has ${JSON.stringify(split)}`,
      );
    if (readFileSync(run.logPath, "utf8").includes(secret)) problems.push("the split value is in the log file");

    assert.deepEqual(problems, [], `every corpus case holds:\n${problems.join("\n")}`);
  },
};
