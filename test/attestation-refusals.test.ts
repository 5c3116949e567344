/**
 * Bad input to signed attestations gets a typed refusal (`attestation-refused`
 * with `details.reason`), never belief: a changed payload byte, a wrong key
 * (unknown, or claiming a trusted key's id), a subject naming another digest,
 * a statement of another predicate type, an envelope over the size limit, a
 * trust removed after the signature. Checked where the statements are used:
 * `oats attestation verify` (library and CLI), `dispatch --approved-by`, and
 * pull, which stores no referrer that names another resolution.
 *
 * One operator key for the whole file (this process's private state, set by
 * helpers.ts); the other keys are made here with node:crypto.
 */
import assert from "node:assert/strict";
import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import {
  addTrust,
  approvalStatement,
  bytesDigest,
  describePublicKey,
  encodeEnvelope,
  generateSigningKey,
  loadSigningKey,
  parsePublicKey,
  removeTrust,
  runStatement,
  signEnvelope,
  statementBytes,
  storeAttestation,
  verifyEnvelopeBytes,
  readTrust,
  approve,
  canonicalJsonBytes,
  compositionOf,
  compositionSubject,
  type CompositionSubject,
  discardDispatchPlan,
  resolveQueuedCapture,
  readAudit,
  revoke,
  type ApprovalAttestation,
} from "../src/index.js";
import { readRecordBytes } from "../src/resolution/index.js";
import { verifyAttestation, pullFromRegistry, pushToRegistry } from "../src/fleet/index.js";
import { attachReferrer } from "../src/oci/referrers.js";
import { openRegistry } from "../src/fleet/target.js";
import { bufferSource, putBlob } from "../src/oci/index.js";
import { bundleOf, MAX_ENVELOPE_BYTES } from "../src/attestation/index.js";
import { runJson, tempDir } from "./helpers.js";
import { evidenceFixture, type EvidenceFixture } from "./support/evidence-fixture.js";
import { expectRefusal, rejection } from "./support/refusals.js";
import { NO_REGISTRY, registryBinary, startRegistry, type Registry } from "./support/registry.js";

let fixture: EvidenceFixture;
let approvalId: string;
let composition: CompositionSubject;
let tree: { kind: string; key: string; integrity: string };

const refused = (reason: string) => (error: unknown) => {
  assert.ok(error instanceof Error && "code" in error, String(error));
  const oats = error as Error & { code: string; details: Record<string, unknown>; exitCode: number };
  assert.equal(oats.code, "attestation-refused", oats.message);
  assert.equal(oats.details["reason"], reason, oats.message);
  assert.equal(oats.exitCode, 6);
  return true;
};

function otherKey(): { privateKey: KeyObject; keyid: string; spki: string } {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519");
  const info = describePublicKey(publicKey);
  return { privateKey, keyid: info.keyid, spki: info.spki };
}

function approvalOf(overrides: { composition?: string; treeIntegrity?: string } = {}) {
  return approvalStatement({
    capture: composition.key,
    composition: overrides.composition ?? composition.integrity,
    tree: { ...tree, integrity: overrides.treeIntegrity ?? tree.integrity },
    approver: "someone@elsewhere",
    reason: "planted",
    approvedAt: new Date().toISOString(),
    level: "public",
    ledger: { seq: 1, hash: `sha256-${"0".repeat(64)}` },
  });
}

before(async () => {
  generateSigningKey();
  fixture = await evidenceFixture({ script: "#!/bin/sh\necho refusals\n", approve: false });
  const { record } = readRecordBytes(fixture.scope, fixture.resolution);
  const built = compositionOf(record);
  composition = compositionSubject(built);
  tree = built.executable;
  let outcome: ApprovalAttestation | null = null;
  await approve(fixture.scope, composition, {
    reason: "approved here, signed",
    onAttestation: (result) => {
      outcome = result;
    },
  });
  const attested = (outcome as ApprovalAttestation | null)?.attestation;
  assert.ok(attested, "the approval wrote a signed statement");
  approvalId = attested.id;
  const key = loadSigningKey()!;
  await addTrust(fixture.scope, { publicKey: key.spki, name: "self", purpose: "approvals" });
});

