/**
 * Signed, portable evidence through a real registry (Debian's docker-registry,
 * CNCF distribution 2.8, which has no referrers API: the referrers tag schema
 * is what runs here) and real child processes (dist/cli/bin.js), with two
 * operators, each with a private state directory of its own (OATS_STATE_DIR):
 *
 * A makes a key, approves a capture (a signed statement) and pushes it; B
 * trusts A's key for approvals, pulls, and dispatches under `--approved-by`
 * without any local approval; B's run is a signed statement too, which B
 * pushes; A trusts B's key for runs, pulls the statement and the run's
 * evidence, and `oats attestation verify` believes it. Every bundle is then
 * verified by the Sigstore project's own verifier (@sigstore/verify), and
 * its subjects against digests this test computes itself. A trust removed
 * stops the dispatch; no key material appears in any output or file.
 */
import assert from "node:assert/strict";
import { createHash, createPublicKey } from "node:crypto";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { runJson, tempDir } from "./helpers.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";

let registry: Registry | null = null;
const skip = registryBinary() === null ? NO_REGISTRY : false;
const states: string[] = [];

before(async () => {
  if (!skip) registry = await startRegistry();
});
after(async () => {
  await registry?.stop();
  for (const dir of states) rmSync(dir, { recursive: true, force: true });
});

function reg(): Registry {
  assert.ok(registry, "the registry was started");
  return registry;
}

/** An operator: a scope and a private state directory of its own; every output it sees is kept for the key scan. */
class Operator {
  readonly state = mkdtempSync(join(tmpdir(), "oats-attest-state-"));
  readonly outputs: string[] = [];
  constructor(readonly scope: string) {
    states.push(this.state);
  }

  run(args: string[]) {
    const run = runJson(["--scope", this.scope, ...args], { env: { OATS_STATE_DIR: this.state } });
    this.outputs.push(run.stdout, run.stderr);
    return run;
  }

  ok(args: string[]): Record<string, any> {
    const run = this.run(args);
    assert.equal(run.status, 0, `${args.join(" ")}: ${run.stdout}${run.stderr}`);
    return run.envelope.result!;
  }

  refused(args: string[], code: string, reason?: string) {
    const run = this.run(args);
    assert.equal(run.envelope.ok, false, `${args.join(" ")} was not refused: ${run.stdout}`);
    assert.equal(run.envelope.error!.code, code, run.stdout);
    if (reason !== undefined) assert.equal(run.envelope.error!.details["reason"], reason, run.stdout);
    return run;
  }

  /** The private key's bytes in every form they could leak in. */
  secretForms(): string[] {
    const file = JSON.parse(readFileSync(join(this.state, "keys/signing-key.json"), "utf8")) as { privateKey: string };
    const der = Buffer.from(file.privateKey, "base64");
    const seed = der.subarray(der.length - 32);
    return [
      file.privateKey,
      seed.toString("hex"),
      seed.toString("base64"),
      seed.toString("base64url"),
      seed.toString("latin1"),
    ];
  }
}

interface Fixture {
  dir: string;
  spec: string;
  marker: string;
}

function captureFixture(name: string): Fixture {
  const dir = tempDir("oats-attest-");
  const marker = join(dir, "marker");
  mkdirSync(join(dir, "tool/bin"), { recursive: true });
  writeFileSync(
    join(dir, "tool/bin/run"),
    ["#!/bin/sh", `touch '${marker}'`, 'echo "capture ran $1"', "exit 0", ""].join("\n"),
  );
  chmodSync(join(dir, "tool/bin/run"), 0o755);
  writeFileSync(
    join(dir, "class.yaml"),
    `${JSON.stringify({
      schemaVersion: 1,
      wings: {},
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: {},
    })}\n`,
  );
  writeFileSync(
    join(dir, "spec.yaml"),
    `${JSON.stringify({
      name,
      executable: { tree: "./tool", path: "bin/run", args: ["--signed"] },
      target: { wing: "x" },
      classification: "internal",
      classificationConfig: "./class.yaml",
      env: { PATH: "/usr/bin:/bin" },
      privileged: process.geteuid?.() === 0,
    })}\n`,
  );
  return { dir, spec: join(dir, "spec.yaml"), marker };
}

