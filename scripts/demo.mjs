// `npm start`: a short demo of oats on temporary scopes, driving the built CLI
// (dist/cli/bin.js) as child processes, never through a shell. It retains the
// fixture capability, verifies it, copies the retained revision into a second
// scope, changes one byte there and shows the typed refusal. Exits 0 when
// every step behaved as expected. It then prepares, queues, approves and
// dispatches a capture of the same capability, and ends by showing the sealed
// run of that capture (`oats run show`).
//
// Every command line it prints pastes into a POSIX shell as it is (arguments quoted where a shell needs it, the
// scopes as $A and $B, which the demo's first lines set). OATS_DEMO_KEEP=1 keeps the scopes after the demo, so a
// printed line can be run again.
import { spawnSync } from "node:child_process";
import {
  chmodSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const bin = join(repo, "dist/cli/bin.js");
const payload = "fixtures/packages/hello/payload";
const lock = "fixtures/packages/hello/oats-lock.json";

if (!existsSync(bin)) {
  console.error("dist/cli/bin.js is missing: run `npm install` (or `npm run build`) first.");
  process.exit(1);
}

const scopeA = mkdtempSync(join(tmpdir(), "oats-demo-a-"));
const scopeB = mkdtempSync(join(tmpdir(), "oats-demo-b-"));
const inputs = `${scopeB}-inputs`;
const stateDir = join(inputs, "state");
const shown = (arg) => arg.replaceAll(scopeA, "$A").replaceAll(scopeB, "$B");
const keep = process.env.OATS_DEMO_KEEP === "1";
/** One argument as a POSIX shell word that means the argument, with the scopes as "$A" and "$B". */
function shellWord(arg) {
  const text = shown(arg);
  if (/^[\w@%+=:,./-]+$/.test(text)) return text;
  if (text !== arg) return `"${text.replace(/["\\`]/g, "\\$&")}"`;
  return `'${arg.replaceAll("'", "'\\''")}'`;
}
const indent = (text) =>
  text
    .trimEnd()
    .split("\n")
    .map((line) => `    ${line}`)
    .join("\n");

let failures = 0;
function say(text) {
  console.log(`\n${text}`);
}

function oats(args, expectStatus, check = () => true) {
  console.log(`\n  $ oats ${args.map(shellWord).join(" ")}`);
  // The operator's private log checkpoint goes with the demo's temporary files, not into ~/.local/state.
  const run = spawnSync(process.execPath, [bin, ...args], {
    cwd: repo,
    encoding: "utf8",
    env: { ...process.env, OATS_STATE_DIR: stateDir },
  });
  if (run.stdout) console.log(indent(shown(run.stdout)));
  if (run.stderr) console.log(indent(shown(run.stderr)).replace(/^ {4}/gm, "    (stderr) "));
  console.log(`    (exit ${run.status})`);
  if (run.status !== expectStatus || !check(run)) {
    failures += 1;
    console.log(`  !! expected exit ${expectStatus}${run.status === expectStatus ? " and a different output" : ""}`);
  }
  return run;
}