describe("signed attestations refuse bad input with a typed refusal", () => {
  test("the untouched statement verifies: signature, schema, composition pinned, tree retained", async () => {
    const verdict = await verifyAttestation(fixture.scope, approvalId);
    assert.equal(verdict.trust, "self");
    assert.equal(verdict.checked.length, 3);
  });

  test("a changed payload byte: signature-invalid, before the payload is parsed", async () => {
    const stored = JSON.parse(
      readFileSync(join(fixture.scope, `.agents/attestations/${approvalId}.dsse.json`), "utf8"),
    );
    const payload = Buffer.from(stored.payload, "base64");
    const at = payload.indexOf(Buffer.from("signed")) + 1;
    payload[at] = payload[at]! ^ 0x01;
    const changed = storeAttestation(fixture.scope, {
      payload,
      payloadType: stored.payloadType,
      signatures: [{ keyid: stored.signatures[0].keyid, sig: Buffer.from(stored.signatures[0].sig, "base64") }],
    });
    await assert.rejects(verifyAttestation(fixture.scope, changed.id), refused("signature-invalid"));
    // A byte that breaks the JSON is refused the same way: nothing unsigned is parsed.
    const broken = Buffer.from(payload);
    broken[0] = 0x5b;
    const envelope = {
      payload: broken,
      payloadType: stored.payloadType,
      signatures: [{ keyid: stored.signatures[0].keyid, sig: Buffer.from(stored.signatures[0].sig, "base64") }],
    };
    assert.throws(
      () => verifyEnvelopeBytes(encodeEnvelope(envelope), readTrust(fixture.scope)),
      refused("signature-invalid"),
    );
  });

  test("a wrong key: an unknown one is key-not-trusted; one claiming a trusted id, signature-invalid", async () => {
    const stranger = otherKey();
    const unknown = storeAttestation(fixture.scope, signEnvelope(statementBytes(approvalOf()), stranger));
    await assert.rejects(verifyAttestation(fixture.scope, unknown.id), refused("key-not-trusted"));
    const trustedId = loadSigningKey()!.keyid;
    const spoofed = storeAttestation(
      fixture.scope,
      signEnvelope(statementBytes(approvalOf()), { privateKey: stranger.privateKey, keyid: trustedId }),
    );
    await assert.rejects(verifyAttestation(fixture.scope, spoofed.id), refused("signature-invalid"));
  });

  test("a key trusted for runs signs no approval: key-not-trusted", async () => {
    const runner = otherKey();
    await addTrust(fixture.scope, { publicKey: runner.spki, name: "runner", purpose: "runs" });
    const signed = storeAttestation(fixture.scope, signEnvelope(statementBytes(approvalOf()), runner));
    await assert.rejects(verifyAttestation(fixture.scope, signed.id), refused("key-not-trusted"));
  });

  test("a subject naming another digest: a composition not held, or a tree the composition does not run", async () => {
    const key = loadSigningKey()!;
    const elsewhere = storeAttestation(
      fixture.scope,
      signEnvelope(statementBytes(approvalOf({ composition: `sha256-${"a".repeat(64)}` })), key),
    );
    await assert.rejects(verifyAttestation(fixture.scope, elsewhere.id), refused("subject-not-held"));
    const otherTree = storeAttestation(
      fixture.scope,
      signEnvelope(statementBytes(approvalOf({ treeIntegrity: `oats.tree-exec.v1:sha256-${"b".repeat(64)}` })), key),
    );
    await assert.rejects(verifyAttestation(fixture.scope, otherTree.id), refused("subject-mismatch"));
    // A run statement naming a run this scope does not hold.
    await addTrust(fixture.scope, { publicKey: key.spki, name: "self-runs", purpose: "runs" });
    const run = runStatement(`sha256-${"c".repeat(64)}`, fixture.resolution, {
      handle: "20261206T000000Z-0123abcd",
      job: "probe",
      principal: "root@nowhere",
      classification: "public",
      result: "OK",
      exit: { code: 0, signal: null },
      log: { digest: `sha256-${"d".repeat(64)}`, lines: 1, bytes: 10 },
      evidence: { status: "complete", required: [], captured: [], gaps: [] },
      redactions: [],
      approval: { seq: 1, hash: "sha256-x" },
      startedAt: "2026-12-06T00:00:00.000000Z",
      endedAt: "2026-12-06T00:00:01.000000Z",
    });
    const runId = storeAttestation(fixture.scope, signEnvelope(statementBytes(run), key)).id;
    await assert.rejects(verifyAttestation(fixture.scope, runId), refused("subject-not-held"));
  });

  test("a statement of another predicate type, signed by a trusted key: predicate-type", async () => {
    const key = loadSigningKey()!;
    const statement = { ...approvalOf(), predicateType: "https://slsa.dev/provenance/v1" };
    const payload = Buffer.from(JSON.stringify(statement));
    const other = storeAttestation(fixture.scope, signEnvelope(payload, key));
    await assert.rejects(verifyAttestation(fixture.scope, other.id), refused("predicate-type"));
  });

  test("an envelope over the size limit: too-large, from the store, from a file and through the CLI", async () => {
    const key = loadSigningKey()!;
    const padded = {
      ...approvalOf(),
      predicate: { ...approvalOf().predicate, reason: "x".repeat(MAX_ENVELOPE_BYTES) },
    };
    const big = encodeEnvelope(signEnvelope(Buffer.from(JSON.stringify(padded)), key));
    assert.ok(big.length > MAX_ENVELOPE_BYTES);
    const id = bytesDigest(big);
    writeFileSync(join(fixture.scope, ".agents/attestations", `${id}.dsse.json`), big);
    await assert.rejects(verifyAttestation(fixture.scope, id), refused("too-large"));
    assert.throws(() => verifyEnvelopeBytes(big, readTrust(fixture.scope)), refused("too-large"));
    const file = join(tempDir("oats-attest-big-"), "big.dsse.json");
    writeFileSync(file, big);
    const cli = runJson(["--scope", fixture.scope, "attestation", "verify", file]);
    assert.equal(cli.status, 6, cli.stdout);
    assert.equal(cli.envelope.error!.code, "attestation-refused");
    assert.equal(cli.envelope.error!.details["reason"], "too-large");
  });

  test("the CLI refuses a changed bundle given as a file: exit 6, attestation-refused, signature-invalid", () => {
    const bundle = JSON.parse(
      readFileSync(join(fixture.scope, `.agents/attestations/${approvalId}.sigstore.json`), "utf8"),
    );
    const payload = Buffer.from(bundle.dsseEnvelope.payload, "base64");
    const at = payload.indexOf(Buffer.from("signed"));
    payload[at] = payload[at]! ^ 0x20;
    bundle.dsseEnvelope.payload = payload.toString("base64");
    const file = join(tempDir("oats-attest-file-"), "changed.sigstore.json");
    writeFileSync(file, canonicalJsonBytes(bundle));
    const cli = runJson(["--scope", fixture.scope, "attestation", "verify", file]);
    assert.equal(cli.status, 6, cli.stdout);
    assert.equal(cli.envelope.error!.code, "attestation-refused");
    assert.equal(cli.envelope.error!.details["reason"], "signature-invalid");
  });

  test("dispatch --approved-by: a trust for runs and an unknown trust refused; a good one audited", async () => {
    await expectRefusal(
      resolveQueuedCapture(fixture.scope, fixture.job, { approvedBy: "runner" }),
      "attestation-refused",
    );
    await expectRefusal(
      resolveQueuedCapture(fixture.scope, fixture.job, { approvedBy: "nobody-here" }),
      "attestation-refused",
    );
    const plan = await resolveQueuedCapture(fixture.scope, fixture.job, { approvedBy: "self" });
    assert.equal(plan.approvedBy?.attestation, approvalId, "the good statement is the one accepted");
    assert.equal(plan.approval.seq, 0);
    await discardDispatchPlan(plan);
    const entry = [...readAudit(fixture.scope).entries].reverse().find((each) => each.action === "dispatch");
    assert.deepEqual(entry?.details["approvedBy"], { ...plan.approvedBy });
  });

  test("a trust removed after the signature: trust-removed, for verify and for dispatch", async () => {
    await removeTrust(fixture.scope, "self");
    await assert.rejects(verifyAttestation(fixture.scope, approvalId), refused("trust-removed"));
    const error = await rejection(resolveQueuedCapture(fixture.scope, fixture.job, { approvedBy: "self" }));
    assert.equal(error.code, "attestation-refused");
    assert.equal(error.details["reason"], "trust-removed");
    const refusal = readAudit(fixture.scope).entries.at(-1)!;
    assert.deepEqual([refusal.action, refusal.outcome, refusal.details["approvedBy"]], ["dispatch", "refused", "self"]);
  });

  test("a local revoke wins over a signed approval: approval-required, audited, trust still held", async () => {
    const key = loadSigningKey()!;
    await addTrust(fixture.scope, { publicKey: key.spki, name: "self-again", purpose: "approvals" });
    const plan = await resolveQueuedCapture(fixture.scope, fixture.job, { approvedBy: "self-again" });
    assert.equal(plan.approvedBy?.attestation, approvalId);
    await discardDispatchPlan(plan);
    await revoke(fixture.scope, composition, { reason: "withdrawn here" });
    const error = await rejection(resolveQueuedCapture(fixture.scope, fixture.job, { approvedBy: "self-again" }));
    assert.equal(error.code, "approval-required");
    assert.equal(error.details["approvedBy"], "self-again");
    const refusal = readAudit(fixture.scope).entries.at(-1)!;
    assert.deepEqual([refusal.action, refusal.outcome], ["dispatch", "refused"]);
  });

  test("a private key given to trust add is refused without being echoed", async () => {
    const { privateKey } = generateKeyPairSync("ed25519");
    const pem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    const error = await rejection(addTrust(fixture.scope, { publicKey: pem, name: "oops", purpose: "runs" }));
    assert.equal(error.code, "invalid-input");
    const body = pem.split("\n")[1]!;
    assert.ok(!JSON.stringify(error.toJSON()).includes(body), "the key is not in the refusal");
    assert.throws(
      () => parsePublicKey(pem),
      (thrown: Error) => !thrown.message.includes(body),
    );
  });
});