function freshScope(prefix: string): string {
  const scope = join(tempDir(prefix), "scope");
  mkdirSync(scope);
  return scope;
}

/** Every regular file under `root` (but the skipped ones), for the key scan. */
function filesUnder(root: string, skipPath: (path: string) => boolean = () => false): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      return;
    }
    for (const name of names) {
      const path = join(dir, name);
      if (skipPath(path)) continue;
      const stats = lstatSync(path);
      if (stats.isDirectory()) walk(path);
      else if (stats.isFile()) files.push(path);
    }
  };
  walk(root);
  return files;
}

const sha256 = (bytes: Buffer) => createHash("sha256").update(bytes).digest("hex");

/** The Sigstore project's verifier, with the signer's public key and no transparency log, timestamp or CA. */
async function sigstoreVerify(bundleBytes: Buffer, keys: Map<string, string>): Promise<Buffer> {
  const verifyPackage = createRequire(import.meta.url).resolve("@sigstore/verify");
  const { bundleFromJSON } = createRequire(verifyPackage)("@sigstore/bundle") as {
    bundleFromJSON: (json: unknown) => unknown;
  };
  const sigstore = await import("@sigstore/verify");
  const trustedRoot = {
    mediaType: "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
    tlogs: [],
    ctlogs: [],
    certificateAuthorities: [],
    timestampAuthorities: [],
  };
  const material = sigstore.toTrustMaterial(trustedRoot as never, (hint: string) => {
    const pem = keys.get(hint);
    if (pem === undefined) throw new Error(`no key for ${hint}`);
    return { publicKey: createPublicKey(pem), validFor: () => true };
  });
  const verifier = new sigstore.Verifier(material, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
  const bundle = bundleFromJSON(JSON.parse(bundleBytes.toString("utf8"))) as Parameters<
    typeof sigstore.toSignedEntity
  >[0];
  verifier.verify(sigstore.toSignedEntity(bundle));
  const envelope = JSON.parse(bundleBytes.toString("utf8")).dsseEnvelope as { payload: string; payloadType: string };
  assert.equal(envelope.payloadType, "application/vnd.in-toto+json");
  return Buffer.from(envelope.payload, "base64");
}

describe("signed approvals and runs between two scopes on one registry", { skip }, () => {
  test(
    "Given A approves with a key and pushes When B trusts A's key, pulls and dispatches --approved-by Then it " +
      "runs without a local approval, B's signed run verifies in A and with the Sigstore verifier, a removed " +
      "trust stops the next dispatch, and no key material is anywhere",
    async () => {
      const fixture = captureFixture("signed");
      const a = new Operator(freshScope("oats-attest-a-"));
      const b = new Operator(freshScope("oats-attest-b-"));
      const repo = reg().ref("fleet/attest");

      // A: a key, a capture, an approval that is also a signed statement, a push that attaches it.
      const keyA = a.ok(["key", "generate"]);
      assert.match(keyA["keyid"], /^sha256:[0-9a-f]{64}$/);
      assert.equal(lstatSync(join(a.state, "keys/signing-key.json")).mode & 0o777, 0o600);
      const prepared = a.ok(["capture", "prepare", fixture.spec]);
      const subject = prepared["composition"]["subject"] as { kind: string; key: string; integrity: string };
      const approved = a.ok(["approve", subject.kind, subject.key, subject.integrity, "--reason", "reviewed on A"]);
      assert.ok(approved["attestation"], "the approval is a signed statement too");
      assert.equal(approved["attestation"]["keyid"], keyA["keyid"]);
      const approvalId = approved["attestation"]["id"] as string;
      const pushedA = a.ok(["push", prepared["id"], "--to", repo]);
      assert.deepEqual(
        pushedA["attestations"].map((row: any) => [row.id, row.via, row.status]),
        [[approvalId, "tag", "attached"]],
        "distribution 2.8 has no referrers API: the referrers tag schema carries it",
      );
      const again = a.ok(["push", prepared["id"], "--to", repo]);
      assert.deepEqual(
        again["attestations"].map((row: any) => row.status),
        ["kept"],
      );

      // B: its own key; trusts A's for approvals; pulls; is refused without a flag; runs under A's signature.
      const keyB = b.ok(["key", "generate"]);
      const shownA = a.ok(["key", "show"]);
      assert.equal(shownA["publicKey"], keyA["publicKey"]);
      b.ok(["trust", "add", shownA["publicKey"], "--name", "host-a", "--for", "approvals"]);
      const pulled = b.ok(["pull", `${repo}:signed`]);
      assert.deepEqual(
        pulled["attestations"].map((row: any) => [row.id, row.status, row.verifiedBy]),
        [[approvalId, "written", "host-a"]],
      );
      b.ok(["queue", "add", prepared["id"], "--job", "signed"]);
      b.refused(["dispatch", "signed", "--exec"], "approval-required");
      assert.equal(existsSync(fixture.marker), false, "nothing ran without an approval");
      const ran = b.ok(["dispatch", "signed", "--exec", "--approved-by", "host-a"]);
      assert.equal(existsSync(fixture.marker), true, "the capture ran under A's signed approval");
      assert.equal(ran["exitCode"], 0);
      assert.equal(ran["approvedBy"]["trust"], "host-a");
      assert.equal(ran["approvedBy"]["attestation"], approvalId);
      assert.deepEqual(ran["approval"], {
        seq: 0,
        hash: approvalId,
        operator: approved["entry"]["operator"],
        at: approved["entry"]["at"],
        reason: "reviewed on A",
      });
      assert.deepEqual(b.ok(["approvals"])["approvals"], [], "B's ledger holds no approval at all");
      const dispatchEntry = b
        .ok(["audit", "show"])
        ["entries"].find((entry: any) => entry.action === "dispatch" && entry.outcome === "ok");
      assert.equal(dispatchEntry.details.approvedBy.trust, "host-a", "the dispatch is audited as a signed approval");
      assert.equal(dispatchEntry.details.approvedBy.keyid, keyA["keyid"]);
      const runAttestation = ran["attestation"] as string;
      assert.match(runAttestation, /^sha256-[0-9a-f]{64}$/, "B's sealed run is a signed statement");

      // B pushes the resolution (its run statement is attached) and the run's evidence.
      const pushedB = b.ok(["push", prepared["id"], "--to", repo]);
      assert.deepEqual(
        pushedB["attestations"].map((row: any) => [row.id, row.status]).sort(),
        [
          [approvalId, "kept"],
          [runAttestation, "attached"],
        ].sort(),
      );
      const runsRepo = reg().ref("fleet/attest-runs");
      b.ok(["push", "--to", runsRepo]);

      // A: trusts B's key for runs; before pulling the run's evidence the subject is not held.
      const shownB = b.ok(["key", "show"]);
      a.ok(["trust", "add", shownB["publicKey"], "--name", "host-b", "--for", "runs"]);
      const back = a.ok(["pull", `${repo}:signed`]);
      const pulledRun = back["attestations"].find((row: any) => row.id === runAttestation);
      assert.deepEqual([pulledRun.status, pulledRun.verifiedBy], ["written", "host-b"]);
      a.refused(["attestation", "verify", runAttestation], "attestation-refused", "subject-not-held");
      a.ok(["pull", `${runsRepo}:run-${ran["runId"].slice(7)}`]);
      const verdict = a.ok(["attestation", "verify", runAttestation.slice(0, 20)]);
      assert.equal(verdict["trust"], "host-b");
      assert.equal(verdict["statement"]["predicate"]["result"], "OK");
      assert.equal(verdict["statement"]["predicate"]["handle"], ran["handle"]);
      // A's own approval verifies in A once A trusts its own key for approvals.
      a.ok(["trust", "add", keyA["publicKey"], "--name", "self", "--for", "approvals"]);
      assert.equal(a.ok(["attestation", "verify", approvalId])["trust"], "self");
      const listed = a.ok(["attestation", "ls"])["attestations"] as { id: string; status: string }[];
      assert.deepEqual(listed.map((row) => row.status).sort(), ["verified", "verified"]);

      // The Sigstore project's verifier, on every bundle in both scopes, with the signer's public key only.
      const keys = new Map([
        [keyA["keyid"] as string, keyA["pem"] as string],
        [keyB["keyid"] as string, keyB["pem"] as string],
      ]);
      const recordBytes = readFileSync(join(a.scope, ".agents/received-runs", ran["runId"], "record.json"));
      const resolutionBytes = readFileSync(join(a.scope, ".agents/resolutions", `${prepared["id"]}.json`));
      const compositionBytes = readFileSync(
        join(a.scope, ".agents/blobs", subject.integrity.replace("oats.json.v1:", "")),
      );
      let bundles = 0;
      for (const scope of [a.scope, b.scope]) {
        const dir = join(scope, ".agents/attestations");
        for (const name of readdirSync(dir).filter((each) => each.endsWith(".sigstore.json"))) {
          bundles += 1;
          const payload = JSON.parse((await sigstoreVerify(readFileSync(join(dir, name)), keys)).toString("utf8"));
          if (payload.predicateType === "https://oats.dev/attestation/run/v1") {
            assert.equal(payload.subject[0].digest.sha256, sha256(recordBytes), "the run subject is the record");
            assert.equal(payload.subject[1].digest.sha256, sha256(resolutionBytes), "and the resolution it ran");
          } else {
            assert.equal(payload.predicateType, "https://oats.dev/attestation/approval/v1");
            assert.equal(payload.subject[0].digest.sha256, sha256(compositionBytes), "the approved composition");
          }
        }
      }
      assert.equal(bundles, 4, "the approval and the run, in each scope");
      // A changed byte of a bundle's payload is refused by that verifier too.
      const someBundle = join(a.scope, ".agents/attestations", `${runAttestation}.sigstore.json`);
      const tampered = JSON.parse(readFileSync(someBundle, "utf8"));
      const payload = Buffer.from(tampered.dsseEnvelope.payload, "base64");
      payload[payload.indexOf(Buffer.from('"OK"')) + 1] = "K".charCodeAt(0);
      tampered.dsseEnvelope.payload = payload.toString("base64");
      await assert.rejects(sigstoreVerify(Buffer.from(JSON.stringify(tampered)), keys), /signature/);

      // A trust removed after the signature: the next dispatch under it is refused, audited, and runs nothing.
      rmSync(fixture.marker);
      b.ok(["trust", "rm", "host-a"]);
      const removed = b.refused(
        ["dispatch", "signed", "--exec", "--approved-by", "host-a"],
        "attestation-refused",
        "trust-removed",
      );
      assert.equal(removed.status, 6);
      assert.equal(existsSync(fixture.marker), false, "nothing ran");
      const trustEntries = b.ok(["audit", "show"])["entries"] as any[];
      assert.deepEqual(
        trustEntries.filter((entry) => entry.action.startsWith("trust-")).map((entry) => entry.action),
        ["trust-add", "trust-remove"],
      );
      const refusedDispatch = trustEntries.at(-1);
      assert.deepEqual(
        [refusedDispatch.action, refusedDispatch.outcome, refusedDispatch.details.approvedBy],
        ["dispatch", "refused", "host-a"],
      );

      // No key material in any output, record, log or file but the key files themselves.
      const secrets = [...a.secretForms(), ...b.secretForms()];
      const texts = [...a.outputs, ...b.outputs];
      const keyFile = (path: string) => path.endsWith("signing-key.json");
      for (const root of [a.scope, b.scope, a.state, b.state, reg().root])
        for (const path of filesUnder(root, keyFile)) texts.push(readFileSync(path).toString("latin1"));
      for (const secret of secrets)
        assert.ok(!texts.some((text) => text.includes(secret)), "a private key's bytes were found outside its file");
      assert.ok(texts.length > 50, "the scan read the outputs and the files");
    },
  );
});
