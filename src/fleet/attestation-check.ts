import { OatsError, isOatsError } from "../core/index.js";
import {
  APPROVAL_PREDICATE,
  type ApprovalStatement,
  attestationRefusal,
  envelopeFromBundle,
  findAttestationId,
  listAttestationIds,
  MAX_BUNDLE_BYTES,
  parseEnvelope,
  parseStatement,
  readAttestation,
  readTrust,
  type RunStatement,
  type Statement,
  subjectDigests,
  TREE_DIGEST_ALGORITHM,
  verifyEnvelopeBytes,
  type VerifiedAttestation,
} from "../attestation/index.js";
import { compositionOf, compositionSubject, parseComposition } from "../captures/index.js";
import { findReceived, findRun, readRecord, type RunRecord } from "../evidence/index.js";
import { readRecordBytes } from "../resolution/index.js";
import { readBlob, readRegularFile, resolveScope, verifyTree, type ArtifactKind } from "../retention/index.js";
import { encodeEnvelope } from "../attestation/index.js";

/**
 * `oats attestation verify <ref>`: an attestation is believed when its
 * signature verifies with a key this scope trusts for its kind of statement
 * (attestation/verify.ts) and every subject it names is held here with that
 * digest:
 *
 * - an approval: the composition is pinned in this scope (its blob, which
 *   re-hashes to the digest), belongs to the capture the statement names, is
 *   declared at the statement's level, and runs the executable tree the
 *   statement names, which is retained here and verifies;
 * - a run: a run of this scope or a received run (`oats pull …:run-<hex>`)
 *   whose record hashes to the run subject, ran the resolution subject
 *   (held here), and says what the predicate says (result, exit, log
 *   digest, evidence, redactions, handle, job).
 *
 * A subject not held is `subject-not-held`; one held with another digest,
 * or a predicate that disagrees with what is held, `subject-mismatch`.
 */

export interface AttestationVerdict {
  readonly id: string;
  readonly predicateType: string;
  readonly keyid: string;
  readonly trust: string;
  readonly subjects: Statement["subject"];
  /** What was checked against what this scope holds, one line each. */
  readonly checked: string[];
  readonly statement: Statement;
}

function notHeld(id: string, what: string, details: Record<string, unknown>): OatsError {
  return attestationRefusal(
    "subject-not-held",
    `attestation ${id} names ${what}, which this scope does not hold: it cannot be checked here`,
    { id, ...details },
  );
}

function mismatch(id: string, what: string, details: Record<string, unknown>): OatsError {
  return attestationRefusal("subject-mismatch", `attestation ${id}: ${what}`, { id, ...details });
}

async function checkApproval(realScope: string, id: string, statement: ApprovalStatement): Promise<string[]> {
  const digests = subjectDigests(statement);
  let bytes: Buffer;
  try {
    bytes = readBlob(realScope, digests.composition!);
  } catch (error) {
    if (isOatsError(error) && error.code === "blob-not-found")
      throw notHeld(id, `composition ${digests.composition}`, { subject: digests.composition });
    throw error;
  }
  const composition = parseComposition(JSON.parse(bytes.toString("utf8")), `composition ${digests.composition}`);
  const subject = compositionSubject(composition);
  if (subject.integrity !== `oats.json.v1:${digests.composition}`)
    throw mismatch(id, `the blob ${digests.composition} is not that composition's canonical form`, {});
  const [named, tree] = statement.subject;
  if (named.name !== `composition:${composition.capture}` || statement.predicate.capture !== composition.capture)
    throw mismatch(id, `composition ${digests.composition} belongs to capture ${composition.capture}`, {
      capture: composition.capture,
    });
  const treeHex = tree.digest[TREE_DIGEST_ALGORITHM as keyof typeof tree.digest];
  const executable = composition.executable;
  if (
    tree.name !== `tree:${executable.kind}/${executable.key}` ||
    executable.integrity !== `oats.tree-exec.v1:sha256-${treeHex}`
  )
    throw mismatch(id, `the composition runs ${executable.kind} ${executable.key} ${executable.integrity}`, {
      expected: executable.integrity,
      actual: `oats.tree-exec.v1:sha256-${treeHex}`,
    });
  if (statement.predicate.level !== composition.classification.declared)
    throw mismatch(id, `the composition is declared ${composition.classification.declared}`, {
      expected: composition.classification.declared,
      actual: statement.predicate.level,
    });
  try {
    await verifyTree(realScope, {
      kind: executable.kind as ArtifactKind,
      key: executable.key,
      integrity: { format: "oats.tree-exec.v1", value: `sha256-${treeHex}` },
    });
  } catch (error) {
    if (isOatsError(error) && error.code === "artifact-not-found")
      throw notHeld(id, `${executable.kind} ${executable.key} ${executable.integrity}`, { subject: executable });
    throw error;
  }
  return [
    `composition ${digests.composition}: pinned here, capture ${composition.capture}, ` +
      `declared ${composition.classification.declared}`,
    `tree ${executable.kind} ${executable.key} ${executable.integrity}: retained here and verified`,
  ];
}

