import assert from "node:assert/strict";
import { runTogether } from "./support/go.js";
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync, readdirSync, existsSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import {
  GENESIS_PREV,
  appendEntry,
  readEntries,
  verifyChain,
  type ChainEntry,
  type ChainLog,
} from "../src/ledger/chain-log.js";
import type { OatsError } from "../src/core/errors.js";
import { canonicalJson, type JsonObject } from "../src/core/canonical-json.js";
import { REPO, tempDir } from "./helpers.js";
import { refusal } from "./support/refusals.js";

const AUDIT: ChainLog = { dir: [".agents", "audit"], file: "audit.jsonl" };

function logPath(scope: string): string {
  return join(scope, ".agents", "audit", "audit.jsonl");
}

/** sha256 over canonical JSON of the entry without its hash, computed here with node:crypto. */
function independentHash(entry: Record<string, unknown>): string {
  const copy: Record<string, unknown> = { ...entry };
  delete copy.hash;
  return `sha256-${createHash("sha256").update(canonicalJson(copy), "utf8").digest("hex")}`;
}

async function logWith(count: number): Promise<{ scope: string; entries: ChainEntry[]; lines: string[] }> {
  const scope = tempDir("oats-chain-");
  const entries: ChainEntry[] = [];
  for (let n = 0; n < count; n++)
    entries.push(await appendEntry(scope, AUDIT, { action: "dispatch", subject: { job: `job-${n}` }, n }));
  const lines = readFileSync(logPath(scope), "utf8").split("\n").slice(0, -1);
  return { scope, entries, lines };
}

function rewrite(scope: string, lines: string[], trailingNewline = true): void {
  writeFileSync(logPath(scope), lines.join("\n") + (trailingNewline ? "\n" : ""));
}

describe("chain log: appending", () => {
  test(
    "Given an empty scope, When three entries are appended, Then seq, prev " +
      "and hash chain as recomputed independently",
    async () => {
      const { scope, entries, lines } = await logWith(3);
      assert.equal(lines.length, 3);
      let prev = GENESIS_PREV;
      for (const [index, line] of lines.entries()) {
        const parsed = JSON.parse(line) as Record<string, unknown>;
        assert.equal(`${line}\n`, canonicalJson(parsed), "each line is canonical JSON");
        assert.equal(parsed.seq, index + 1);
        assert.equal(parsed.prev, prev);
        assert.equal(parsed.hash, independentHash(parsed));
        assert.equal(typeof parsed.at, "string");
        assert.equal(new Date(parsed.at as string).toISOString(), parsed.at);
        assert.deepEqual(parsed, entries[index]);
        assert.equal(parsed.n, index);
        prev = parsed.hash as string;
      }
      assert.equal(readFileSync(join(scope, ".agents", "audit", ".gitignore"), "utf8"), "*\n");
      assert.deepEqual(verifyChain(scope, AUDIT), { ok: true, entries: 3, head: prev });
      assert.deepEqual(readEntries(scope, AUDIT), { entries, head: prev });
    },
  );

  test("Given no log yet, When it is verified, Then it is an empty valid chain and nothing is created", () => {
    const scope = tempDir("oats-chain-");
    assert.deepEqual(verifyChain(scope, AUDIT), { ok: true, entries: 0, head: GENESIS_PREV });
    assert.deepEqual(readdirSync(scope), []);
  });

  test(
    "Given a last entry longer than the tail-reading chunk, When another " + "entry is appended, Then it chains to it",
    async () => {
      const scope = tempDir("oats-chain-");
      const big = await appendEntry(scope, AUDIT, { details: "x".repeat(300_000) });
      const next = await appendEntry(scope, AUDIT, { details: "small" });
      assert.equal(next.seq, 2);
      assert.equal(next.prev, big.hash);
      assert.equal(verifyChain(scope, AUDIT).ok, true);
    },
  );

  test(
    "Given a body with a reserved key or a __proto__ key, When it is " +
      "appended, Then invalid-input and nothing is written",
    async () => {
      const scope = tempDir("oats-chain-");
      await assert.rejects(appendEntry(scope, AUDIT, { seq: 7 }), refusal("invalid-input"));
      await assert.rejects(appendEntry(scope, AUDIT, { hash: "x" }), refusal("invalid-input"));
      await assert.rejects(
        appendEntry(scope, AUDIT, JSON.parse('{"a":{"__proto__":{"polluted":true}}}') as JsonObject),
        refusal("invalid-input"),
      );
      await assert.rejects(appendEntry(scope, AUDIT, { n: Number.NaN }), refusal("invalid-input"));
      await assert.rejects(
        appendEntry(scope, { dir: [".agents", ".."], file: "x.jsonl" }, {}),
        refusal("invalid-input"),
      );
      assert.equal(existsSync(logPath(scope)), false);
    },
  );

  test(
    "Given a line with a __proto__ key, When the chain is verified, Then " + "that line is broken (bad-json)",
    async () => {
      const { scope, lines } = await logWith(2);
      const text = lines[1]!.replace('"action":', '"__proto__":{"polluted":true},"action":');
      rewrite(scope, [lines[0]!, text]);
      assert.deepEqual(verifyChain(scope, AUDIT), { ok: false, brokenAt: { line: 2, seq: null, reason: "bad-json" } });
      assert.equal(({} as Record<string, unknown>).polluted, undefined);
    },
  );
});

