/**
 * The capture commands through real child processes (dist/cli/bin.js;
 * `npm run build` first): `oats capture prepare`, `approve`, `revoke`,
 * `approvals`, `queue add|ls`, `dispatch [--exec]`, `audit show|verify`.
 * Every fixture is built through the CLI only; the executable leaves a
 * marker file when it runs, so "nothing ran" is checked, not assumed.
 */
import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { COMMANDS, commandNamed } from "../src/cli/main.js";
import { runJson, runOats, tempDir, commandRefusal } from "./helpers.js";

const SECRET = "s3cret-value";
const PRINCIPAL = `${userInfo().username}@${hostname()}`;
const EXEC_INTEGRITY = /^oats\.tree-exec\.v1:sha256-[0-9a-f]{64}$/;

interface CaptureFixture {
  dir: string;
  scope: string;
  spec: string;
  /** Created by the executable when (and only when) it runs. */
  marker: string;
  /** `--scope <scope>` */
  at: string[];
}

interface FixtureOptions {
  exitCode?: number;
  /** Script lines run after the marker is touched, instead of the usual output. */
  body?: string[];
  declared?: "public" | "internal" | "confidential";
  wing?: string;
  wings?: Record<string, string>;
  principals?: Record<string, string>;
}

/**
 * A temp dir holding `tool/bin/run` (a /bin/sh script: it touches the marker,
 * prints its first argument and whether API_TOKEN reached it, never the
 * value, then exits with `exitCode`), a classification config, a spec and an
 * empty scope directory.
 */
function captureFixture(options: FixtureOptions = {}): CaptureFixture {
  const dir = tempDir("oats-cli-cap-");
  const marker = join(dir, "marker");
  mkdirSync(join(dir, "tool/bin"), { recursive: true });
  writeFileSync(
    join(dir, "tool/bin/run"),
    [
      "#!/bin/sh",
      `touch '${marker}'`,
      ...(options.body ?? [
        'echo "capture output $1"',
        '[ "$API_TOKEN" = "s3cret-value" ] && echo "token reached the child"',
      ]),
      `exit ${options.exitCode ?? 3}`,
      "",
    ].join("\n"),
  );
  chmodSync(join(dir, "tool/bin/run"), 0o755);
  writeFileSync(
    join(dir, "class.yaml"),
    JSON.stringify({
      schemaVersion: 1,
      wings: options.wings ?? {},
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: options.principals ?? {},
    }) + "\n",
  );
  writeFileSync(
    join(dir, "spec.yaml"),
    `${JSON.stringify({
      name: "nightly",
      executable: { tree: "./tool", path: "bin/run", args: ["--fast"] },
      target: { wing: options.wing ?? "x" },
      classification: options.declared ?? "internal",
      classificationConfig: "./class.yaml",
      env: { PATH: "/usr/bin:/bin" },
      credentials: ["API_TOKEN"],
      // Tests run as root: only a privileged composition may run there (privilege.ts).
      privileged: true,
    })}\n`,
  );
  const scope = join(dir, "scope");
  mkdirSync(scope);
  return { dir, scope, spec: join(dir, "spec.yaml"), marker, at: ["--scope", scope] };
}

/** capture prepare --json; returns the resolution id, the subject and the retained tree's directory. */
function prepared(fixture: CaptureFixture) {
  const run = runJson([...fixture.at, "capture", "prepare", fixture.spec]);
  assert.equal(run.status, 0, run.stdout + run.stderr);
  const result = run.envelope.result!;
  return {
    id: result["id"] as string,
    subject: result["subject"] as { kind: string; key: string; integrity: string },
    composition: result["composition"]["subject"] as { kind: string; key: string; integrity: string },
    dir: result["retained"]["dir"] as string,
    result,
  };
}

function subjectArgs(subject: { kind: string; key: string; integrity: string }): string[] {
  return [subject.kind, subject.key, subject.integrity];
}

/** Prepared, approved and queued as job `nightly`, all through the CLI. */
function queuedAndApproved(fixture: CaptureFixture) {
  const capture = prepared(fixture);
  const approved = runOats([
    ...fixture.at,
    "approve",
    ...subjectArgs(capture.composition),
    "--reason",
    "reviewed the script",
  ]);
  assert.equal(approved.status, 0, approved.stderr);
  const queued = runOats([...fixture.at, "queue", "add", capture.id, "--job", "nightly"]);
  assert.equal(queued.status, 0, queued.stderr);
  return capture;
}