function heldRun(realScope: string, runId: string): { record: RunRecord; id: string; where: string } | null {
  let dir: string | null = null;
  let where = "a run of this scope";
  try {
    dir = findRun(realScope, runId).dir;
  } catch (error) {
    if (!isOatsError(error) || (error.code !== "run-not-found" && error.code !== "invalid-input")) throw error;
  }
  if (dir === null) {
    const received = findReceived(realScope, runId);
    if (received === null) return null;
    dir = received.dir;
    where = "a received run";
  }
  const read = readRecord(dir);
  return read === null ? null : { record: read.record, id: read.id, where };
}

function checkRun(realScope: string, id: string, statement: RunStatement): string[] {
  const digests = subjectDigests(statement);
  const held = heldRun(realScope, digests.run!);
  if (held === null) throw notHeld(id, `run ${digests.run}`, { subject: digests.run });
  if (held.id !== digests.run)
    throw mismatch(id, `the run record held here hashes to ${held.id}, not ${digests.run}`, {
      expected: digests.run,
      actual: held.id,
    });
  const { record } = held;
  if (record.resolution !== digests.resolution)
    throw mismatch(id, `run ${held.id} ran resolution ${record.resolution}, not ${digests.resolution}`, {
      expected: record.resolution,
      actual: digests.resolution,
    });
  try {
    readRecordBytes(realScope, digests.resolution!);
  } catch (error) {
    if (isOatsError(error) && error.code === "resolution-not-found")
      throw notHeld(id, `resolution ${digests.resolution}`, { subject: digests.resolution });
    throw error;
  }
  const predicate = statement.predicate;
  const claims = {
    handle: predicate.handle,
    job: predicate.job,
    result: predicate.result,
    exit: predicate.exit,
    log: predicate.log,
    status: predicate.evidence.status,
    redactions: predicate.redactions,
  };
  const holds = {
    handle: record.handle,
    job: record.job,
    result: record.result,
    exit: record.exit,
    log: record.log,
    status: record.evidence.status,
    redactions: record.redactions,
  };
  const differs = Object.keys(claims).filter(
    (key) => JSON.stringify(claims[key as keyof typeof claims]) !== JSON.stringify(holds[key as keyof typeof holds]),
  );
  if (differs.length > 0)
    throw mismatch(id, `the predicate disagrees with run ${held.id} in ${differs.join(", ")}`, { differs });
  return [
    `run ${held.id}: ${held.where}, ${record.handle} ${record.result} (${record.evidence.status}), ` +
      "record and predicate agree",
    `resolution ${record.resolution}: held here`,
  ];
}

/**
 * Read what an operator names: an attestation id or prefix, or a file holding an envelope or a bundle. The file is
 * opened once, never through a symlink at its name nor waiting on a FIFO, and read through that descriptor
 * (readRegularFile), like every file oats reads from a path an operator gives (reason `symlink`, `not-a-file`).
 */
export function attestationBytes(realScope: string, ref: string): { bytes: Buffer; origin: string } {
  if (ref.includes("/") || ref.endsWith(".json")) {
    const bytes = readRegularFile(ref, {
      limit: MAX_BUNDLE_BYTES,
      refuse: (failure) =>
        failure === "too-large"
          ? attestationRefusal("too-large", `${ref} is larger than ${MAX_BUNDLE_BYTES} bytes`, { path: ref })
          : new OatsError(
              failure === "missing" ? "artifact-not-found" : "invalid-input",
              `${ref} cannot be read (${failure})`,
              {
                path: ref,
                reason: failure,
              },
            ),
    });
    const looksLikeBundle = bytes.includes(Buffer.from('"mediaType"'));
    if (!looksLikeBundle) return { bytes, origin: ref };
    return { bytes: encodeEnvelope(envelopeFromBundle(bytes, ref).envelope), origin: ref };
  }
  const id = findAttestationId(realScope, ref);
  return { bytes: readAttestation(realScope, id).bytes, origin: `attestation ${id}` };
}

