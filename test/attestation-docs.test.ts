/**
 * docs/design/attestations.md shows a real approval statement, a real run
 * statement, the Sigstore bundle of the approval and the public key that
 * signed it. This file makes them with the product's own code (an approval
 * with a signing key, a dispatched and sealed run) and fails when the page
 * drifts from what the code writes:
 *
 * - each documented statement is read by the real reader (strict schema,
 *   canonical form, the expected predicate type) and accepted by its
 *   committed JSON Schema, and has exactly the fields a fresh one has;
 * - the documented bundle is one oats reads, verifies with the documented
 *   public key, and carries the documented approval statement;
 * - the page names the predicate types and schema files the code uses;
 * - the PAE and the bundle oats writes by hand are byte for byte what the
 *   Sigstore libraries (@sigstore/core, @sigstore/bundle) build.
 *
 * `OATS_UPDATE_DOCS=1 node --import tsx --test test/attestation-docs.test.ts`
 * writes freshly made examples into the page (the key is a throwaway one of
 * this process's private state; only its public half is published).
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import {
  APPROVAL_PREDICATE,
  type ApprovalAttestation,
  approve,
  canonicalJsonBytes,
  compositionOf,
  compositionSubject,
  envelopeFromBundle,
  bundleOf,
  generateSigningKey,
  loadSigningKey,
  parseEnvelope,
  parsePublicKey,
  parseStatement,
  RUN_PREDICATE,
  runDispatchPlanWithEvidence,
  STATEMENT_TYPE,
  verifyEnvelopeBytes,
} from "../src/index.js";
import { pae } from "../src/attestation/index.js";
import { readRecordBytes } from "../src/resolution/index.js";
import { REPO } from "./helpers.js";
import { violation } from "./schema-validator.js";
import { evidenceFixture } from "./support/evidence-fixture.js";

const PAGE = join(REPO, "docs/design/attestations.md");
const DESIGN = join(REPO, "docs/design");
const EXAMPLES = ["approval-statement", "run-statement", "approval-bundle", "public-key"] as const;
type ExampleName = (typeof EXAMPLES)[number];

const blockPattern = (name: ExampleName) =>
  new RegExp(`(<!-- example: ${name} -->\\n\`\`\`(\\w+)\\n)([\\s\\S]*?)(\\n\`\`\`\\n)`);

function documented(name: ExampleName): string {
  const match = blockPattern(name).exec(readFileSync(PAGE, "utf8"));
  assert.ok(match, `attestations.md has the example ${name}`);
  return match[3]!;
}

const documentedJson = (name: ExampleName) => JSON.parse(documented(name)) as Record<string, unknown>;

/** Every path of a JSON value (array indices included): the shape two examples must share. */
function paths(value: unknown, at = ""): string[] {
  if (Array.isArray(value)) return [at, ...value.flatMap((item, index) => paths(item, `${at}/${index}`))];
  if (typeof value === "object" && value !== null)
    return [at, ...Object.entries(value).flatMap(([key, item]) => paths(item, `${at}/${key}`))];
  return [at];
}

const shape = (value: unknown) => paths(value).sort();

const fresh = {} as Record<ExampleName, string>;

before(async () => {
  generateSigningKey();
  const fixture = await evidenceFixture({ script: "#!/bin/sh\necho documented\n", approve: false });
  const subject = compositionSubject(compositionOf(readRecordBytes(fixture.scope, fixture.resolution).record));
  let signed: ApprovalAttestation | null = null;
  await approve(fixture.scope, subject, {
    reason: "reviewed the tree and the composition",
    onAttestation: (outcome) => {
      signed = outcome;
    },
  });
  const approval = (signed as ApprovalAttestation | null)?.attestation;
  assert.ok(approval, "the approval wrote a signed statement");
  const outcome = await runDispatchPlanWithEvidence(fixture.scope, await fixture.plan(), { output: "quiet" });
  assert.ok(outcome.attestation, "the sealed run wrote a signed statement");
  const store = join(fixture.scope, ".agents/attestations");
  const payload = (id: string) =>
    JSON.parse(
      Buffer.from(
        JSON.parse(readFileSync(join(store, `${id}.dsse.json`), "utf8")).payload as string,
        "base64",
      ).toString("utf8"),
    );
  fresh["approval-statement"] = JSON.stringify(payload(approval.id), null, 2);
  fresh["run-statement"] = JSON.stringify(payload(outcome.attestation), null, 2);
  fresh["approval-bundle"] = JSON.stringify(
    JSON.parse(readFileSync(join(store, `${approval.id}.sigstore.json`), "utf8")),
    null,
    2,
  );
  fresh["public-key"] = loadSigningKey()!.pem.trimEnd();
  if (process.env["OATS_UPDATE_DOCS"] === "1") {
    let page = readFileSync(PAGE, "utf8");
    for (const name of EXAMPLES) {
      assert.match(page, blockPattern(name), `attestations.md has a place for the example ${name}`);
      page = page.replace(blockPattern(name), (_all, open: string, _lang, _body, close: string) => {
        return `${open}${fresh[name]}${close}`;
      });
    }
    writeFileSync(PAGE, page);
  }
});

/** The documented public key as the one trust entry of a scope, for approvals. */
function documentedTrust() {
  const { info } = parsePublicKey(documented("public-key"));
  const entry = {
    name: "documented",
    purpose: "approvals" as const,
    keyid: info.keyid,
    publicKey: info.spki,
    addedAt: "2026-01-01T00:00:00.000000Z",
    addedBy: "docs@test",
  };
  return { entries: [entry], removed: [] };
}