describe("capture command names", () => {
  test(
    "Given the capture commands, When the arguments name them, Then " +
      "commandNamed finds each one and COMMANDS registers it",
    () => {
      const names = COMMANDS.map((spec) => spec.name);
      for (const name of [
        "capture prepare",
        "approve",
        "revoke",
        "approvals",
        "queue add",
        "queue ls",
        "dispatch",
        "audit show",
        "audit verify",
      ]) {
        assert.ok(names.includes(name), name);
      }
      assert.equal(commandNamed(["--scope", "/s", "capture", "prepare", "spec.yaml"]), "capture prepare");
      assert.equal(commandNamed(["queue", "ls"]), "queue ls");
      assert.equal(commandNamed(["audit", "verify"]), "audit verify");
      assert.equal(commandNamed(["approve", "capture", "x", "y"]), "approve");
      assert.equal(commandNamed(["dispatch", "nightly", "--exec"]), "dispatch");
      assert.equal(commandNamed(["audit", "frob"]), "audit");
    },
  );
});

describe("oats capture prepare -> approve -> queue add -> dispatch [--exec]", () => {
  test(
    "Given a capture spec, When it is prepared, approved, queued and " +
      "dispatched through the CLI, Then the plan names the approved digest and " +
      "--exec passes the child's exit code and output through",
    () => {
      const fixture = captureFixture({ exitCode: 3 });

      // capture prepare: human lines name the id, the exact subject to approve and the levels.
      const human = runOats([...fixture.at, "capture", "prepare", fixture.spec]);
      assert.equal(human.status, 0, human.stderr);
      const id = /resolution (sha256-[0-9a-f]{64})/.exec(human.stdout)?.[1];
      assert.ok(id, human.stdout);
      const approveLine = /oats approve (composition nightly (oats\.json\.v1:sha256-[0-9a-f]{64}))/.exec(human.stdout);
      assert.ok(approveLine, human.stdout);
      assert.match(human.stdout, /declared internal, derived internal \(fallback\), effective internal/);
      // The approver sees what the composition runs before approving it.
      const execLine = /\n {4}executable {3}(capture nightly (oats\.tree-exec\.v1:sha256-[0-9a-f]{64}))\n/.exec(
        human.stdout,
      );
      assert.ok(execLine, human.stdout);
      assert.match(
        human.stdout,
        new RegExp(
          String.raw`\n {4}entry point {2}bin\/run "--fast"\n {4}env {10}PATH="\/usr\/bin:\/bin"` +
            String.raw`\n {4}credentials {2}API_TOKEN\n {4}target {7}wing=x\n`,
        ),
      );
      assert.equal(human.stderr, "", "no warning when declared == derived");
      assert.equal(runOats([...fixture.at, "--quiet", "capture", "prepare", fixture.spec]).stdout, `${id}\n`);
      const json = prepared(fixture);
      assert.equal(json.id, id);
      assert.equal(json.result["status"], "kept");
      assert.deepEqual(json.subject, { kind: "capture", key: "nightly", integrity: execLine[2] });
      assert.deepEqual(json.composition, { kind: "composition", key: "nightly", integrity: approveLine[2] });
      assert.match(json.subject.integrity, EXEC_INTEGRITY);

      // approve the exact subject prepare printed (copied from its human output).
      const approved = runOats([
        ...fixture.at,
        "approve",
        ...approveLine[1]!.split(" "),
        "--reason",
        "reviewed the script",
      ]);
      assert.equal(approved.status, 0, approved.stderr);
      assert.match(
        approved.stdout,
        new RegExp(
          `^approved composition nightly ${approveLine[2]}\n  executable   ` +
            `${execLine[1]}\n(  .*\n)+  seq 1 by ${PRINCIPAL} at \\S+: reviewed the script\n$`,
        ),
      );

      const approvals = runOats([...fixture.at, "approvals"]);
      assert.equal(approvals.status, 0, approvals.stderr);
      assert.match(
        approvals.stdout,
        new RegExp(
          `^approved composition nightly ${approveLine[2]} seq 1 by ${PRINCIPAL} ` +
            `at \\S+: reviewed the script\n    executable   ${execLine[1]}\n`,
        ),
      );
      const approvalsJson = runJson([...fixture.at, "approvals"]);
      assert.equal(approvalsJson.envelope.result!["approvals"].length, 1);
      assert.equal(approvalsJson.envelope.result!["approvals"][0].approved, true);

      // queue add, queue ls.
      const queued = runJson([...fixture.at, "queue", "add", id, "--job", "nightly", "--every", "1h"]);
      assert.equal(queued.status, 0, queued.stdout);
      assert.equal(queued.envelope.command, "queue add");
      assert.equal(queued.envelope.result!["status"], "written");
      assert.deepEqual(queued.envelope.result!["job"].recurrence, { policy: "capture", every: "1h" });
      const ls = runOats([...fixture.at, "queue", "ls"]);
      assert.equal(ls.status, 0, ls.stderr);
      assert.match(ls.stdout, new RegExp(`^nightly ${id} capture every 1h created \\S+\n$`));

      // dispatch without --exec: the plan, nothing run.
      const plan = runOats([...fixture.at, "dispatch", "nightly"], { env: { API_TOKEN: SECRET } });
      assert.equal(plan.status, 0, plan.stderr);
      assert.match(
        plan.stdout,
        new RegExp(`^dispatch plan for job nightly: resolution ${id} \\(not run; pass --exec to run it\\)\n`),
      );
      assert.match(plan.stdout, new RegExp(`\n  run            ${fixture.scope}/\\S+/bin/run "--fast"\n`));
      assert.match(plan.stdout, new RegExp(`\n  executable     ${execLine[1]}\n`));
      assert.match(plan.stdout, /\n {2}env {12}API_TOKEN, NODE_OPTIONS, PATH \(names only/);
      assert.match(
        plan.stdout,
        new RegExp(
          `\n  run copy       ` +
            `${fixture.scope}/\\.agents/run-copies/\\.staging-\\S+/tree \\(private; ` +
            `working directory\\)\n`,
        ),
      );
      assert.equal(existsSync(fixture.marker), false, "a plan without --exec runs nothing");

      // dispatch --exec: the child's output on stdout, its exit code is oats's.
      const exec = runOats([...fixture.at, "dispatch", "nightly", "--exec"], { env: { API_TOKEN: SECRET } });
      assert.equal(exec.status, 3, exec.stdout + exec.stderr);
      assert.match(exec.stdout, /^capture output --fast\ntoken reached the child\n/);
      assert.match(
        exec.stdout,
        new RegExp(
          `dispatched job nightly: resolution ${id}: exit 3\n  run ` +
            `{12}\\d{8}T\\d{6}Z-[0-9a-f]{8} FAILED \\(complete\\) sha256-[0-9a-f]{64}\n$`,
        ),
      );
      assert.doesNotMatch(exec.stderr, /oats: /, "a child's exit code is not an oats refusal");
      assert.ok(existsSync(fixture.marker), "the executable ran");

      // --json --exec: exactly one envelope line on stdout, the child's stdout on stderr, result.exitCode.
      const execJson = runJson([...fixture.at, "dispatch", "nightly", "--exec"], { env: { API_TOKEN: SECRET } });
      assert.equal(execJson.status, 3, execJson.stdout + execJson.stderr);
      assert.equal(execJson.envelope.ok, true);
      assert.equal(execJson.envelope.command, "dispatch");
      assert.equal(execJson.envelope.result!["exitCode"], 3);
      assert.equal(execJson.envelope.result!["exec"], true);
      assert.match(execJson.stderr, /capture output --fast\n/);

      // --quiet --exec: the child's output only in the run's log; stdout is the run id.
      const quiet = runOats([...fixture.at, "--quiet", "dispatch", "nightly", "--exec"]);
      assert.equal(quiet.status, 3);
      assert.match(quiet.stdout, /^sha256-[0-9a-f]{64}\n$/);

      // audit show: every step of the flow, one line each.
      const audit = runOats([...fixture.at, "audit", "show"]);
      assert.equal(audit.status, 0, audit.stderr);
      const lines = audit.stdout.trimEnd().split("\n");
      for (const action of ["retain", "prepare", "approve", "queue", "dispatch"]) {
        assert.ok(
          lines.some((line) => line.split(" ")[3] === action),
          `${action} in\n${audit.stdout}`,
        );
      }
      assert.match(lines[0]!, new RegExp(`^1 \\S+ ${PRINCIPAL} \\S+ (ok|kept) \\S`));
      const limited = runOats([...fixture.at, "audit", "show", "--limit", "2"]);
      assert.deepEqual(limited.stdout.trimEnd().split("\n"), lines.slice(-2));
      const auditJson = runJson([...fixture.at, "audit", "show"]);
      assert.equal(auditJson.envelope.result!["total"], lines.length);
      assert.equal(auditJson.envelope.result!["entries"].length, lines.length);
      commandRefusal([...fixture.at, "audit", "show", "--limit", "0"], "usage", 2, "audit show");
    },
  );

  test(
    "Given a child that prints its credential (a line on stdout, one on stderr, a line written in two parts, " +
      "a line across the 64 Ki cut), When dispatched with --exec, human and --json, Then the dispatcher's stdout " +
      "and stderr hold the masked marker, never the value nor its halves",
    () => {
      const fixture = captureFixture({
        exitCode: 0,
        body: [
          'echo "token $API_TOKEN on stdout"',
          'echo "token $API_TOKEN on stderr" >&2',
          "printf 'partial %s' \"$API_TOKEN\"",
          "sleep 0.3",
          "printf ' done\\n'",
          // 65530 characters, then the value across the cut at 65536.
          "head -c 65530 /dev/zero | tr '\\000' a",
          'echo "$API_TOKEN tail"',
        ],
      });
      queuedAndApproved(fixture);
      const mask = "[REDACTED:credential:API_TOKEN]";
      const human = runOats([...fixture.at, "dispatch", "nightly", "--exec"], { env: { API_TOKEN: SECRET } });
      assert.equal(human.status, 0, human.stderr);
      const json = runJson([...fixture.at, "dispatch", "nightly", "--exec"], { env: { API_TOKEN: SECRET } });
      assert.equal(json.status, 0, json.stderr);
      assert.equal(json.envelope.ok, true);
      for (const [mode, out, err] of [
        ["human", human.stdout, human.stderr],
        ["--json", json.stdout, json.stderr],
      ] as const) {
        for (const [name, text] of [
          ["stdout", out],
          ["stderr", err],
        ] as const) {
          assert.ok(!text.includes(SECRET), `${mode}: the dispatcher's ${name} holds the credential`);
          // The halves the 64 Ki cut would leave: "s3cret" and "-value".
          assert.ok(!text.includes("s3cret") && !text.includes("-value"), `${mode}: ${name} holds half of it`);
        }
      }
      assert.match(human.stdout, /^token \[REDACTED:credential:API_TOKEN\] on stdout\n/);
      assert.ok(human.stdout.includes(`partial ${mask} done\n`), human.stdout.slice(0, 500));
      assert.ok(human.stdout.includes(`${"a".repeat(65530)}${mask} tail\n`), "the long line, masked, on stdout");
      assert.equal(human.stderr, `token ${mask} on stderr\n`);
      assert.ok(json.stderr.includes(`token ${mask} on stdout\n`), "--json: the child's stdout on stderr");
      assert.ok(json.stderr.includes(`token ${mask} on stderr\n`));
      assert.ok(json.stderr.includes(`${"a".repeat(65530)}${mask} tail\n`));
    },
  );

  test("Given a child that exits 0, When dispatched with --exec, Then oats exits 0", () => {
    const fixture = captureFixture({ exitCode: 0 });
    queuedAndApproved(fixture);
    const run = runJson([...fixture.at, "dispatch", "nightly", "--exec"]);
    assert.equal(run.status, 0, run.stdout + run.stderr);
    assert.equal(run.envelope.result!["exitCode"], 0);
    assert.ok(existsSync(fixture.marker));
  });

  test(
    "Given a queued job, When dispatched without --exec, with --exec and " +
      "with --exec --keep-run-copy, Then only the kept run copy remains, and " +
      "it is reported; --keep-run-copy without --exec is refused",
    () => {
      const fixture = captureFixture({ exitCode: 0 });
      queuedAndApproved(fixture);
      const area = join(fixture.scope, ".agents", "run-copies");
      const copies = () => (existsSync(area) ? readdirSync(area).filter((name) => name !== ".gitignore") : []);
      const plan = runJson([...fixture.at, "dispatch", "nightly"]);
      assert.equal(plan.status, 0, plan.stdout + plan.stderr);
      assert.deepEqual(copies(), [], "a plan that is not run leaves no copy");
      const exec = runJson([...fixture.at, "dispatch", "nightly", "--exec"]);
      assert.equal(exec.status, 0, exec.stdout + exec.stderr);
      assert.equal(exec.envelope.result!["kept"], null);
      assert.deepEqual(copies(), [], "the copy is removed after the run");
      const kept = runJson([...fixture.at, "dispatch", "nightly", "--exec", "--keep-run-copy"]);
      assert.equal(kept.status, 0, kept.stdout + kept.stderr);
      const dir = kept.envelope.result!["kept"] as string;
      assert.deepEqual(copies(), [dir.slice(area.length + 1)]);
      assert.match(
        runOats([...fixture.at, "dispatch", "nightly", "--exec", "--keep-run-copy"]).stdout,
        /\n {2}kept run copy {2}\S+\/run-copies\/\.staging-\S+\n/,
      );
      commandRefusal([...fixture.at, "dispatch", "nightly", "--keep-run-copy"], "usage", 2, "dispatch");
    },
  );

  test(
    "Given a declared level the config does not derive, When prepared, Then " +
      "a warning is printed and a security event audited",
    () => {
      const fixture = captureFixture({ declared: "public" });
      const run = runOats([...fixture.at, "capture", "prepare", fixture.spec]);
      assert.equal(run.status, 0, run.stderr);
      assert.match(
        run.stderr,
        /^oats: warning: capture nightly: declared level public differs from .* internal; effective internal/,
      );
      assert.match(run.stdout, /declared public, derived internal \(fallback\), effective internal/);
      const json = prepared(fixture);
      assert.equal(json.result["classification"].mismatch, true);
      assert.match(
        runOats([...fixture.at, "audit", "show"]).stdout,
        /^\d+ \S+ \S+ security-event event capture=nightly$/m,
      );
    },
  );
});

describe("oats dispatch refusals: nothing runs", () => {
  test(
    "Given a queued capture that was never approved, When dispatched with " +
      "--exec, Then it exits 6 approval-required, names the approve command " +
      "and the executable did not run",
    () => {
      const fixture = captureFixture();
      const capture = prepared(fixture);
      assert.equal(runOats([...fixture.at, "queue", "add", capture.id, "--job", "nightly"]).status, 0);

      const refused = commandRefusal(
        [...fixture.at, "dispatch", "nightly", "--exec"],
        "approval-required",
        6,
        "dispatch",
      );
      assert.deepEqual(refused.envelope.error!.details["subject"], capture.composition);
      const human = runOats([...fixture.at, "dispatch", "nightly", "--exec"]);
      assert.equal(human.status, 6);
      assert.equal(human.stdout, "");
      assert.match(
        human.stderr,
        /^oats: approval-required: .*\n.*`oats approve composition nightly oats\.json\.v1:sha256-[0-9a-f]{64} --reason/,
      );
      assert.ok(human.stderr.includes(`oats approve ${subjectArgs(capture.composition).join(" ")}`));
      assert.equal(existsSync(fixture.marker), false, "the executable must not run");
    },
  );

  test(
    "Given an approved capture whose retained tree is tampered with, When " +
      "dispatched with --exec, Then it exits 5 integrity-mismatch and the " +
      "executable did not run",
    () => {
      const fixture = captureFixture();
      const capture = queuedAndApproved(fixture);
      const script = join(capture.dir, "bin/run");
      chmodSync(capture.dir, 0o755);
      chmodSync(join(capture.dir, "bin"), 0o755);
      chmodSync(script, 0o755);
      writeFileSync(script, `${readFileSync(script, "utf8")}# tampered\n`);

      commandRefusal([...fixture.at, "dispatch", "nightly", "--exec"], "integrity-mismatch", 5, "dispatch");
      const human = runOats([...fixture.at, "dispatch", "nightly", "--exec"]);
      assert.equal(human.status, 5);
      assert.equal(human.stdout, "");
      assert.equal(existsSync(fixture.marker), false, "a tampered executable must not run");
    },
  );

  test(
    "Given an approval that was revoked, When dispatched with --exec, Then " +
      "it exits 6 approval-required, approvals shows the revocation and " +
      "nothing ran",
    () => {
      const fixture = captureFixture();
      const capture = queuedAndApproved(fixture);
      const revoked = runOats([...fixture.at, "revoke", ...subjectArgs(capture.composition), "--reason", "pulled"]);
      assert.equal(revoked.status, 0, revoked.stderr);
      assert.match(revoked.stdout, /^revoked composition nightly /);

      const refused = commandRefusal(
        [...fixture.at, "dispatch", "nightly", "--exec"],
        "approval-required",
        6,
        "dispatch",
      );
      assert.match(refused.envelope.error!.message, /revoked by .*: pulled/);
      assert.equal(existsSync(fixture.marker), false);
      assert.match(
        runOats([...fixture.at, "approvals"]).stdout,
        new RegExp(
          "^revoked {2}composition nightly .* seq 2 by \\S+ at \\S+: pulled\n" +
            "checkpoint approvals ledger: anchored .*\ncheckpoint audit log: anchored .*\n$",
        ),
      );
    },
  );

  test(
    "Given a confidential target, When dispatched by a principal the config " +
      "does not name sovereign, Then classification-refused (exit 6) and " +
      "nothing ran; named sovereign, it runs",
    () => {
      const refusedFixture = captureFixture({ wing: "secret", wings: { secret: "confidential" } });
      queuedAndApproved(refusedFixture);
      const refused = commandRefusal(
        [...refusedFixture.at, "dispatch", "nightly", "--exec"],
        "classification-refused",
        6,
        "dispatch",
      );
      assert.equal(refused.envelope.error!.details["principal"], PRINCIPAL);
      const human = runOats([...refusedFixture.at, "dispatch", "nightly", "--exec"]);
      assert.match(human.stderr, /^oats: classification-refused: .*\nnothing ran: .*sovereign/);
      assert.equal(existsSync(refusedFixture.marker), false);

      const allowed = captureFixture({
        wing: "secret",
        wings: { secret: "confidential" },
        principals: { [PRINCIPAL]: "sovereign" },
        exitCode: 4,
      });
      queuedAndApproved(allowed);
      const run = runOats([...allowed.at, "dispatch", "nightly", "--exec"]);
      assert.equal(run.status, 4, run.stderr);
      assert.ok(existsSync(allowed.marker));
    },
  );

  test("Given no such job, When dispatched, Then job-not-found (exit 3) with a remedy naming `oats queue ls`", () => {
    const fixture = captureFixture();
    commandRefusal([...fixture.at, "dispatch", "nope", "--exec"], "job-not-found", 3, "dispatch");
    const human = runOats([...fixture.at, "dispatch", "nope"]);
    assert.equal(human.status, 3);
    assert.match(human.stderr, /^oats: job-not-found: .*\n.*`oats queue ls`/);
  });
});

describe("oats dispatch never prints a credential value", () => {
  test(
    "Given a credential in the environment, When dispatched without --exec " +
      "(plain and --json), Then its value appears nowhere in stdout or stderr, " +
      "only its name",
    () => {
      const fixture = captureFixture();
      queuedAndApproved(fixture);
      const env = { API_TOKEN: SECRET };

      const plain = runOats([...fixture.at, "dispatch", "nightly"], { env });
      assert.equal(plain.status, 0, plain.stderr);
      assert.ok(!plain.stdout.includes(SECRET) && !plain.stderr.includes(SECRET), plain.stdout + plain.stderr);
      assert.match(plain.stdout, /credentials {4}provided API_TOKEN; missing none/);

      const json = runJson([...fixture.at, "dispatch", "nightly"], { env });
      assert.equal(json.status, 0, json.stdout);
      assert.ok(!json.stdout.includes(SECRET) && !json.stderr.includes(SECRET), json.stdout + json.stderr);
      assert.deepEqual(json.envelope.result!["env"], ["API_TOKEN", "NODE_OPTIONS", "PATH"]);
      assert.deepEqual(json.envelope.result!["credentials"], { provided: ["API_TOKEN"], missing: [] });
      assert.equal(json.envelope.result!["exec"], false);
      assert.equal(json.envelope.result!["exitCode"], undefined);

      const quiet = runOats([...fixture.at, "--quiet", "dispatch", "nightly"], { env });
      assert.ok(!quiet.stdout.includes(SECRET) && !quiet.stderr.includes(SECRET));

      // The audit log does not hold it either.
      assert.ok(!readFileSync(join(fixture.scope, ".agents/audit/audit.jsonl"), "utf8").includes(SECRET));
      assert.equal(existsSync(fixture.marker), false);
    },
  );
});

describe("oats approve / revoke input", () => {
  test(
    "Given a legacy bare sha256 digest, When approved, Then " +
      "invalid-artifact-reference (exit 4) and the ledger stays empty",
    () => {
      const fixture = captureFixture();
      const capture = prepared(fixture);
      const bare = capture.subject.integrity.replace(/^oats\.tree-exec\.v1:/, "");
      const refused = commandRefusal(
        [...fixture.at, "approve", "capture", "nightly", bare, "--reason", "legacy"],
        "invalid-artifact-reference",
        4,
        "approve",
      );
      assert.equal(refused.envelope.error!.details["expectedFormat"], "oats.tree-exec.v1");
      const human = runOats([...fixture.at, "approve", "capture", "nightly", bare, "--reason", "legacy"]);
      assert.equal(human.status, 4);
      assert.match(human.stderr, /^oats: invalid-artifact-reference: .*\n.*one exact oats\.tree-exec\.v1 digest/);
      assert.match(runOats([...fixture.at, "approvals"]).stdout, /^no approvals in \S+\ncheckpoint approvals ledger: /);
    },
  );

  test(
    "Given no --reason (or a blank one), When approving, Then a usage error " + "(exit 2) and nothing is recorded",
    () => {
      const fixture = captureFixture();
      const capture = prepared(fixture);
      commandRefusal([...fixture.at, "approve", ...subjectArgs(capture.subject)], "usage", 2, "approve");
      commandRefusal(
        [...fixture.at, "approve", ...subjectArgs(capture.subject), "--reason", "  "],
        "usage",
        2,
        "approve",
      );
      commandRefusal([...fixture.at, "revoke", ...subjectArgs(capture.subject)], "usage", 2, "revoke");
      assert.deepEqual(runJson([...fixture.at, "approvals"]).envelope.result!["approvals"], []);
    },
  );

  test(
    "Given an --operator flag, When approving, Then it is refused as " + "unknown: the operator is never an option",
    () => {
      const fixture = captureFixture();
      const capture = prepared(fixture);
      commandRefusal(
        [...fixture.at, "approve", ...subjectArgs(capture.subject), "--reason", "x", "--operator", "mallory@evil"],
        "usage",
        2,
        "approve",
      );
    },
  );
});

describe("oats queue", () => {
  test(
    "Given a damaged job file, When listed, Then every job is listed and the " + "command exits with the damage's code",
    () => {
      const fixture = captureFixture();
      const capture = queuedAndApproved(fixture);
      writeFileSync(join(fixture.scope, ".agents/queue/broken.json"), "{not json");
      const human = runOats([...fixture.at, "queue", "ls"]);
      assert.equal(human.status, 4, human.stderr);
      assert.match(human.stdout, /^broken DAMAGED invalid-artifact-store: /m);
      assert.match(human.stdout, new RegExp(`^nightly ${capture.id} capture created`, "m"));
      assert.match(human.stderr, /^oats: invalid-artifact-store: 1 of 2 queued jobs do not read back/);
      const json = commandRefusal([...fixture.at, "queue", "ls"], "invalid-artifact-store", 4, "queue ls");
      assert.equal(json.envelope.error!.details["jobs"].length, 2);
    },
  );

  test("Given an empty scope, When listed, Then no jobs and exit 0", () => {
    const fixture = captureFixture();
    const run = runOats([...fixture.at, "queue", "ls"]);
    assert.equal(run.status, 0);
    assert.equal(run.stdout, `no queued jobs in ${fixture.scope}\n`);
  });

  test(
    "Given a job id queued for one resolution, When re-queued for another " +
      "without --replace, Then invalid-input naming --replace; with --replace " +
      "it is re-pointed",
    () => {
      const fixture = captureFixture();
      const capture = queuedAndApproved(fixture);
      const other = captureFixture();
      writeFileSync(join(other.dir, "tool/bin/extra"), "x\n");
      const otherId = runOats([...fixture.at, "--quiet", "capture", "prepare", other.spec]).stdout.trim();
      assert.notEqual(otherId, capture.id);
      commandRefusal([...fixture.at, "queue", "add", otherId, "--job", "nightly"], "invalid-input", 4, "queue add");
      assert.match(runOats([...fixture.at, "queue", "add", otherId, "--job", "nightly"]).stderr, /--replace/);
      const replaced = runJson([
        ...fixture.at,
        "queue",
        "add",
        otherId,
        "--job",
        "nightly",
        "--replace",
        "--recurrence",
        "prepare-on-tick",
      ]);
      assert.equal(replaced.status, 0, replaced.stdout);
      assert.equal(replaced.envelope.result!["status"], "replaced");
      commandRefusal(
        [...fixture.at, "queue", "add", otherId, "--job", "nightly", "--recurrence", "hourly"],
        "usage",
        2,
        "queue add",
      );
    },
  );
});

describe("oats audit verify", () => {
  test(
    "Given an intact audit log, When verified, Then exit 0; Given one byte " +
      "of one line edited, Then integrity-mismatch (exit 5) naming that line",
    () => {
      const fixture = captureFixture();
      queuedAndApproved(fixture);
      const ok = runJson([...fixture.at, "audit", "verify"]);
      assert.equal(ok.status, 0, ok.stdout);
      assert.equal(ok.envelope.result!["ok"], true);
      const human = runOats([...fixture.at, "audit", "verify"]);
      assert.match(
        human.stdout,
        new RegExp(
          "^audit log verified: \\d+ entries, head sha256-[0-9a-f]{64}\n" +
            "checkpoint audit log: anchored by this account's checkpoint " +
            "\\(it still extends seq \\d+, sha256-[0-9a-f]{64}\\)\n$",
        ),
      );

      const log = join(fixture.scope, ".agents/audit/audit.jsonl");
      const lines = readFileSync(log, "utf8").split("\n");
      assert.ok(lines.length > 4);
      // Line 3: one byte of its principal changed (still valid, canonical JSON: the hash no longer matches).
      const target = lines[2]!;
      const at = target.indexOf(`"principal":"`) + `"principal":"`.length;
      lines[2] = `${target.slice(0, at)}${target[at] === "z" ? "y" : "z"}${target.slice(at + 1)}`;
      writeFileSync(log, lines.join("\n"));

      const broken = commandRefusal([...fixture.at, "audit", "verify"], "integrity-mismatch", 5, "audit verify");
      assert.deepEqual(broken.envelope.error!.details["brokenAt"], { line: 3, seq: 3, reason: "wrong-hash" });
      assert.match(broken.envelope.error!.message, /line 3 \(seq 3\): wrong-hash/);
      const brokenHuman = runOats([...fixture.at, "audit", "verify"]);
      assert.equal(brokenHuman.status, 5);
      assert.equal(brokenHuman.stdout, "");
      assert.match(
        brokenHuman.stderr,
        new RegExp(
          String.raw`^oats: integrity-mismatch: audit log \.agents\/audit\/audit\.jsonl ` +
            String.raw`is broken at line 3 \(seq 3\): wrong-hash\n.*never repairs`,
        ),
      );
      // audit show reads through the same check.
      commandRefusal([...fixture.at, "audit", "show"], "integrity-mismatch", 5, "audit show");
    },
  );

  test("Given a scope with no audit log, When verified, Then an empty chain verifies", () => {
    const fixture = captureFixture();
    const run = runJson([...fixture.at, "audit", "verify"]);
    assert.equal(run.status, 0);
    assert.equal(run.envelope.result!["entries"], 0);
  });
});

describe("capture spec refusals", () => {
  test(
    "Given an invalid capture spec, When prepared, Then invalid-input (exit " +
      "4) with a remedy about the capture spec, not plans or source directories",
    () => {
      const fixture = captureFixture();
      writeFileSync(
        fixture.spec,
        JSON.stringify({
          name: "nightly",
          executable: { tree: "./tool", path: "bin/run" },
          classification: "internal",
        }) + "\n",
      );
      const refused = commandRefusal(
        [...fixture.at, "capture", "prepare", fixture.spec],
        "invalid-input",
        4,
        "capture prepare",
      );
      assert.ok(refused.envelope.error!.details["spec"] !== undefined);
      const human = runOats([...fixture.at, "capture", "prepare", fixture.spec]);
      assert.equal(human.status, 4);
      const remedy = human.stderr.split("\n")[1]!;
      assert.match(remedy, /capture spec/);
      assert.doesNotMatch(remedy, /plan|source/);
    },
  );
});
