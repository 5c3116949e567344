/**
 * A principal that cannot be forged from inside. An
 * unprivileged user (nobody) who runs oats inside `unshare --user
 * --map-root-user --uts` after `hostname forged` is uid 0 on host "forged"
 * by every OS call oats used to ask; the classification config reserves a
 * confidential capture for `root@forged`. Both `approve` and `dispatch` must
 * be refused with classification-refused (reason user-namespace) and write
 * nothing: not the ledger, not the audit log, not the capture's marker.
 * The pure parsing of uid_map/gid_map text is unit-tested too.
 */
import assert from "node:assert/strict";
import { spawnSync, type SpawnSyncOptions } from "node:child_process";
import {
  chmodSync,
  chownSync,
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { hostname, userInfo } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { OatsError } from "../src/core/errors.js";
import {
  PROC_USER_INIT_INO,
  assertInitialUserNamespace,
  currentPrincipal,
  isInitialIdMap,
  parseIdMap,
} from "../src/ledger/principal.js";
import { currentPrincipal as reexported } from "../src/captures/classification.js";
import { REPO, runOats, snapshotTree, tempDir } from "./helpers.js";

const NOBODY = 65534;

describe("parseIdMap / isInitialIdMap (pure)", () => {
  test(
    "Given the initial namespace's map as the kernel prints it, Then it " +
      "parses to one identity line over the whole range and is initial",
    () => {
      const lines = parseIdMap("         0          0 4294967295\n");
      assert.deepEqual(lines, [{ inside: 0, outside: 0, count: 4294967295 }]);
      assert.equal(isInitialIdMap(lines), true);
    },
  );

  test(
    "Given the maps of `unshare --user --map-root-user` and of a partial " +
      "identity, Then they parse and are not initial",
    () => {
      for (const text of [
        "         0       1000          1\n",
        "0 65534 1\n",
        "0 0 1\n",
        "0 0 4294967294\n",
        "1 1 4294967295\n",
        "0 0 1000\n1000 1000 4294966295\n",
      ]) {
        const lines = parseIdMap(text);
        assert.ok(lines !== null && lines.length > 0, text);
        assert.equal(isInitialIdMap(lines), false, JSON.stringify(text));
      }
    },
  );

  test(
    "Given text that is not a map (empty, two fields, signs, hex, a number " +
      "past 2^32-1, words), Then null, which is never initial",
    () => {
      for (const text of [
        "",
        "\n",
        "0 0\n",
        "-1 0 4294967295\n",
        "0x0 0 4294967295\n",
        "0 0 4294967296\n",
        "0 0 99999999999\n",
        "zero zero all\n",
        "0 0 4294967295 1\n",
      ]) {
        assert.equal(parseIdMap(text), null, JSON.stringify(text));
        assert.equal(isInitialIdMap(parseIdMap(text)), false);
      }
    },
  );

  test("Given tabs and several blanks between fields, Then they parse like spaces", () => {
    assert.equal(isInitialIdMap(parseIdMap("0\t0\t 4294967295")), true);
  });
});

describe("currentPrincipal in this process", () => {
  test(
    "Given the test runs in the initial user namespace, Then the principal " +
      "is the effective user's account @ uname's host, also through classification.ts",
    () => {
      assert.equal(
        statSync("/proc/self/ns/user").ino,
        PROC_USER_INIT_INO,
        "the test runner itself is in the initial user namespace",
      );
      assert.equal(currentPrincipal(), `${userInfo().username}@${hostname()}`);
      assert.equal(reexported, currentPrincipal);
    },
  );

  test(
    "Given a directory that is not procfs posing as /proc (same layout, " +
      "initial-looking maps), When checked, Then classification-refused " +
      "namespace-unverifiable",
    () => {
      const fake = tempDir("oats-fake-proc-");
      mkdirSync(join(fake, "self", "ns"), { recursive: true });
      writeFileSync(join(fake, "self", "uid_map"), "0 0 4294967295\n");
      writeFileSync(join(fake, "self", "gid_map"), "0 0 4294967295\n");
      assert.throws(
        () => assertInitialUserNamespace(fake),
        (error: unknown) =>
          error instanceof OatsError &&
          error.code === "classification-refused" &&
          error.details["reason"] === "namespace-unverifiable",
      );
    },
  );
});

describe("currentPrincipal under a setuid node", () => {
  test(
    "Given node made setuid nobody and run by root (real uid 0, effective " +
      "uid 65534), When the principal is asked, Then classification-refused setuid",
    (t) => {
      if (process.getuid?.() !== 0) {
        t.skip("SKIPPED setuid principal test: needs root to make a setuid copy of node");
        return;
      }
      const dir = tempDir("oats-setuid-");
      chmodSync(dir, 0o755);
      const node = join(dir, "node");
      copyFileSync(process.execPath, node);
      chownSync(node, NOBODY, NOBODY);
      chmodSync(node, 0o4755);
      const script = join(dir, "ask.mjs");
      writeFileSync(
        script,
        `import { currentPrincipal } from ${JSON.stringify(join(REPO, "dist/ledger/principal.js"))};\n` +
          "try { console.log(JSON.stringify({ ids: [process.getuid(), " +
          "process.geteuid()], principal: currentPrincipal() })); }\n" +
          "catch (error) { console.log(JSON.stringify({ ids: [process.getuid(), " +
          "process.geteuid()], code: error.code, reason: error.details.reason })); }\n",
      );
      chmodSync(script, 0o644);
      const run = spawnSync(node, [script], { encoding: "utf8" });
      assert.equal(run.status, 0, run.stderr);
      const answer = JSON.parse(run.stdout) as { ids: number[]; code?: string; reason?: string };
      if (answer.ids[1] !== NOBODY) {
        t.skip(`SKIPPED setuid principal test: the setuid bit had no effect here (the temp directory mounted nosuid?)`);
        return;
      }
      assert.deepEqual(answer, { ids: [0, NOBODY], code: "classification-refused", reason: "setuid" });
    },
  );
});

/** Why user namespaces cannot be tried here, or null when they can (as nobody, the way an attacker would). */
function userNamespacesUnavailable(): string | null {
  if (process.getuid?.() !== 0) return "the test must run as root to spawn the attacker as nobody";
  let max = "";
  try {
    max = readFileSync("/proc/sys/user/max_user_namespaces", "utf8").trim();
  } catch {
    return "/proc/sys/user/max_user_namespaces is unreadable";
  }
  if (Number(max) <= 0) return `user namespaces are disabled (max_user_namespaces=${max})`;
  const trial = spawnSync("unshare", ["--user", "--map-root-user", "--uts", "sh", "-c", "hostname forged && id -u"], {
    uid: NOBODY,
    gid: NOBODY,
    encoding: "utf8",
  });
  if (trial.error || trial.status !== 0 || trial.stdout.trim() !== "0")
    return `a trial unshare as nobody failed: ${trial.error?.message ?? trial.stderr.trim()}`;
  return null;
}

/** Every directory from / to `dir` must be traversable by nobody, and the CLI's files readable. */
function assertReachableByNobody(paths: string[]): void {
  for (const path of paths) {
    const probe = spawnSync("test", ["-r", path], { uid: NOBODY, gid: NOBODY });
    assert.equal(probe.status, 0, `nobody cannot read ${path}; the attack test needs the built CLI reachable`);
  }
}

function chownTree(path: string, uid: number, gid: number): void {
  chownSync(path, uid, gid);
  if (!statSync(path).isDirectory()) return;
  for (const name of readdirSync(path)) {
    const child = join(path, name);
    if (lstatSync(child).isSymbolicLink()) continue;
    chownTree(child, uid, gid);
  }
}

describe("oats as nobody inside `unshare --user --map-root-user --uts` (the forged root@forged)", () => {
  test("Given a confidential capture reserved for root@forged, approved and " +
    "queued by root, in a scope nobody may write, When nobody forges " +
    "root@forged and runs approve and dispatch, Then both are " +
    "classification-refused user-namespace and nothing is written or run", {
    timeout: 180_000,
  }, (t) => {
    const reason = userNamespacesUnavailable();
    if (reason !== null) {
      t.skip(`SKIPPED principal forgery test: ${reason}`);
      return;
    }
    const bin = join(REPO, "dist/cli/bin.js");
    assertReachableByNobody([process.execPath, bin, join(REPO, "node_modules/commander/package.json")]);

    const dir = tempDir("oats-forge-");
    chmodSync(dir, 0o755);
    const marker = join(dir, "marker");
    mkdirSync(join(dir, "tool/bin"), { recursive: true });
    writeFileSync(join(dir, "tool/bin/run"), `#!/bin/sh\ntouch '${marker}'\n`);
    chmodSync(join(dir, "tool/bin/run"), 0o755);
    writeFileSync(
      join(dir, "class.yaml"),
      JSON.stringify({
        schemaVersion: 1,
        wings: { vault: "confidential" },
        repos: {},
        defaults: [],
        fallback: "internal",
        principals: { "root@forged": "sovereign" },
      }) + "\n",
    );
    writeFileSync(
      join(dir, "spec.yaml"),
      JSON.stringify({
        name: "vault-export",
        executable: { tree: "./tool", path: "bin/run", args: [] },
        target: { wing: "vault" },
        classification: "confidential",
        classificationConfig: "./class.yaml",
        env: { PATH: "/usr/bin:/bin" },
      }) + "\n",
    );
    const scope = join(dir, "scope");
    mkdirSync(scope);
    const at = ["--json", "--scope", scope];
    const prepared = runOats([...at, "capture", "prepare", join(dir, "spec.yaml")]);
    assert.equal(prepared.status, 0, prepared.stdout + prepared.stderr);
    const result = JSON.parse(prepared.stdout).result as {
      id: string;
      subject: { kind: string; key: string; integrity: string };
    };
    const subject = [result.subject.kind, result.subject.key, result.subject.integrity];
    for (const args of [
      ["approve", ...subject, "--reason", "reviewed by root"],
      ["queue", "add", result.id, "--job", "nightly"],
    ]) {
      const run = runOats([...at, ...args]);
      assert.equal(run.status, 0, run.stdout + run.stderr);
    }
    // The scope is nobody's to write: without the check, nothing but the principal would stop the forgery.
    chownTree(dir, NOBODY, NOBODY);
    const before = snapshotTree(scope);

    const forged = (args: string[]) => {
      const options: SpawnSyncOptions = {
        uid: NOBODY,
        gid: NOBODY,
        cwd: dir,
        env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", HOME: dir },
        encoding: "utf8",
      };
      const run = spawnSync(
        "unshare",
        [
          "--user",
          "--map-root-user",
          "--uts",
          "sh",
          "-c",
          'hostname forged && [ "$(id -u)@$(hostname)" = "0@forged" ] && exec "$0" "$@"',
          process.execPath,
          bin,
          ...at,
          ...args,
        ],
        options,
      );
      const stdout = String(run.stdout);
      assert.match(stdout, /^[^\n]+\n$/, `one envelope (stderr ${String(run.stderr)})`);
      return {
        status: run.status,
        envelope: JSON.parse(stdout) as { ok: boolean; error?: { code: string; details: Record<string, unknown> } },
      };
    };
    for (const args of [
      ["approve", ...subject, "--reason", "forged operator"],
      ["revoke", ...subject, "--reason", "forged operator"],
      ["dispatch", "nightly", "--exec"],
      ["dispatch", "nightly"],
    ]) {
      const run = forged(args);
      assert.equal(run.envelope.ok, false, `${args[0]}: ${JSON.stringify(run.envelope)}`);
      assert.equal(run.envelope.error!.code, "classification-refused", JSON.stringify(run.envelope));
      assert.equal(run.envelope.error!.details["reason"], "user-namespace", JSON.stringify(run.envelope));
      assert.notEqual(run.status, 0);
      // approve and revoke try to audit their refusal; the principal refuses that too, so the error says it was
      // not audited.
      if (args[0] !== "dispatch")
        assert.equal(
          typeof (run.envelope.error!.details["audit"] as { unavailable?: unknown } | undefined)?.unavailable,
          "string",
          JSON.stringify(run.envelope),
        );
    }
    assert.equal(existsSync(marker), false, "the capture never ran");
    assert.deepEqual(snapshotTree(scope), before, "nothing written: no ledger entry, no audit entry, no dispatch");

    // The same attacker with a mount namespace too: another of nobody's processes, still in the initial user
    // namespace, lends its /proc entries (its ns directory, its whole /proc/<pid>, its uid_map and gid_map,
    // each bind-mounted over ours). Following its namespace link then needs ptrace access to it, which a process
    // in a child user namespace lacks: still refused, still nothing written.
    // Last, no directory lent and the maps replaced by a file of the attacker's own that reads as the initial map:
    // only the namespace inode tells. (Lent maps would not do: the kernel prints a map relative to the
    // reader's namespace.)
    for (const lend of ["ns", "", null]) {
      const lendDir = lend === null ? "" : `mount --bind /proc/'"$lender"'/${lend} /proc/$$/${lend} && `;
      const maps = lend === null ? `"$HOME/map"` : `/proc/'"$lender"'/uid_map`;
      const gidMaps = lend === null ? `"$HOME/map"` : `/proc/'"$lender"'/gid_map`;
      const script = [
        "printf '0 0 4294967295\\n' > \"$HOME/map\"",
        "sleep 60 & lender=$!",
        `unshare --user --map-root-user --uts --mount sh -c 'hostname forged && ` +
          `${lendDir}mount --bind ${maps} /proc/$$/uid_map && mount --bind ` +
          `${gidMaps} /proc/$$/gid_map && exec "$0" "$@"' "$@"`,
        "status=$?; kill $lender; exit $status",
      ].join("\n");
      const run = spawnSync(
        "sh",
        [
          "-c",
          script,
          "attacker",
          process.execPath,
          bin,
          ...at,
          "approve",
          ...subject,
          "--reason",
          "forged with mounts",
        ],
        {
          uid: NOBODY,
          gid: NOBODY,
          cwd: dir,
          env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin", HOME: dir },
          encoding: "utf8",
        },
      );
      assert.match(run.stdout, /^[^\n]+\n$/, `one envelope (stderr ${run.stderr})`);
      const envelope = JSON.parse(run.stdout) as {
        ok: boolean;
        error?: { code: string; details: Record<string, unknown> };
      };
      assert.equal(envelope.ok, false, JSON.stringify(envelope));
      assert.equal(envelope.error!.code, "classification-refused", JSON.stringify(envelope));
      assert.equal(
        envelope.error!.details["reason"],
        lend === null ? "user-namespace" : "namespace-unverifiable",
        JSON.stringify(envelope),
      );
      if (lend === null)
        assert.equal(
          isInitialIdMap(parseIdMap(String(envelope.error!.details["uidMap"]))),
          true,
          "the attacker's maps read as the initial ones: only the namespace inode refused",
        );
    }
    assert.deepEqual(snapshotTree(scope), before, "nothing written by the mount variants either");
  });
});