/**
 * Verify an attestation (src/fleet/attestation-check.ts): its signature with a key this scope trusts for its kind of
 * statement, then every subject it names against what the scope holds. Refuses with `attestation-refused`: a signature
 * or key that does not verify, a subject not held (`subject-not-held`) or held with another digest
 * (`subject-mismatch`).
 * @param ref an attestation id, or a unique prefix of one, in the scope's store; or the path (with a `/`, or ending in
 *   `.json`) of a file holding an envelope or a Sigstore bundle
 */
export async function verifyAttestation(scope: string, ref: string): Promise<AttestationVerdict> {
  const realScope = resolveScope(scope);
  const { bytes, origin } = attestationBytes(realScope, ref);
  const verified: VerifiedAttestation = verifyEnvelopeBytes(bytes, readTrust(realScope), { origin });
  const { statement } = verified;
  const checked =
    statement.predicateType === APPROVAL_PREDICATE
      ? await checkApproval(realScope, verified.id, statement)
      : checkRun(realScope, verified.id, statement);
  return {
    id: verified.id,
    predicateType: statement.predicateType,
    keyid: verified.keyid,
    trust: verified.trust.name,
    subjects: statement.subject,
    checked: [
      `signature by ${verified.keyid}, trusted here as ${verified.trust.name} for ${verified.trust.purpose}`,
      ...checked,
    ],
    statement,
  };
}

export interface AttestationListing {
  readonly id: string;
  readonly predicateType: string | null;
  readonly keyid: string | null;
  readonly subjects: { name: string; digest: Record<string, string> }[];
  /** `verified` (signature by a trusted key), or the refusal's reason (`key-not-trusted`, ...). */
  readonly status: string;
  readonly trust: string | null;
}

/**
 * Every attestation of the scope, with what its signature check says
 * (subjects are checked by `verify`, one at a time). `subject` limits the
 * list to those naming a digest that starts with it.
 */
export function listAttestations(scope: string, subject?: string): AttestationListing[] {
  const realScope = resolveScope(scope);
  const trust = readTrust(realScope);
  const wanted = subject?.replace(/^(oats\.[a-z.-]+v\d+:)?sha256-/, "");
  const rows: AttestationListing[] = [];
  for (const id of listAttestationIds(realScope).ids) {
    let row: AttestationListing = {
      id,
      predicateType: null,
      keyid: null,
      subjects: [],
      status: "unreadable",
      trust: null,
    };
    try {
      const { bytes, envelope } = readAttestation(realScope, id);
      row = { ...row, keyid: envelope.signatures[0]!.keyid };
      try {
        const statement = parseStatement(parseEnvelope(bytes, id).payload, `attestation ${id}`);
        row = { ...row, predicateType: statement.predicateType, subjects: statement.subject };
      } catch {
        // the check below says why
      }
      const verified = verifyEnvelopeBytes(bytes, trust);
      row = { ...row, status: "verified", trust: verified.trust.name };
    } catch (error) {
      row = { ...row, status: isOatsError(error) ? String(error.details["reason"] ?? error.code) : "unreadable" };
    }
    if (
      wanted === undefined ||
      row.subjects.some((each) => Object.values(each.digest).some((value) => value.startsWith(wanted)))
    )
      rows.push(row);
  }
  return rows;
}

/** The statements of the scope that are about this resolution: runs of it, approvals of its composition. */
export function attestationsAbout(
  realScope: string,
  resolution: string,
): { id: string; bytes: Buffer; predicateType: string }[] {
  const { record } = readRecordBytes(realScope, resolution);
  const composition =
    record.capture === null
      ? null
      : compositionSubject(compositionOf(record)).integrity.replace(/^oats\.json\.v1:/, "");
  const found: { id: string; bytes: Buffer; predicateType: string }[] = [];
  for (const id of listAttestationIds(realScope).ids) {
    try {
      const { bytes, envelope } = readAttestation(realScope, id);
      const statement = parseStatement(envelope.payload, `attestation ${id}`);
      const digests = subjectDigests(statement);
      if (digests.resolution === resolution || (composition !== null && digests.composition === composition))
        found.push({ id, bytes, predicateType: statement.predicateType });
    } catch {
      // not an attestation push can send: `oats attestation ls` shows it
    }
  }
  return found;
}
