/**
 * `oats push --to oci://…` and `oats pull` against a real registry (Debian's
 * docker-registry, CNCF distribution 2.8, started per file by
 * test/support/registry.ts) and real child processes (dist/cli/bin.js; `npm
 * run build` first). Two scopes share one registry: a capture prepared in
 * one is pushed, pulled into the other, refused there until a local
 * approval, then run. The executable leaves a marker, so "nothing ran" is
 * checked, not assumed.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { REPO, runJson, runOats, snapshotTree, tempDir } from "./helpers.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";
import { OCI_MANIFEST_MEDIA_TYPE } from "../src/fleet/mapping.js";
import { getManifest, putManifest } from "../src/oci/manifests.js";
import { openRegistry } from "../src/fleet/target.js";

let registry: Registry | null = null;
const skip = registryBinary() === null ? NO_REGISTRY : false;

before(async () => {
  if (!skip) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
});

function reg(): Registry {
  assert.ok(registry, "the registry was started");
  return registry;
}

interface Fixture {
  dir: string;
  scope: string;
  spec: string;
  marker: string;
}

/** A capture tool (touches the marker when it runs), a classification config and a spec, and an empty scope. */
function captureFixture(name = "nightly"): Fixture {
  const dir = tempDir("oats-fleet-");
  const marker = join(dir, "marker");
  mkdirSync(join(dir, "tool/bin"), { recursive: true });
  mkdirSync(join(dir, "tool/share"), { recursive: true });
  writeFileSync(
    join(dir, "tool/bin/run"),
    ["#!/bin/sh", `touch '${marker}'`, 'echo "capture ran $1"', "exit 0", ""].join("\n"),
  );
  chmodSync(join(dir, "tool/bin/run"), 0o755);
  writeFileSync(join(dir, "tool/share/notes.txt"), "x".repeat(5000));
  writeFileSync(
    join(dir, "class.yaml"),
    JSON.stringify({ schemaVersion: 1, wings: {}, repos: {}, defaults: [], fallback: "internal", principals: {} }) +
      "\n",
  );
  writeFileSync(join(dir, "profile.yaml"), "schemaVersion: 1\nretention:\n  keepLast: 3\n");
  writeFileSync(
    join(dir, "spec.yaml"),
    `${JSON.stringify({
      name,
      executable: { tree: "./tool", path: "bin/run", args: ["--fast"] },
      target: { wing: "x" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      profile: "./profile.yaml",
      env: { PATH: "/usr/bin:/bin" },
      // Tests run as root: only a privileged composition may run there (privilege.ts).
      privileged: process.geteuid?.() === 0,
    })}\n`,
  );
  const scope = join(dir, "scope");
  mkdirSync(scope);
  return { dir, scope, spec: join(dir, "spec.yaml"), marker };
}

function prepared(fixture: Fixture) {
  const run = runJson(["--scope", fixture.scope, "capture", "prepare", fixture.spec]);
  assert.equal(run.status, 0, run.stdout + run.stderr);
  return run.envelope.result as {
    id: string;
    approve: string;
    composition: { subject: { kind: string; key: string; integrity: string } };
  };
}

function freshScope(): string {
  const scope = join(tempDir("oats-fleet-b-"), "scope");
  mkdirSync(scope);
  return scope;
}

function push(scope: string, refs: string[], to: string, extra: string[] = []) {
  const run = runJson(["--scope", scope, "push", ...refs, "--to", to, ...extra]);
  assert.equal(run.status, 0, run.stdout + run.stderr);
  return run.envelope.result as {
    manifests: { digest: string; resolution: string | null; tags: string[]; status: string }[];
    blobs: { digest: string; size: number; what: string; status: string }[];
    uploadedBytes: number;
  };
}

/** Every file and directory of the registry's storage with its mtime: a push that writes nothing leaves it exactly as
 * it was. */
function storageState(root: string): string[] {
  const rows: string[] = [];
  const walk = (dir: string, rel: string) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      const stats = lstatSync(path);
      rows.push(`${rel}/${name} ${stats.isDirectory() ? "D" : "F"} ${stats.size} ${stats.mtimeMs}`);
      if (stats.isDirectory()) walk(path, `${rel}/${name}`);
    }
  };
  walk(root, "");
  return rows;
}

