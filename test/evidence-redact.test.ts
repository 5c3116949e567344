/**
 * Redaction (the conformance property `redaction`): the corpus test/conformance/redaction-corpus.json
 * is the specification; this file runs it through createRedactor, and checks
 * what the corpus cannot say (the work bound, the refusal details, the rule
 * builder a run uses).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { isOatsError } from "../src/core/errors.js";
import { analysePattern, PatternRefusal } from "../src/captures/redact-pattern.js";
import {
  budgetedOutcome,
  createRedactor,
  credentialValueProblem,
  redactionRules,
  type Match,
  type RedactionRule,
} from "../src/captures/redact.js";
import { REPO } from "./helpers.js";

interface Corpus {
  format: string;
  cases: Array<{
    name: string;
    rules: RedactionRule[];
    input: string[];
    output: string[];
    statement: Array<{ rule: string; count: number }>;
  }>;
  refusals: Array<{ name: string; rules: RedactionRule[]; code: string }>;
}

const corpus = JSON.parse(readFileSync(join(REPO, "test/conformance/redaction-corpus.json"), "utf8")) as Corpus;

describe("the redaction corpus, through createRedactor", () => {
  test("the corpus is the v1 format and says something about over-masking", () => {
    assert.equal(corpus.format, "oats.redaction-corpus.v1");
    assert.ok(corpus.cases.some((entry) => /over-masking/.test(entry.name)));
    assert.ok(corpus.cases.length >= 15 && corpus.refusals.length >= 10);
  });

  for (const entry of corpus.cases) {
    test(`case: ${entry.name}`, () => {
      const redactor = createRedactor(entry.rules);
      assert.deepEqual(
        entry.input.map((line) => redactor.apply(line)),
        entry.output,
      );
      assert.deepEqual(redactor.statement(), entry.statement);
    });
  }

  for (const entry of corpus.refusals) {
    test(`refusal: ${entry.name}`, () => {
      assert.throws(
        () => createRedactor(entry.rules),
        (error: unknown) => {
          assert.ok(isOatsError(error));
          assert.equal(error.code, entry.code);
          assert.equal(error.details["rule"], entry.rules[0]!.name);
          // A refusal is audited: it names the rule, never the value.
          for (const rule of entry.rules)
            if (rule.kind === "literal" && rule.value !== "")
              assert.ok(!JSON.stringify(error.toJSON()).includes(rule.value));
          return true;
        },
      );
    });
  }
});

describe("redaction beyond the corpus", () => {
  test(
    "Given a pattern whose backtracking on a long line is unbounded, When it " +
      "runs, Then the work stops at the line budget and the whole line is " +
      "masked (fail closed), and the next line is redacted normally",
    () => {
      // Star height 1, so the profile accepts it; on 3000 non-spaces with no x it backtracks ~n^4.
      const redactor = createRedactor([{ name: "profile:slow", kind: "pattern", source: "\\S+\\S+\\S+\\S+x" }]);
      const line = `secret=${"a".repeat(3000)}`;
      assert.equal(redactor.apply(line), "[REDACTED:profile:slow]");
      assert.equal(redactor.apply("abcdx and more"), "[REDACTED:profile:slow] and more");
      assert.deepEqual(redactor.statement(), [{ rule: "profile:slow", count: 2 }]);
    },
  );

  test(
    "Given a long line, When an ordinary pattern runs under the budget, Then " +
      "it masks exactly what the direct path masks",
    () => {
      const rules: RedactionRule[] = [
        { name: "credential:API_TOKEN", kind: "literal", value: "abc.DEF-ghi" },
        { name: "profile:bearer", kind: "pattern", source: "bearer [a-z0-9._~+/-]+=*", flags: "i" },
      ];
      const long = `${"word ".repeat(600)}Bearer abc.DEF-ghi and abc.DEF-ghi ${"x".repeat(50)}`;
      const expected =
        `${"word ".repeat(600)}[REDACTED:profile:bearer] and ` + `[REDACTED:credential:API_TOKEN] ${"x".repeat(50)}`;
      const redactor = createRedactor(rules);
      assert.equal(redactor.apply(long), expected);
      assert.equal(
        redactor.apply("Bearer abc.DEF-ghi and abc.DEF-ghi"),
        "[REDACTED:profile:bearer] and [REDACTED:credential:API_TOKEN]",
      );
      assert.deepEqual(redactor.statement(), [
        { rule: "credential:API_TOKEN", count: 2 },
        { rule: "profile:bearer", count: 2 },
      ]);
    },
  );

  test("Given rules named wrongly or twice, When a redactor is made, Then it is refused", () => {
    const refused = (rules: RedactionRule[], reason: RegExp) =>
      assert.throws(
        () => createRedactor(rules),
        (error: unknown) => isOatsError(error) && error.code === "invalid-input" && reason.test(error.message),
      );
    refused([{ name: "API_TOKEN", kind: "literal", value: "abcdefgh" }], /credential:<NAME>/);
    refused([{ name: "secret", kind: "pattern", source: "abc" }], /profile:<name>/);
    refused(
      [
        { name: "credential:A", kind: "literal", value: "abcdefgh" },
        { name: "credential:A", kind: "literal", value: "ijklmnop" },
      ],
      /twice/,
    );
  });

  test("redactionRules orders credentials by name, then the profile's patterns in profile order", () => {
    const rules = redactionRules({ ZED_KEY: "zzzz-1234", API_TOKEN: "aaaa-5678" }, [
      { name: "second", pattern: "b{4}" },
      { name: "first", pattern: "a{4}", flags: "i" },
    ]);
    assert.deepEqual(rules, [
      { name: "credential:API_TOKEN", kind: "literal", value: "aaaa-5678" },
      { name: "credential:ZED_KEY", kind: "literal", value: "zzzz-1234" },
      { name: "profile:second", kind: "pattern", source: "b{4}" },
      { name: "profile:first", kind: "pattern", source: "a{4}", flags: "i" },
    ]);
  });

  test(
    "credentialValueProblem: four characters (code points) are enough; " +
      "fewer, line breaks and control characters are not; a tab is fine",
    () => {
      assert.equal(credentialValueProblem("abcd"), null);
      assert.equal(credentialValueProblem("ab\tcd"), null);
      assert.equal(credentialValueProblem("😀😀😀😀"), null);
      assert.match(credentialValueProblem("😀😀😀") ?? "", /shorter than 4/);
      assert.match(credentialValueProblem("abcd\refgh") ?? "", /line break/);
      assert.match(credentialValueProblem("abcd\u0085efgh") ?? "", /control/);
    },
  );

  test("analysePattern: what the profile accepts and refuses, with the reason", () => {
    const reason = (source: string, flags = "") => {
      try {
        analysePattern(source, flags);
        return "accepted";
      } catch (error) {
        assert.ok(error instanceof PatternRefusal);
        return error.message;
      }
    };
    for (const ok of [
      "ghp_[A-Za-z0-9]{36}",
      "(?<=password=)[^\\s&]+",
      "(?:ab)+",
      "(?<key>api)[-_]?key=\\S+",
      "a{2,}",
      "x?y",
      "[]]x",
      "\\p{L}+",
      "a|b",
      "(?:(?:ab))+",
    ]) {
      assert.equal(reason(ok, ok.startsWith("\\p") ? "u" : ""), "accepted", ok);
    }
    assert.match(reason("a?"), /empty string/);
    assert.match(reason("(?:a|b?)"), /empty string/);
    assert.match(reason("^$"), /empty string/);
    assert.match(reason("(?!x)"), /empty string/);
    assert.match(reason("(?:a{1,3}){2}"), /repeats a group/);
    assert.match(reason("(?:a|b)+"), /repeats a group/);
    assert.match(reason("((a)+)+x"), /repeats a group/);
    assert.match(reason("(?<n>a)\\k<n>", "u"), /backreference/);
    assert.match(reason("abc", "y"), /flags/);
    assert.match(reason("("), /compile/);
  });
});

describe("the budgeted runner's outcome", () => {
  const patterns = [{ index: 3 }, { index: 5 }];
  test("a watchdog that fires after the last rule finished keeps every span (it is not an exhausted budget)", () => {
    const into: Match[] = [];
    assert.deepEqual(
      budgetedOutcome(
        patterns,
        true,
        2,
        [
          [0, 4],
          [6, 9, 10, 12],
        ],
        into,
      ),
      { exhausted: null },
    );
    assert.deepEqual(into, [
      { start: 0, end: 4, rule: 3 },
      { start: 6, end: 9, rule: 5 },
      { start: 10, end: 12, rule: 5 },
    ]);
  });
  test("a watchdog that fires inside a rule names that rule and keeps no partial spans", () => {
    const into: Match[] = [];
    assert.deepEqual(budgetedOutcome(patterns, true, 1, [[0, 4]], into), { exhausted: 5 });
    assert.deepEqual(into, []);
  });
  test("a run without a timeout keeps every span", () => {
    const into: Match[] = [];
    assert.deepEqual(budgetedOutcome(patterns, false, 2, [[], [1, 2]], into), { exhausted: null });
    assert.deepEqual(into, [{ start: 1, end: 2, rule: 5 }]);
  });
});

describe("the conformance suite's leak search in a run record", () => {
  test(
    "a value inside a digest or a timestamp is chance, a value in any other " + "text field or key is a leak",
    async () => {
      const { recordTextFields } = await import("./conformance/properties/redaction.js");
      const record = {
        runId: `sha256-${"7777".padEnd(64, "a")}`,
        start: "2026-12-01T08:47:07.777712Z",
        pid: 7777,
        note: "PIN=7777",
        lines: [{ text: "x7777" }],
        "7777": true,
      };
      const fields = recordTextFields(record);
      assert.ok(
        !fields.some((field) => field.startsWith("sha256-") || field.startsWith("2026-")),
        "digests and stamps are left out",
      );
      assert.ok(
        fields.includes("PIN=7777") && fields.includes("x7777") && fields.includes("7777"),
        "text fields, nested ones and keys are searched",
      );
    },
  );
});
