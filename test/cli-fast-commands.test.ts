/**
 * `oats verify` and `oats digest` run from bundles of their own, each the
 * program with that command alone (src/cli/main-verify.ts,
 * main-digest.ts; load-bundle.ts, fastCommandOf, says when). That is only
 * a faster start if such a program answers every command line it is given
 * exactly as the whole program does: the same stdout, stderr and exit
 * code, refusals and usage errors included. Help is the one answer that
 * differs (it lists the commands a program has), and fastCommandOf never
 * hands it one.
 */
import assert from "node:assert/strict";
import { appendFileSync, chmodSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import { digest } from "../src/cli/commands/digest.js";
import { fastCommandOf } from "../src/cli/load-bundle.js";
import { main } from "../src/cli/main.js";
import { main as digestMain } from "../src/cli/main-digest.js";
import { main as verifyMain } from "../src/cli/main-verify.js";
import { createMain, type Main } from "../src/cli/program.js";
import { FIXTURE_LOCK, FIXTURE_PAYLOAD, runOats, tempDir } from "./helpers.js";

interface Answer {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** Run `program` as bin.ts does: --json before any `--` selects JSON mode. */
async function answer(program: Main, argv: string[]): Promise<Answer> {
  const terminator = argv.indexOf("--");
  const json = (terminator === -1 ? argv : argv.slice(0, terminator)).includes("--json");
  let out = "";
  let err = "";
  const code = await program(argv, {
    json,
    writeOut: (text) => void (out += text),
    writeErr: (text) => void (err += text),
    env: { ...process.env, OATS_SCOPE: "" },
  });
  return { code, out, err };
}

describe("a command's own program answers as the whole program does", () => {
  let scope = "";
  let damaged = "";
  const ZERO = `sha256-${"0".repeat(64)}`;

  before(() => {
    scope = tempDir("oats-fast-");
    const retained = runOats([
      "--scope",
      scope,
      "retain",
      "--lock",
      FIXTURE_LOCK,
      FIXTURE_PAYLOAD,
      "--id",
      "demo.hello",
    ]);
    assert.equal(retained.status, 0, retained.stderr);
    // A stored revision with one file changed behind oats's back: verify refuses it as a mismatch.
    damaged = tempDir("oats-fast-damaged-");
    const kept = runOats([
      "--scope",
      damaged,
      "--json",
      "retain",
      "--lock",
      FIXTURE_LOCK,
      FIXTURE_PAYLOAD,
      "--id",
      "demo.hello",
    ]);
    assert.equal(kept.status, 0, kept.stderr);
    const dir = (JSON.parse(kept.stdout) as { result: { dir: string } }).result.dir;
    const file = readdirSync(dir, { recursive: true, withFileTypes: true }).find((entry) => entry.isFile())!;
    const path = join(file.parentPath, file.name);
    chmodSync(file.parentPath, 0o755);
    chmodSync(path, 0o644);
    appendFileSync(path, "changed\n");
  });

  const verifyLines = (): string[][] => [
    ["--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK],
    ["--scope", scope, "--json", "verify", "demo.hello", "--lock", FIXTURE_LOCK],
    ["--scope", scope, "--quiet", "verify", "demo.hello", "--lock", FIXTURE_LOCK],
    ["--scope", scope, "verify", "demo.hello", "--integrity", ZERO],
    ["--scope", scope, "--json", "verify", "demo.hello", "--integrity", `oats.tree-exec.v1:${ZERO}`],
    ["--scope", scope, "verify", "demo.absent", "--lock", FIXTURE_LOCK],
    ["--scope", damaged, "verify", "demo.hello", "--lock", FIXTURE_LOCK],
    ["--scope", damaged, "--json", "verify", "demo.hello", "--lock", FIXTURE_LOCK],
    ["--scope", join(scope, "missing"), "--json", "verify", "demo.hello", "--integrity", ZERO],
    ["--scope", scope, "verify", "demo.hello", "--integrity", "nonsense"],
    ["--scope", scope, "verify", "demo.hello", "--kind", "bogus", "--integrity", ZERO],
    ["--scope", scope, "verify"],
    ["--scope", scope, "--json", "verify"],
    ["--scope", scope, "verify", "demo.hello", "extra", "--lock", FIXTURE_LOCK],
    ["--scope", scope, "verify", "demo.hello", "--bogus"],
    ["--scope", scope, "--json", "verify", "demo.hello", "--integ", ZERO],
    ["--scope", scope, "verify", "demo.hello", "--", "--help"],
    ["--bogus", "verify", "demo.hello"],
    ["-V", "verify"],
    ["--json", "verify", "--version"],
  ];

  const digestLines = (): string[][] => [
    ["digest", FIXTURE_PAYLOAD],
    ["--json", "digest", FIXTURE_PAYLOAD],
    ["--quiet", "digest", FIXTURE_PAYLOAD],
    ["digest", FIXTURE_PAYLOAD, "--format", "oats.tree-legacy.v0"],
    ["digest", FIXTURE_PAYLOAD, "--format", "bogus"],
    ["--json", "digest", join(FIXTURE_PAYLOAD, "absent")],
    ["digest"],
    ["digest", FIXTURE_PAYLOAD, "another"],
    ["--json", "digest", FIXTURE_PAYLOAD, "--bogus"],
  ];

  /**
   * Each line through the whole program and through `own`: the same answer. Each line is one the CLI hands to the
   * command's own bundle (the version lines too: both programs have the same version). The exit codes seen, sorted.
   */
  async function compared(lines: string[][], command: "verify" | "digest", own: Main): Promise<number[]> {
    const codes = new Set<number>();
    for (const argv of lines) {
      assert.equal(fastCommandOf(argv), command, argv.join(" "));
      const whole = await answer(main, argv);
      codes.add(whole.code);
      assert.deepEqual(await answer(own, argv), whole, argv.join(" "));
    }
    return [...codes].sort();
  }

  test("every verify command line: the same exit code, stdout and stderr from verify's own program", async () => {
    // The lines reach success, the missing, invalid and mismatch refusals and usage errors: the comparison saw each
    // way out.
    assert.deepEqual(await compared(verifyLines(), "verify", verifyMain), [0, 2, 3, 4, 5]);
  });

  test("every digest command line: the same exit code, stdout and stderr from digest's own program", async () => {
    assert.deepEqual(await compared(digestLines(), "digest", digestMain), [0, 2, 3]);
  });

  test("help is the answer that differs, which is why fastCommandOf keeps it for the whole program", async () => {
    for (const argv of [
      ["--help", "verify"],
      ["-h", "digest", FIXTURE_PAYLOAD],
    ]) {
      const own = argv.includes("verify") ? verifyMain : digestMain;
      const whole = await answer(main, argv);
      assert.equal(whole.code, 0);
      assert.match(whole.out, /\bretain\b/, "the whole program's help lists retain");
      assert.notDeepEqual(await answer(own, argv), whole, argv.join(" "));
      assert.equal(fastCommandOf(argv), undefined, argv.join(" "));
    }
  });

  test("the programs of main-verify.ts and main-digest.ts hold their one command and no other", async () => {
    const digestLine = ["--json", "digest", FIXTURE_PAYLOAD];
    assert.deepEqual(await answer(createMain([digest]), digestLine), await answer(digestMain, digestLine));
    for (const [own, argv, other] of [
      [verifyMain, digestLine, "digest"],
      [digestMain, ["--json", "--scope", scope, "verify", "demo.hello", "--lock", FIXTURE_LOCK], "verify"],
    ] as const) {
      const unknown = await answer(own, [...argv]);
      assert.equal(unknown.code, 2, unknown.out);
      assert.match(unknown.out, new RegExp(`unknown command '${other}'`));
    }
  });
});
