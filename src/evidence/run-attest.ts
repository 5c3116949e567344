import { isOatsError } from "../core/index.js";
import { type Attested, attestStatement, runStatement } from "../attestation/index.js";
import type { RunRecord } from "./run-record.js";

/**
 * The signed statement of a sealed run (docs/design/attestations.md): with
 * the operator's signing key present, every seal (the dispatcher's and
 * `oats run seal`'s) also writes an in-toto statement whose subjects are the
 * run record (its digest is the run id) and the resolution it ran, and whose
 * predicate is what the record says of the outcome: result, exit, the log's
 * digest, the evidence status and the redaction statement. A statement that
 * cannot be written never unseals the run; it is reported instead.
 */
export function attestSealedRun(
  realScope: string,
  record: RunRecord,
  runId: string,
): { attestation: Attested | null; error: string | null } {
  try {
    const statement = runStatement(runId, record.resolution, {
      handle: record.handle,
      job: record.job,
      principal: record.principal,
      classification: record.classification as "public" | "internal" | "confidential",
      result: record.result,
      exit: { code: record.exit.code, signal: record.exit.signal },
      log: { ...record.log },
      evidence: {
        status: record.evidence.status,
        required: [...record.evidence.required],
        captured: [...record.evidence.captured],
        gaps: record.evidence.gaps.map((gap) => ({ ...gap })),
      },
      redactions: record.redactions.map((row) => ({ ...row })),
      approval: { ...record.approval },
      startedAt: record.startedAt,
      endedAt: record.endedAt,
    });
    return { attestation: attestStatement(realScope, statement), error: null };
  } catch (error) {
    return {
      attestation: null,
      error: `${isOatsError(error) ? `${error.code}: ` : ""}${error instanceof Error ? error.message : String(error)}`,
    };
  }
}