function expectRefusedPull(reference: string, code: string, reason?: string) {
  const scope = freshScope();
  writeFileSync(join(scope, "keep.txt"), "already here\n");
  const before = snapshotTree(scope);
  const run = runJson(["--scope", scope, "pull", reference]);
  assert.equal(run.envelope.ok, false, run.stdout);
  assert.equal(run.envelope.error!.code, code, run.stdout);
  if (reason !== undefined) assert.equal(run.envelope.error!.details["reason"], reason, run.stdout);
  assert.deepEqual(snapshotTree(scope), before, "the scope is byte-for-byte as it was");
  return run;
}

describe("oats push / oats pull through a real registry", { skip }, () => {
  test(
    "Given a destination that is not a registry, or a pull reference without " +
      "a tag or digest When run Then each is refused before anything is read",
    () => {
      const fixture = captureFixture("refs");
      const capture = prepared(fixture);
      const wrong = runJson(["--scope", fixture.scope, "push", capture.id, "--to", "ftp://127.0.0.1/x"]);
      assert.equal(wrong.status, 2, wrong.stdout);
      assert.equal(wrong.envelope.error!.code, "usage");
      const plainRemote = runJson([
        "--scope",
        fixture.scope,
        "push",
        capture.id,
        "--to",
        "oci://registry.example/x",
        "--insecure",
      ]);
      assert.equal(plainRemote.envelope.error!.code, "registry-refused", plainRemote.stdout);
      assert.equal(plainRemote.envelope.error!.details["reason"], "insecure-remote");
      const untagged = expectRefusedPull(reg().ref("fleet/demo"), "invalid-artifact-reference");
      assert.equal(untagged.status, 4);
    },
  );

  test(
    "Given a capture prepared in scope A When it is pushed and pulled into " +
      "scope B Then the record id is the same, dispatch in B is refused until " +
      "B approves it, and then it runs",
    () => {
      const fixture = captureFixture();
      const capture = prepared(fixture);
      const pushed = push(fixture.scope, [capture.id], reg().ref("fleet/demo"));
      assert.equal(pushed.manifests.length, 1);
      assert.equal(pushed.manifests[0]!.resolution, capture.id);
      assert.deepEqual(pushed.manifests[0]!.tags, [`oats-json-v1-${capture.id.slice(7)}`, "nightly"]);
      assert.deepEqual(
        pushed.blobs.map((blob) => blob.status),
        pushed.blobs.map(() => "uploaded"),
        "a fresh registry lacks every blob",
      );
      assert.equal(
        pushed.blobs.length,
        6,
        "the tree, four pinned blobs (spec, profile, classification config, composition), the record",
      );

      // Pull by the human tag into a second scope on the "same fleet".
      const scopeB = freshScope();
      const pulled = runJson(["--scope", scopeB, "pull", reg().ref("fleet/demo", ":nightly")]);
      assert.equal(pulled.status, 0, pulled.stdout + pulled.stderr);
      const result = pulled.envelope.result!;
      assert.deepEqual(
        result["resolutions"],
        [{ id: capture.id, status: "written" }],
        "the pulled record has the pushing host's id",
      );
      assert.equal(result["digest"], pushed.manifests[0]!.digest);
      assert.deepEqual(result["approve"][0].subject, capture.composition.subject);
      assert.equal(
        result["approve"][0].command,
        capture.approve,
        "pull prints the very approve line prepare printed on the pushing host",
      );

      // Human mode names the approve line and says it is not approved.
      const again = runOats(["--scope", scopeB, "pull", reg().ref("fleet/demo", ":nightly")]);
      assert.equal(again.status, 0, again.stderr);
      assert.match(again.stdout, /kept resolution sha256-/);
      assert.match(again.stdout, /not approved here: capture nightly/);
      assert.ok(again.stdout.includes(capture.approve));

      // B holds it, but pulling approved nothing: dispatch is refused and nothing runs.
      assert.equal(runOats(["--scope", scopeB, "queue", "add", capture.id, "--job", "nightly"]).status, 0);
      const refused = runJson(["--scope", scopeB, "dispatch", "nightly", "--exec"]);
      assert.equal(refused.status, 6, refused.stdout + refused.stderr);
      assert.equal(refused.envelope.error!.code, "approval-required");
      assert.equal(existsSync(fixture.marker), false, "nothing ran");

      const subject = capture.composition.subject;
      const approved = runOats([
        "--scope",
        scopeB,
        "approve",
        subject.kind,
        subject.key,
        subject.integrity,
        "--reason",
        "reviewed on host B",
      ]);
      assert.equal(approved.status, 0, approved.stderr);
      const ran = runOats(["--scope", scopeB, "dispatch", "nightly", "--exec"]);
      assert.equal(ran.status, 0, ran.stdout + ran.stderr);
      assert.match(ran.stdout, /capture ran --fast/);
      assert.equal(existsSync(fixture.marker), true);
      assert.equal(runOats(["--scope", scopeB, "fsck"]).status, 0, "scope B is clean");
    },
  );

  test(
    "Given a pushed resolution When it is pushed a second time Then nothing " +
      "is uploaded or written: the registry's storage is exactly as it was",
    () => {
      const fixture = captureFixture("twice");
      const capture = prepared(fixture);
      const to = reg().ref("fleet/twice");
      const first = push(fixture.scope, [capture.id], to);
      assert.ok(first.uploadedBytes > 0);
      const before = storageState(reg().root);
      // The same repository named as oci:// with --insecure (plain HTTP, allowed for a loopback registry).
      const second = push(fixture.scope, [capture.id], to.replace(/^http:/, "oci:"), ["--insecure"]);
      assert.equal(second.uploadedBytes, 0);
      assert.deepEqual(
        second.blobs.filter((blob) => blob.status === "uploaded"),
        [],
      );
      assert.equal(second.manifests[0]!.status, "kept");
      assert.equal(second.manifests[0]!.digest, first.manifests[0]!.digest);
      assert.deepEqual(storageState(reg().root), before, "no file of the registry's storage was written");
    },
  );

  test(
    "Given a resolution's tag rewritten in the registry to a manifest that " +
      "is not exactly ours When it is pushed again Then push does not keep it: " +
      "it pushes its own manifest under the tag again",
    async () => {
      const fixture = captureFixture("retagged");
      const capture = prepared(fixture);
      const to = reg().ref("fleet/retagged");
      const first = push(fixture.scope, [capture.id], to);
      const tag = `oats-json-v1-${capture.id.slice(7)}`;
      const { session } = openRegistry(to);
      const served = await getManifest(session, tag, { accept: [OCI_MANIFEST_MEDIA_TYPE] });
      const altered = JSON.parse(served.bytes.toString());
      altered.annotations["vnd.oats.note"] = "written by someone else";
      await putManifest(session, tag, Buffer.from(JSON.stringify(altered)), OCI_MANIFEST_MEDIA_TYPE);
      const second = push(fixture.scope, [capture.id], to);
      assert.equal(second.manifests[0]!.status, "pushed");
      assert.equal(second.uploadedBytes, 0, "every blob was present");
      assert.equal(
        (await getManifest(session, tag, { accept: [OCI_MANIFEST_MEDIA_TYPE] })).digest,
        first.manifests[0]!.digest,
        "the tag names our manifest again",
      );
    },
  );

  test(
    "Given a tree pushed without a record When the registry already has its " +
      "layer Then a second trees push HEADs it and uploads nothing",
    () => {
      const fixture = captureFixture("bare");
      prepared(fixture);
      const ls = runJson(["--scope", fixture.scope, "ls"]);
      const tree = (
        ls.envelope.result!["revisions"] as {
          kind: string;
          key: string;
          integrity: { format: string; value: string };
        }[]
      ).find((row) => row.key === "bare")!;
      const ref = `${tree.kind}:${tree.key}@${tree.integrity.format}:${tree.integrity.value}`;
      const to = reg().ref("fleet/bare", ":v1");
      const first = push(fixture.scope, [ref], to);
      assert.deepEqual(first.manifests[0]!.tags, ["v1"]);
      const second = push(fixture.scope, [ref], to);
      assert.deepEqual(
        second.blobs.map((blob) => blob.status),
        ["present", "present"],
        "the layer and the empty config",
      );
      assert.equal(second.manifests[0]!.digest, first.manifests[0]!.digest, "the same trees give the same manifest");
      const scopeB = freshScope();
      const pulled = runJson(["--scope", scopeB, "pull", to]);
      assert.equal(pulled.status, 0, pulled.stdout);
      assert.deepEqual(pulled.envelope.result!["artifacts"], [
        {
          kind: "capture",
          key: "bare",
          integrity: `${tree.integrity.format}:${tree.integrity.value}`,
          status: "retained",
        },
      ]);
    },
  );

  test(
    "Given a layer corrupted or truncated inside the registry's storage When " +
      "it is pulled Then the pull is refused (integrity-mismatch) and the " +
      "scope is byte-for-byte unchanged",
    () => {
      const fixture = captureFixture("damaged");
      const capture = prepared(fixture);
      const pushed = push(fixture.scope, [capture.id], reg().ref("fleet/damaged"));
      const tree = pushed.blobs.find((blob) => blob.what.startsWith("capture damaged"))!;
      const data = reg().blobPath(tree.digest);
      const original = readFileSync(data);
      const flipped = Buffer.from(original);
      // A byte inside the tool's file content: the tar still parses; only the digests can tell.
      const at = flipped.indexOf("capture ran");
      assert.ok(at > 0);
      flipped[at] = "C".charCodeAt(0);
      writeFileSync(data, flipped);
      const run = expectRefusedPull(reg().ref("fleet/damaged", ":damaged"), "integrity-mismatch");
      assert.equal(run.status, 5);
      assert.equal(run.envelope.error!.details["expected"], tree.digest);

      truncateSync(data, original.length - 1024);
      expectRefusedPull(reg().ref("fleet/damaged", ":damaged"), "integrity-mismatch", "size");

      // The record (the manifest's config) edited in place: its digest is the resolution id.
      writeFileSync(data, original);
      const record = reg().blobPath(`sha256:${capture.id.slice(7)}`);
      const recordBytes = readFileSync(record);
      writeFileSync(record, Buffer.from(recordBytes.toString("utf8").replace('"damaged"', '"damagex"')));
      expectRefusedPull(reg().ref("fleet/damaged", ":damaged"), "integrity-mismatch");
      writeFileSync(record, recordBytes);
      const healed = runJson(["--scope", freshScope(), "pull", reg().ref("fleet/damaged", ":damaged")]);
      assert.equal(
        healed.status,
        0,
        "the restored blobs pull cleanly (the refusals above were the damage, nothing else)",
      );
    },
  );

  test(
    "Given two real processes pushing the same resolution at once When both " +
      "finish Then both succeed with the same manifest and the result pulls cleanly",
    async () => {
      const fixture = captureFixture("racing");
      const capture = prepared(fixture);
      const to = reg().ref("fleet/racing");
      const once = () =>
        new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve) => {
          const child = spawn(
            process.execPath,
            [join(REPO, "dist/cli/bin.js"), "--json", "--scope", fixture.scope, "push", capture.id, "--to", to],
            { stdio: ["ignore", "pipe", "pipe"] },
          );
          let stdout = "";
          let stderr = "";
          child.stdout.on("data", (chunk) => (stdout += chunk));
          child.stderr.on("data", (chunk) => (stderr += chunk));
          child.on("close", (status) => resolve({ status, stdout, stderr }));
        });
      const [a, b] = await Promise.all([once(), once()]);
      assert.equal(a.status, 0, a.stdout + a.stderr);
      assert.equal(b.status, 0, b.stdout + b.stderr);
      const digestOf = (run: { stdout: string }) => JSON.parse(run.stdout).result.manifests[0].digest;
      assert.equal(digestOf(a), digestOf(b), "both pushers produced the same manifest bytes");
      const pulled = runJson(["--scope", freshScope(), "pull", reg().ref("fleet/racing", `@${digestOf(a)}`)]);
      assert.equal(pulled.status, 0, pulled.stdout);
      assert.deepEqual(pulled.envelope.result!["resolutions"], [{ id: capture.id, status: "written" }]);
    },
  );
});
