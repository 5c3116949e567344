import { z } from "zod";
import { canonicalJsonBytes, parseJsonText } from "../core/index.js";
import { attestationRefusal } from "./dsse.js";

/**
 * The in-toto Statement v1 oats signs (docs/design/attestations.md), one of
 * two predicate types of the project's own:
 *
 * - APPROVAL_PREDICATE: an operator approved one exact capture composition.
 *   Subjects, in this order: the composition (`sha256` of its canonical
 *   bytes, the digest `oats approve composition` names) and the executable
 *   tree it runs (`oatsTreeExecV1`, the tree's oats.tree-exec.v1 digest).
 * - RUN_PREDICATE: a sealed run. Subjects: the run record (`sha256` of
 *   record.json, which is the run id) and the resolution it ran (`sha256`
 *   of the record bytes, the resolution id).
 *
 * The payload is the statement's canonical JSON (oats.json.v1), and is read
 * back only in that form.
 */

export const STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
export const APPROVAL_PREDICATE = "https://oats.dev/attestation/approval/v1";
export const RUN_PREDICATE = "https://oats.dev/attestation/run/v1";
export const PREDICATE_TYPES = [APPROVAL_PREDICATE, RUN_PREDICATE] as const;
export type PredicateType = (typeof PREDICATE_TYPES)[number];
/** The DigestSet key of an oats.tree-exec.v1 digest: not the sha256 of one file, so not `sha256`. */
export const TREE_DIGEST_ALGORITHM = "oatsTreeExecV1";

const hex = z.string().regex(/^[0-9a-f]{64}$/);
const stamp = z.string().regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$/);
const chainRef = z.object({ seq: z.number().int().nonnegative(), hash: z.string().min(1).max(200) }).strict();

export const approvalSubjectSchema = z.tuple([
  z
    .object({
      name: z.string().regex(/^composition:[a-z0-9][a-z0-9._-]{0,213}$/),
      digest: z.object({ sha256: hex }).strict(),
    })
    .strict(),
  z
    .object({
      name: z.string().regex(/^tree:(capture|capability|source)\/[a-z0-9][a-z0-9._-]{0,213}$/),
      digest: z.object({ [TREE_DIGEST_ALGORITHM]: hex }).strict(),
    })
    .strict(),
]);

export const approvalPredicateSchema = z
  .object({
    capture: z.string().min(1).max(214),
    approver: z.string().min(1).max(512),
    reason: z.string().min(1).max(4096),
    approvedAt: stamp,
    level: z.enum(["public", "internal", "confidential"]),
    ledger: chainRef,
  })
  .strict();

export const runSubjectSchema = z.tuple([
  z
    .object({
      name: z.string().regex(/^run:\d{8}T\d{6}Z-[0-9a-f]{8}$/),
      digest: z.object({ sha256: hex }).strict(),
    })
    .strict(),
  z.object({ name: z.literal("resolution"), digest: z.object({ sha256: hex }).strict() }).strict(),
]);

export const runPredicateSchema = z
  .object({
    handle: z.string().regex(/^\d{8}T\d{6}Z-[0-9a-f]{8}$/),
    job: z.string().min(1).max(214),
    principal: z.string().min(1).max(512),
    classification: z.enum(["public", "internal", "confidential"]),
    result: z.enum(["OK", "FAILED", "CANCELLED", "INTERRUPTED"]),
    exit: z
      .object({
        code: z.number().int().min(0).max(255).nullable(),
        signal: z
          .string()
          .regex(/^SIG[A-Z0-9]+$/)
          .nullable(),
      })
      .strict(),
    log: z
      .object({
        digest: z.string().regex(/^sha256-[0-9a-f]{64}$/),
        lines: z.number().int().nonnegative(),
        bytes: z.number().int().nonnegative(),
      })
      .strict(),
    evidence: z
      .object({
        status: z.enum(["complete", "failed-evidence"]),
        required: z.array(z.string().min(1)),
        captured: z.array(z.string().min(1)),
        gaps: z.array(z.object({ class: z.string().min(1), reason: z.string() }).strict()),
      })
      .strict(),
    redactions: z.array(z.object({ rule: z.string().min(1), count: z.number().int().nonnegative() }).strict()),
    approval: chainRef,
    startedAt: z.string().min(1),
    endedAt: z.string().min(1),
  })
  .strict();

export const approvalStatementSchema = z
  .object({
    _type: z.literal(STATEMENT_TYPE),
    subject: approvalSubjectSchema,
    predicateType: z.literal(APPROVAL_PREDICATE),
    predicate: approvalPredicateSchema,
  })
  .strict();

export const runStatementSchema = z
  .object({
    _type: z.literal(STATEMENT_TYPE),
    subject: runSubjectSchema,
    predicateType: z.literal(RUN_PREDICATE),
    predicate: runPredicateSchema,
  })
  .strict();