describe("chain log: verifyChain names the first broken link", () => {
  test("Given one byte changed in entry 3, Then line 3 has the wrong hash", async () => {
    const { scope, lines } = await logWith(5);
    assert.match(lines[2]!, /"n":2/);
    lines[2] = lines[2]!.replace('"n":2', '"n":7');
    rewrite(scope, lines);
    assert.deepEqual(verifyChain(scope, AUDIT), { ok: false, brokenAt: { line: 3, seq: 3, reason: "wrong-hash" } });
    assert.throws(() => readEntries(scope, AUDIT), refusal("integrity-mismatch"));
  });

  test("Given entry 3 deleted, Then line 3 is a seq gap", async () => {
    const { scope, lines } = await logWith(5);
    lines.splice(2, 1);
    rewrite(scope, lines);
    assert.deepEqual(verifyChain(scope, AUDIT), { ok: false, brokenAt: { line: 3, seq: 4, reason: "seq-gap" } });
  });

  test("Given entries 2 and 3 swapped, Then line 2 is broken", async () => {
    const { scope, lines } = await logWith(5);
    [lines[1], lines[2]] = [lines[2]!, lines[1]!];
    rewrite(scope, lines);
    assert.deepEqual(verifyChain(scope, AUDIT), { ok: false, brokenAt: { line: 2, seq: 3, reason: "seq-gap" } });
  });

  test("Given the last line truncated, Then it is named truncated", async () => {
    const { scope, lines } = await logWith(5);
    lines[4] = lines[4]!.slice(0, 40);
    rewrite(scope, lines, false);
    const verdict = verifyChain(scope, AUDIT);
    assert.equal(verdict.ok, false);
    assert.deepEqual(verdict.ok ? null : { line: verdict.brokenAt.line, reason: verdict.brokenAt.reason }, {
      line: 5,
      reason: "truncated",
    });
  });

  test("Given a line in the middle truncated, Then it is named (bad-json)", async () => {
    const { scope, lines } = await logWith(5);
    lines[1] = lines[1]!.slice(0, 40);
    rewrite(scope, lines);
    assert.deepEqual(verifyChain(scope, AUDIT), { ok: false, brokenAt: { line: 2, seq: null, reason: "bad-json" } });
  });

  test(
    "Given a forged entry appended with a self-consistent hash but the wrong " + "prev, Then it is named wrong-prev",
    async () => {
      const { scope, entries, lines } = await logWith(5);
      const forged: Record<string, unknown> = {
        seq: 6,
        at: new Date().toISOString(),
        action: "approve",
        n: 99,
        prev: entries[3]!.hash,
      };
      forged.hash = independentHash(forged);
      rewrite(scope, [...lines, canonicalJson(forged).slice(0, -1)]);
      assert.deepEqual(verifyChain(scope, AUDIT), { ok: false, brokenAt: { line: 6, seq: 6, reason: "wrong-prev" } });
    },
  );

  test("Given a line re-spelt with the same content but not canonically, Then it is non-canonical", async () => {
    const { scope, lines } = await logWith(3);
    lines[1] = JSON.stringify(JSON.parse(lines[1]!), null, 0).replace(/^\{/, "{ ");
    rewrite(scope, lines);
    assert.deepEqual(verifyChain(scope, AUDIT), { ok: false, brokenAt: { line: 2, seq: 2, reason: "non-canonical" } });
  });
});

describe("chain log: refusals", () => {
  for (const [name, damage] of [
    [
      "a truncated last line",
      (lines: string[]) => ({ lines: [...lines.slice(0, -1), lines.at(-1)!.slice(0, 30)], newline: false }),
    ],
    [
      "a byte changed in the last entry",
      (lines: string[]) => ({ lines: [...lines.slice(0, -1), lines.at(-1)!.replace('"n":2', '"n":3')], newline: true }),
    ],
    ["an empty last line", (lines: string[]) => ({ lines: [...lines, ""], newline: true })],
  ] as const) {
    test(
      `Given ${name}, When an entry is appended, Then audit-unavailable and ` + `the file is byte-for-byte unchanged`,
      async () => {
        const { scope, lines } = await logWith(3);
        const damaged = damage(lines);
        rewrite(scope, damaged.lines, damaged.newline);
        const before = readFileSync(logPath(scope));
        await assert.rejects(appendEntry(scope, AUDIT, { action: "dispatch" }), (error: unknown) => {
          refusal("audit-unavailable")(error);
          assert.equal((error as OatsError).details.step, "verify");
          return true;
        });
        assert.deepEqual(readFileSync(logPath(scope)), before);
      },
    );
  }

  test(
    "Given the audit store dir is a symlink, When an entry is appended or " +
      "verified, Then invalid-artifact-store and nothing is written through it",
    async () => {
      const scope = tempDir("oats-chain-");
      const elsewhere = tempDir("oats-chain-elsewhere-");
      mkdirSync(join(scope, ".agents"));
      symlinkSync(elsewhere, join(scope, ".agents", "audit"));
      await assert.rejects(appendEntry(scope, AUDIT, { action: "dispatch" }), refusal("invalid-artifact-store"));
      assert.throws(() => verifyChain(scope, AUDIT), refusal("invalid-artifact-store"));
      assert.deepEqual(readdirSync(elsewhere), []);
    },
  );

  test(
    "Given the log file is a symlink, When an entry is appended, Then " +
      "audit-unavailable and the target is untouched",
    async () => {
      const scope = tempDir("oats-chain-");
      await appendEntry(scope, { dir: AUDIT.dir, file: "other.jsonl" }, { action: "x" });
      const target = join(scope, ".agents", "audit", "other.jsonl");
      const before = readFileSync(target);
      symlinkSync(target, logPath(scope));
      await assert.rejects(appendEntry(scope, AUDIT, { action: "dispatch" }), refusal("audit-unavailable"));
      assert.deepEqual(readFileSync(target), before);
    },
  );

  test("Given the log path is a directory, When an entry is appended, Then audit-unavailable", async () => {
    const scope = tempDir("oats-chain-");
    mkdirSync(logPath(scope), { recursive: true });
    await assert.rejects(appendEntry(scope, AUDIT, { action: "dispatch" }), refusal("audit-unavailable"));
  });
});

describe("chain log: concurrency", () => {
  test(
    "Given 8 processes appending 25 entries each at once, Then the log holds " +
      "200 entries with seqs 1..200 and a valid chain",
    async () => {
      const scope = tempDir("oats-chain-");
      const child = join(REPO, "test/support/chain-append-child.ts");
      const writers = 8;
      const count = 25;
      const inputs = Array.from({ length: writers }, (_, writer) => ({
        scope,
        dir: AUDIT.dir,
        file: AUDIT.file,
        writer,
        count,
      }));
      const results = await runTogether(child, inputs, { cwd: REPO });
      const seen: number[] = [];
      for (const result of results) {
        assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
        const outcome = JSON.parse(result.stdout) as { ok: boolean; seqs: number[] };
        assert.equal(outcome.ok, true);
        assert.equal(outcome.seqs.length, count);
        seen.push(...outcome.seqs);
      }
      assert.deepEqual(
        seen.sort((a, b) => a - b),
        Array.from({ length: writers * count }, (_, i) => i + 1),
      );
      const verdict = verifyChain(scope, AUDIT);
      assert.equal(verdict.ok, true, JSON.stringify(verdict));
      const { entries } = readEntries(scope, AUDIT);
      assert.deepEqual(
        entries.map((entry) => entry.seq),
        Array.from({ length: writers * count }, (_, i) => i + 1),
      );
      for (let writer = 0; writer < writers; writer++) {
        assert.deepEqual(
          entries.filter((entry) => entry.writer === writer).map((entry) => entry.n),
          Array.from({ length: count }, (_, i) => i),
          `writer ${writer} entries in order`,
        );
      }
    },
  );
});