let registry: Registry | null = null;
const skip = registryBinary() === null ? NO_REGISTRY : false;

describe("pull stores no referrer that is about another resolution", { skip }, () => {
  before(async () => {
    registry = await startRegistry();
  });
  after(async () => {
    await registry?.stop();
  });

  test("a signed run attached to resolution X but naming Y is refused (subject-mismatch), not stored", async () => {
    const to = registry!.ref("fleet/refusals");
    const pushed = await pushToRegistry(fixture.scope, [fixture.resolution], to, { insecure: true });
    const manifest = pushed.manifests[0]!;
    const key = loadSigningKey()!;
    const wrong = runStatement(`sha256-${"e".repeat(64)}`, `sha256-${"f".repeat(64)}`, {
      handle: "20261206T000000Z-0123abcd",
      job: "probe",
      principal: "root@nowhere",
      classification: "public",
      result: "OK",
      exit: { code: 0, signal: null },
      log: { digest: `sha256-${"d".repeat(64)}`, lines: 1, bytes: 10 },
      evidence: { status: "complete", required: [], captured: [], gaps: [] },
      redactions: [],
      approval: { seq: 1, hash: "sha256-x" },
      startedAt: "2026-12-06T00:00:00.000000Z",
      endedAt: "2026-12-06T00:00:01.000000Z",
    });
    const envelope = signEnvelope(statementBytes(wrong), key);
    const bundle = bundleOf(envelope);
    const { session } = openRegistry(to);
    const { createHash } = await import("node:crypto");
    const digest = (bytes: Buffer) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    const empty = Buffer.from("{}");
    await putBlob(session, bufferSource(empty, digest(empty)));
    await putBlob(session, bufferSource(bundle, digest(bundle)));
    const referrer = canonicalJsonBytes({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      artifactType: "application/vnd.dev.sigstore.bundle.v0.3+json",
      config: { mediaType: "application/vnd.oci.empty.v1+json", digest: digest(empty), size: 2 },
      layers: [
        { mediaType: "application/vnd.dev.sigstore.bundle.v0.3+json", digest: digest(bundle), size: bundle.length },
      ],
      subject: { mediaType: "application/vnd.oci.image.manifest.v1+json", digest: manifest.digest, size: 1 },
    });
    await attachReferrer(
      session,
      referrer,
      {
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        digest: digest(referrer),
        size: referrer.length,
        artifactType: "application/vnd.dev.sigstore.bundle.v0.3+json",
      },
      manifest.digest,
    );
    const target = tempDir("oats-attest-pull-");
    const report = await pullFromRegistry(target, `${to}@${manifest.digest}`, { insecure: true });
    const planted = report.attestations.find((row) => row.digest === digest(referrer));
    assert.equal(planted?.status, "refused");
    assert.equal(planted?.refusal?.code, "attestation-refused");
    assert.equal(planted?.refusal?.reason, "subject-mismatch");
    assert.equal(
      existsSync(join(target, ".agents/attestations", `${bytesDigest(encodeEnvelope(envelope))}.dsse.json`)),
      false,
      "the refused statement is not stored",
    );
  });
});