describe("docs/design/attestations.md: the examples are what the code writes", () => {
  for (const [name, predicateType] of [
    ["approval-statement", APPROVAL_PREDICATE],
    ["run-statement", RUN_PREDICATE],
  ] as const) {
    test(`the ${name} example is read by the real reader, accepted by its schema, shaped as a fresh one`, () => {
      const value = documentedJson(name);
      const statement = parseStatement(canonicalJsonBytes(value), name, predicateType);
      assert.equal(statement._type, STATEMENT_TYPE);
      const schema = JSON.parse(readFileSync(join(DESIGN, `${name}.schema.json`), "utf8"));
      assert.equal(violation(schema, value, schema), null);
      assert.deepEqual(shape(value), shape(JSON.parse(fresh[name])), `${name}: run OATS_UPDATE_DOCS=1 to refresh`);
    });

    test(`the ${name} example without its predicate's first field is refused by the reader and the schema`, () => {
      const value = documentedJson(name);
      const predicate = { ...(value["predicate"] as Record<string, unknown>) };
      delete predicate[Object.keys(predicate)[0]!];
      const broken = { ...value, predicate };
      assert.throws(
        () => parseStatement(canonicalJsonBytes(broken), name, predicateType),
        (error: Error & { code?: string; details?: Record<string, unknown> }) =>
          error.code === "attestation-refused" && error.details?.["reason"] === "statement-invalid",
      );
      const schema = JSON.parse(readFileSync(join(DESIGN, `${name}.schema.json`), "utf8"));
      assert.notEqual(violation(schema, broken, schema), null);
    });
  }

  test("the bundle example verifies with the documented public key and carries the documented approval", () => {
    const bundle = canonicalJsonBytes(documentedJson("approval-bundle"));
    const { envelopeBytes } = envelopeFromBundle(bundle, "the documented bundle");
    const verified = verifyEnvelopeBytes(envelopeBytes, documentedTrust());
    assert.deepEqual(verified.statement, documentedJson("approval-statement"));
    assert.deepEqual(shape(documentedJson("approval-bundle")), shape(JSON.parse(fresh["approval-bundle"])));
  });

  test("a changed byte of the documented bundle's statement is refused: signature-invalid", () => {
    const bundle = documentedJson("approval-bundle") as { dsseEnvelope: { payload: string } };
    const payload = Buffer.from(bundle.dsseEnvelope.payload, "base64");
    const at = payload.indexOf(Buffer.from("reviewed"));
    payload[at] = payload[at]! ^ 0x20;
    bundle.dsseEnvelope.payload = payload.toString("base64");
    const { envelopeBytes } = envelopeFromBundle(canonicalJsonBytes(bundle), "the changed bundle");
    assert.throws(
      () => verifyEnvelopeBytes(envelopeBytes, documentedTrust()),
      (error: Error & { details?: Record<string, unknown> }) => error.details?.["reason"] === "signature-invalid",
    );
  });

  test("the page names the predicate types, the statement type and the schema files the code uses", () => {
    const page = readFileSync(PAGE, "utf8");
    for (const text of [
      APPROVAL_PREDICATE,
      RUN_PREDICATE,
      STATEMENT_TYPE,
      "approval-statement.schema.json",
      "run-statement.schema.json",
    ])
      assert.ok(page.includes(text), `attestations.md names ${text}`);
  });

  test("the PAE and the bundle oats writes are what @sigstore/core and @sigstore/bundle build", () => {
    const verifyPackage = createRequire(import.meta.url).resolve("@sigstore/verify");
    const load = createRequire(verifyPackage);
    const { dsse } = load("@sigstore/core") as {
      dsse: { preAuthEncoding: (type: string, payload: Buffer) => Buffer };
    };
    const sigstoreBundle = load("@sigstore/bundle") as {
      toDSSEBundle: (options: {
        artifact: Buffer;
        artifactType: string;
        signature: Buffer;
        keyHint: string;
      }) => unknown;
      bundleToJSON: (bundle: unknown) => Record<string, any>;
    };
    const documentedBundle = documentedJson("approval-bundle") as { dsseEnvelope: unknown };
    const envelope = parseEnvelope(canonicalJsonBytes(documentedBundle.dsseEnvelope), "the documented envelope");
    for (const payload of [envelope.payload, Buffer.alloc(0), Buffer.from("caf\u00e9 \u2603", "utf8")])
      assert.ok(pae(envelope.payloadType, payload).equals(dsse.preAuthEncoding(envelope.payloadType, payload)));
    const signature = envelope.signatures[0]!;
    const built = sigstoreBundle.bundleToJSON(
      sigstoreBundle.toDSSEBundle({
        artifact: envelope.payload,
        artifactType: envelope.payloadType,
        signature: signature.sig,
        keyHint: signature.keyid,
      }),
    );
    // The library leaves an empty timestampVerificationData where oats writes the (empty) tlogEntries both readers
    // take as "no log entry"; everything else is the same bytes.
    const { timestampVerificationData, ...material } = built["verificationMaterial"];
    assert.deepEqual(timestampVerificationData, {});
    const expected = canonicalJsonBytes({ ...built, verificationMaterial: { ...material, tlogEntries: [] } });
    assert.equal(bundleOf(envelope).toString("utf8"), expected.toString("utf8"));
  });
});
