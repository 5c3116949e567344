/**
 * The API report (api/oats.api.md) and the API reference (docs/api.md) are generated from the built
 * declarations of every entry by scripts/api-report.mjs (`npm run docs`; `npm run build` first): a change
 * of the package's surface that the report does not carry fails here.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { REPO } from "./helpers.js";

/**
 * Public functions that still take `unknown` where a typed input belongs (ArtifactRefInput, a plan, a subject, ...).
 * The list only shrinks: a new one fails, and so does one typed since without being struck off.
 */
const UNKNOWN_YET = [
  "acquisition/git.ts#assertFullCommit",
  "acquisition/tarball.ts#parseTarballIntegrity",
  "captures/approvals.ts#approvalState",
  "captures/approvals.ts#approve",
  "captures/approvals.ts#parseApprovalSubject",
  "captures/approvals.ts#requireApproval",
  "captures/approvals.ts#revoke",
  "captures/composition.ts#parseComposition",
  "captures/decision-target.ts#approvalTarget",
  "captures/decision-target.ts#checkApprovalTarget",
  "captures/decision-target.ts#checkRevokeTarget",
  "captures/spec.ts#parseCaptureSpec",
  "evidence/transport.ts#transportFor",
  "ledger/audit.ts#auditRefusal",
  "ledger/chain-log.ts#appendEntry",
  "lifecycle/pins.ts#parsePinRef",
  "lifecycle/pins.ts#pin",
  "lifecycle/pins.ts#unpin",
  "lifecycle/repair.ts#repair",
  "resolution/plan.ts#parsePlan",
  "resolution/prepare.ts#prepare",
  "resolution/secrets.ts#assertNoSecrets",
  "resolution/secrets.ts#findSecrets",
  "resolution/store.ts#parseResolutionId",
  "resolution/store.ts#writeResolution",
  "retention/oats-lock.ts#parseLock",
  "retention/retain.ts#retainCapabilityArtifact",
  "retention/store/blobs.ts#parseBlobDigest",
  "retention/store/layout.ts#parseArtifactRef",
  "retention/store/layout.ts#retainedCapabilityDir",
  "retention/store/layout.ts#retainedTreeDir",
  "retention/verify.ts#verifyRetainedCapability",
  "retention/verify.ts#verifyTree",
];

/** Public functions and classes with no TSDoc yet. The list only shrinks, as UNKNOWN_YET. */
const UNDOCUMENTED_YET = [
  "acquisition/extract.ts#extractTar",
  "acquisition/source.ts#retainSource",
  "acquisition/tarball.ts#retainTarball",
  "attestation/bundle.ts#bundleOf",
  "attestation/verify.ts#verifyEnvelopeBytes",
  "captures/classification.ts#isLevel",
  "captures/dispatch.ts#resolveQueuedCapture",
  "captures/posture.ts#evidencePosture",
  "captures/signed-approval.ts#requireSignedApproval",
  "captures/spec.ts#evidencePolicy",
  "core/errors.ts#OatsError",
  "core/errors.ts#isOatsError",
  "evidence/log-format.ts#exitText",
  "evidence/posture-check.ts#checkEvidencePosture",
  "evidence/posture-check.ts#evidenceDestination",
  "evidence/push.ts#pushEvidence",
  "evidence/received-api.ts#listReceivedRuns",
  "evidence/received-api.ts#readReceivedRun",
  "evidence/run-api.ts#listRuns",
  "evidence/run-api.ts#readRun",
  "evidence/run-exec.ts#runDispatchPlanWithEvidence",
  "evidence/transport-dir.ts#dirTransport",
  "fleet/attestation-check.ts#verifyAttestation",
  "fleet/pull.ts#pullFromRegistry",
  "fleet/push.ts#pushToRegistry",
  "ledger/approval-check.ts#crossCheckReasonText",
  "lifecycle/pins.ts#pinRefText",
  "lifecycle/repair.ts#repair",
  "lifecycle/roots.ts#collectRoots",
  "lifecycle/roots.ts#reachableFrom",
  "resolution/read.ts#readResolution",
  "resolution/reconstruct.ts#reconstruct",
  "resolution/secrets.ts#assertNoSecrets",
  "resolution/secrets.ts#findSecrets",
  "resolution/store.ts#parseResolutionId",
  "resolution/store.ts#readInstanceRef",
  "resolution/store.ts#resolutionPath",
  "retention/digest/integrity.ts#integrityText",
  "retention/inventory.ts#listStore",
  "retention/revision-size.ts#revisionSize",
  "retention/store/layout.ts#storeRoot",
  "scope/fsck.ts#fsckScope",
];

describe("the API report", () => {
  const generated = JSON.parse(
    execFileSync(process.execPath, [join(REPO, "scripts/api-report.mjs"), "--print"], {
      encoding: "utf8",
      maxBuffer: 64 << 20,
    }),
  ) as { report: string; reference: string };

  test("api/oats.api.md is what `npm run docs` writes from the built declarations", () => {
    assert.equal(readFileSync(join(REPO, "api/oats.api.md"), "utf8"), generated.report, "run `npm run docs`");
  });

  test("docs/api.md, the API reference, is what `npm run docs` writes", () => {
    assert.equal(readFileSync(join(REPO, "docs/api.md"), "utf8"), generated.reference, "run `npm run docs`");
  });

  test("the report names every entry package.json exports", () => {
    for (const entry of ["oats-retention", "oats-retention/retention", "oats-retention/fleet"])
      assert.ok(generated.report.includes(`\n## ${entry}\n`), entry);
    assert.match(generated.report, /- class `OatsError`: src\/core\/errors\.ts/);
  });
});

type Declaration = { key: string; kind: string; documented: boolean; unknownParameters: string[] };

describe("the surface's quality, read from the report", async () => {
  const { surface } = (await import(join(REPO, "scripts/api-report.mjs"))) as {
    surface(): { declarations: Map<string, Declaration> };
  };
  const declarations = [...surface().declarations.values()];

  test("no public function takes `unknown`, but where its TSDoc says it takes any JSON value", () => {
    const found = declarations.filter((declaration) => declaration.unknownParameters.length > 0);
    assert.deepEqual(
      found.map((declaration) => declaration.key).sort(),
      UNKNOWN_YET,
      "type the input (or strike it off UNKNOWN_YET once typed)",
    );
  });

  test("every public function and class has TSDoc", () => {
    const found = declarations.filter(
      (declaration) => (declaration.kind === "function" || declaration.kind === "class") && !declaration.documented,
    );
    assert.deepEqual(
      found.map((declaration) => declaration.key).sort(),
      UNDOCUMENTED_YET,
      "document it (or strike it off UNDOCUMENTED_YET once documented)",
    );
  });
});