try {
  console.log("oats demo: retain a capability, verify it, and watch a tampered copy be refused.");
  console.log(`  A=${scopeA}   # scope A`);
  console.log(`  B=${scopeB}   # scope B`);

  say(
    "1. Retain the fixture capability 'demo.hello' into scope A. The lock " +
      "row names its\n   oats.tree-legacy.v0 integrity; oats copies the tree " +
      "into staging, hashes it while\n   copying, checks it against the lock " +
      "and its .oats-installation.json provenance,\n   re-verifies the copy " +
      "and only then renames it into place under its full digest.",
  );
  oats(["--scope", scopeA, "retain", payload, "--id", "demo.hello", "--lock", lock], 0, (run) =>
    run.stdout.startsWith("retained capability demo.hello"),
  );

  say(
    "2. Verify it: oats re-reads the stored revision (not the source, not " +
      "the network)\n   and compares the digest with the lock's integrity.",
  );
  oats(["--scope", scopeA, "verify", "demo.hello", "--lock", lock], 0, (run) =>
    run.stdout.startsWith("verified capability demo.hello"),
  );

  say("3. Where does it live? `oats path` only computes the path; it does not verify.");
  const integrity = JSON.parse(readFileSync(join(repo, lock), "utf8")).capabilities["demo.hello"].integrity;
  const pathRun = oats(["--scope", scopeA, "path", "demo.hello", integrity], 0);
  const revisionA = pathRun.stdout.trim();

  say(
    "4. Copy that revision into scope B at the same path, then change one " +
      "byte of one\n   file in the copy (what a package update, a stray editor " +
      "or a bad disk would do).",
  );
  const revisionB = join(scopeB, relative(scopeA, revisionA));
  mkdirSync(dirname(revisionB), { recursive: true });
  cpSync(revisionA, revisionB, { recursive: true, verbatimSymlinks: true, preserveTimestamps: true });
  // The revision's manifest (diagnostic only) comes along, so the refusal can name the damaged file.
  const manifest = (dir) => join(dirname(dir), `.manifest-${basename(dir)}.json`);
  if (existsSync(manifest(revisionA))) cpSync(manifest(revisionA), manifest(revisionB));
  const victim = join(revisionB, "oats.json");
  const bytes = readFileSync(victim);
  bytes[0] ^= 0x01;
  chmodSync(victim, statSync(victim).mode | 0o200);
  writeFileSync(victim, bytes);
  console.log(`    flipped one bit of the first byte of ${shown(victim)}`);

  say(
    "5. Verify the tampered copy. oats refuses with a typed error: code " +
      "integrity-mismatch,\n   exit 5, naming the expected and actual digests " +
      "and the first file that differs.\n   It repairs nothing.",
  );
  oats(
    ["--scope", scopeB, "verify", "demo.hello", "--lock", lock],
    5,
    (run) =>
      run.stderr.startsWith("oats: integrity-mismatch: ") &&
      run.stderr.includes("first difference: oats.json, content"),
  );

  say("6. The same refusal for programs: --json prints exactly one envelope line on stdout.");
  oats(["--scope", scopeB, "--json", "verify", "demo.hello", "--lock", lock], 5, (run) => {
    const lines = run.stdout.trim().split("\n");
    const envelope = lines.length === 1 ? JSON.parse(lines[0]) : {};
    return (
      envelope.ok === false && envelope.error?.code === "integrity-mismatch" && envelope.error?.kind === "mismatch"
    );
  });

  say("7. Scope A is untouched and still verifies.");
  oats(["--scope", scopeA, "verify", "demo.hello", "--lock", lock], 0);

  say(
    "8. Now a capture: queued work that runs demo.hello's bin/hello.mjs. The " +
      "spec names the\n   executable, the target and a classification config; " +
      "`capture prepare` retains the\n   tree under its oats.tree-exec.v1 " +
      "digest (which covers exec bits), pins the config's\n   exact bytes as a " +
      "blob, commits a content-addressed capture record, and prints its\n   " +
      "composition: everything that decides what runs (tree, entry, args, env, " +
      "credential\n   names, target, level, config) under one digest, and the " +
      "line that approves it.",
  );
  mkdirSync(inputs, { recursive: true });
  writeFileSync(
    join(inputs, "classification.yaml"),
    "schemaVersion: 1\nwings: {demo: internal}\nrepos: {}\ndefaults: " +
      "[{match: 'client-*', level: confidential}]\nfallback: " +
      "confidential\nprincipals: {}\n",
  );
  // The run gets only the pinned env and named credentials, so the spec pins PATH (hello.mjs starts with
  // #!/usr/bin/env node).
  const path = [dirname(process.execPath), "/usr/bin", "/bin"].join(":");
  // A capture runs as root only if its approved composition says so: the demo run as root says so.
  const privileged = process.geteuid?.() === 0 ? "privileged: true\n" : "";
  const spec = (args) =>
    writeFileSync(
      join(inputs, "capture.yaml"),
      `name: hello-nightly\nexecutable:\n  capability: demo.hello\n  dir: ` +
        `${JSON.stringify(resolve(repo, payload))}\n  lock: ` +
        `${JSON.stringify(resolve(repo, lock))}\n  path: bin/hello.mjs\n  args: ` +
        `${JSON.stringify(args)}\ntarget: {wing: demo}\nclassification: ` +
        `internal\nclassificationConfig: ./classification.yaml\nenv: {PATH: ` +
        `${JSON.stringify(path)}}\n${privileged}`,
    );
  spec(["scheduler"]);
  const prepared = oats(["--scope", scopeA, "capture", "prepare", join(inputs, "capture.yaml")], 0, (run) =>
    run.stdout.startsWith("prepared capture hello-nightly"),
  );
  const resolution = prepared.stdout.match(/resolution (sha256-[0-9a-f]{64})/)?.[1];
  const approveLine = prepared.stdout.match(
    /oats approve (composition hello-nightly oats\.json\.v1:sha256-[0-9a-f]{64})/,
  )?.[1];
  if (!resolution || !approveLine)
    throw new Error("capture prepare did not print a resolution id and the approve line of its composition");

  say(
    "9. Queue it, and try to dispatch before anyone approved it: refused " +
      "(approval-required,\n   exit 6) and nothing runs. Retaining or " +
      "preparing never approves anything.",
  );
  oats(["--scope", scopeA, "queue", "add", resolution, "--job", "hello-nightly-1"], 0);
  oats(
    ["--scope", scopeA, "dispatch", "hello-nightly-1", "--exec"],
    6,
    (run) => run.stderr.startsWith("oats: approval-required: ") && !run.stdout.includes("hello, scheduler"),
  );

  say(
    "10. Approve that exact composition, with the line prepare printed. The " +
      "ledger records\n    the composition itself, who approved it (this " +
      "process's own OS account, never a flag)\n    and why.",
  );
  oats(["--scope", scopeA, "approve", ...approveLine.split(" "), "--reason", "reviewed in the demo"], 0);

  say(
    "11. Dispatch it: oats re-reads the record, copies the executable tree " +
      "into a private\n    run directory while hashing it, checks the digest, " +
      "the approval (cross-checked\n    against the audit log) and the " +
      "classification, writes an fsync'd audit entry, and\n    only then runs " +
      "exactly the recorded argv, with only the pinned env, from that copy.\n  " +
      "  The child's exit code is oats's.",
  );
  oats(["--scope", scopeA, "dispatch", "hello-nightly-1", "--exec"], 0, (run) =>
    run.stdout.includes("hello, scheduler"),
  );

  say(
    "12. The spec's author changes only the arguments and re-prepares the " +
      "same tree. The\n    old approval does not cover the new composition: " +
      "dispatch is refused before anything\n    runs, and the refusal names " +
      "what changed (entrypoint.args).",
  );
  spec(["scheduler", "--everything"]);
  const changed = oats(["--scope", scopeA, "--quiet", "capture", "prepare", join(inputs, "capture.yaml")], 0);
  oats(["--scope", scopeA, "queue", "add", changed.stdout.trim(), "--job", "hello-nightly-2"], 0);
  oats(
    ["--scope", scopeA, "dispatch", "hello-nightly-2", "--exec"],
    6,
    (run) =>
      run.stderr.startsWith("oats: approval-required: ") &&
      run.stderr.includes("entrypoint.args") &&
      !run.stdout.includes("hello"),
  );

  say(
    "13. Every decision above is in the hash-chained audit log. `audit head` " +
      "prints the\n    heads of both logs: keep them elsewhere, and " +
      "`--expect-head` proves later that the\n    logs still extend them " +
      "(nothing was cut or rewritten).",
  );
  oats(["--scope", scopeA, "audit", "verify"], 0);
  const heads = oats(["--scope", scopeA, "--json", "audit", "head"], 0);
  const auditHead = JSON.parse(heads.stdout).result.audit.head;
  oats(["--scope", scopeA, "audit", "verify", "--expect-head", auditHead], 0);

  say(
    "14. fsck checks everything scope A holds: revisions re-hashed, records " +
      "(digest, canonical\n    bytes, schema, every artifact and blob they " +
      "name), blobs, the instance and job refs, the\n    approvals ledger and " +
      "the audit chain. It repairs nothing.",
  );
  oats(["--scope", scopeA, "fsck"], 0, (run) => /^checked .*no findings$/m.test(run.stdout));

  say("15. fsck of scope B finds the tampered revision: exit 5, the code of its most serious finding.");
  oats(
    ["--scope", scopeB, "fsck"],
    5,
    (run) =>
      /^DAMAGED {2}capability demo\.hello /m.test(run.stdout) && run.stderr.startsWith("oats: integrity-mismatch: "),
  );

  say(
    "16. The dispatch in step 11 was recorded as a run: its log (every line " +
      "stamped when it was\n    read), its exit status and result, sealed into " +
      "a record whose digest is the run's id, with\n    its start and end in " +
      "the audit log. `run verify` re-checks all three.",
  );
  const runs = oats(
    ["--scope", scopeA, "--json", "run", "ls"],
    0,
    (run) => JSON.parse(run.stdout).result.runs.length === 1,
  );
  const runId = JSON.parse(runs.stdout).result.runs[0]?.runId;
  if (!runId) throw new Error("run ls did not list the sealed run of step 11");
  oats(["--scope", scopeA, "run", "verify", runId], 0, (run) => run.stdout.startsWith("verified run "));
  oats(
    ["--scope", scopeA, "run", "show", runId.slice(0, 16)],
    0,
    (run) => /^\S+Z out hello, scheduler/m.test(run.stdout) && run.stdout.includes("# RESULT: OK"),
  );
} catch (error) {
  failures += 1;
  console.error(`demo failed: ${error instanceof Error ? error.message : String(error)}`);
} finally {
  if (keep) {
    console.log(`\nkept (OATS_DEMO_KEEP=1): A=${scopeA} B=${scopeB}, the inputs and OATS_STATE_DIR=${stateDir}`);
  } else {
    rmSync(scopeA, { recursive: true, force: true });
    rmSync(scopeB, { recursive: true, force: true });
    rmSync(inputs, { recursive: true, force: true });
  }
}

if (failures) {
  console.log(`\n${failures} step(s) did not behave as expected.`);
  process.exit(1);
}
console.log(
  "\nEverything behaved as expected: the retained copy verifies, the " +
    "tampered one is refused (exit 5),\nthe capture ran only once its exact " +
    "composition was approved, and its run is sealed and verifies.",
);