export type ApprovalStatement = z.infer<typeof approvalStatementSchema>;
export type RunStatement = z.infer<typeof runStatementSchema>;
export type Statement = ApprovalStatement | RunStatement;
export type ApprovalPredicate = z.infer<typeof approvalPredicateSchema>;
export type RunPredicate = z.infer<typeof runPredicateSchema>;

const bare = (digest: string) => digest.replace(/^(oats\.[a-z.-]+v\d+:)?sha256-/, "");

/** The statement of an approval of one composition. */
export function approvalStatement(input: {
  readonly capture: string;
  /** `oats.json.v1:sha256-<hex>` (or `sha256-<hex>`) of the composition. */
  readonly composition: string;
  readonly tree: { readonly kind: string; readonly key: string; readonly integrity: string };
  readonly approver: string;
  readonly reason: string;
  readonly approvedAt: string;
  readonly level: ApprovalPredicate["level"];
  readonly ledger: { readonly seq: number; readonly hash: string };
}): ApprovalStatement {
  return {
    _type: STATEMENT_TYPE,
    subject: [
      { name: `composition:${input.capture}`, digest: { sha256: bare(input.composition) } },
      {
        name: `tree:${input.tree.kind}/${input.tree.key}`,
        digest: { [TREE_DIGEST_ALGORITHM]: bare(input.tree.integrity) },
      },
    ],
    predicateType: APPROVAL_PREDICATE,
    predicate: {
      capture: input.capture,
      approver: input.approver,
      reason: input.reason,
      approvedAt: input.approvedAt,
      level: input.level,
      ledger: { seq: input.ledger.seq, hash: input.ledger.hash },
    },
  } as ApprovalStatement;
}

/** The statement of a sealed run (its id is the sha256 of its record's bytes). */
export function runStatement(runId: string, resolution: string, predicate: RunPredicate): RunStatement {
  return {
    _type: STATEMENT_TYPE,
    subject: [
      { name: `run:${predicate.handle}`, digest: { sha256: bare(runId) } },
      { name: "resolution", digest: { sha256: bare(resolution) } },
    ],
    predicateType: RUN_PREDICATE,
    predicate,
  };
}

/** The payload bytes of a statement (canonical JSON), after checking it against its schema. */
export function statementBytes(statement: Statement): Buffer {
  const schema = statement.predicateType === APPROVAL_PREDICATE ? approvalStatementSchema : runStatementSchema;
  return canonicalJsonBytes(schema.parse(statement));
}

/**
 * A payload read back: canonical JSON of an in-toto Statement v1 whose
 * predicate type is one of ours (`predicate-type` otherwise; also when the
 * caller expects the other one), valid against that type's schema
 * (`statement-invalid`).
 */
export function parseStatement(payload: Buffer, origin: string, expected?: PredicateType): Statement {
  const invalid = (why: string, extra: Record<string, unknown> = {}) =>
    attestationRefusal("statement-invalid", `${origin} does not hold a statement oats reads: ${why}`, {
      origin,
      ...extra,
    });
  const value = parseJsonText(payload.toString("utf8"), 16, () => invalid("not JSON"));
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw invalid("not a JSON object");
  const record = value as Record<string, unknown>;
  if (record._type !== STATEMENT_TYPE) throw invalid(`_type is not ${STATEMENT_TYPE}`);
  const predicateType = record.predicateType;
  if (!PREDICATE_TYPES.includes(predicateType as PredicateType) || (expected && predicateType !== expected))
    throw attestationRefusal(
      "predicate-type",
      `${origin} has the predicate type ${JSON.stringify(String(predicateType).slice(0, 200))}, not ` +
        `${expected ?? PREDICATE_TYPES.join(" or ")}`,
      { origin, predicateType: String(predicateType).slice(0, 200), expected: expected ?? [...PREDICATE_TYPES] },
    );
  const schema = predicateType === APPROVAL_PREDICATE ? approvalStatementSchema : runStatementSchema;
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw invalid(`${issue?.path.join("/") ?? ""}: ${issue?.message ?? "invalid"}`, {
      path: issue?.path.join("/") ?? null,
    });
  }
  if (!canonicalJsonBytes(parsed.data).equals(payload)) throw invalid("not in canonical oats.json.v1 form");
  return parsed.data as Statement;
}

/** `sha256-<hex>` digests a statement's subjects name, by role. */
export function subjectDigests(statement: Statement): Record<string, string> {
  if (statement.predicateType === APPROVAL_PREDICATE) {
    const [composition, tree] = statement.subject;
    return {
      composition: `sha256-${composition.digest.sha256}`,
      tree: `sha256-${tree.digest[TREE_DIGEST_ALGORITHM as keyof typeof tree.digest]}`,
    };
  }
  const [run, resolution] = statement.subject;
  return { run: `sha256-${run.digest.sha256}`, resolution: `sha256-${resolution.digest.sha256}` };
}
