import type { DispatchPlan } from "../captures/index.js";
import {
  EVIDENCE_CLASSES,
  evidenceFromFacts,
  isEvidenceClass,
  type EvidenceClass,
  createRedactor,
  redactionRules,
  type Redactor,
} from "../captures/index.js";
import type { EvidenceSection } from "./run-record.js";

/**
 * What a run is held to, taken from its dispatch plan only: the plan's
 * credentials and pinned profile give the redactor, the pinned profile gives
 * the required evidence classes. Neither is an option of the runner, so no
 * caller can run a dispatch with weaker redaction or fewer required classes
 * than the approved composition (whose digest covers the profile) says.
 */

/** The redactor of a run: the values of the credentials the plan provides, then the pinned profile's patterns. */
export function runRedactor(plan: Pick<DispatchPlan, "env" | "credentials" | "evidence">): Redactor {
  const credentials: Record<string, string> = {};
  for (const name of plan.credentials.provided) {
    const value = Object.hasOwn(plan.env, name) ? plan.env[name] : undefined;
    if (value !== undefined) credentials[name] = value;
  }
  return createRedactor(redactionRules(credentials, plan.evidence.redact));
}

/** The facts run-seal.ts knows when it seals (its EvidenceFacts). */
export interface SealFacts {
  readonly required: readonly string[];
  readonly result: string;
  readonly exit: { readonly code: number | null; readonly signal: string | null };
  readonly lines: number;
  readonly redactions: ReadonlyArray<{ readonly rule: string; readonly count: number }>;
  readonly environment: readonly string[];
}

/**
 * The record's evidence section at seal. A sealed record always carries its
 * log, the environment names, the approval and the classification (the run
 * base holds them from the start). The exit status counts when a code or a
 * signal is known. The redaction statement counts only when the dispatcher
 * that redacted sealed the run: an INTERRUPTED run's counts died with it.
 * A required name that is not a known class (a damaged control file) is a
 * gap too: never silently dropped.
 */
export function judgeRunEvidence(facts: SealFacts): EvidenceSection {
  const interrupted = facts.result === "INTERRUPTED";
  const section = evidenceFromFacts(facts.required.filter(isEvidenceClass), {
    log: { digest: "sealed", lines: facts.lines },
    exit: facts.exit,
    environmentNames: facts.environment,
    approval: { seq: 0, hash: "sealed" },
    classification: "sealed",
    redactions: interrupted ? null : facts.redactions,
  });
  const reasons = new Map<EvidenceClass, string>([
    [
      "exit-status",
      interrupted
        ? "the dispatcher was interrupted: the child's exit status is unknown"
        : "the child's exit status is unknown",
    ],
    ["redaction-statement", "the dispatcher was interrupted: its redaction counts were lost"],
  ]);
  const gaps = section.gaps.map((gap) => ({ class: gap.class, reason: reasons.get(gap.class) ?? gap.reason }));
  const unknown = [...new Set(facts.required.filter((name) => !isEvidenceClass(name)))].map((name) => ({
    class: name,
    reason: `not a known evidence class (known: ${EVIDENCE_CLASSES.join(", ")})`,
  }));
  const allGaps = [...gaps, ...unknown];
  return {
    required: [...section.required, ...unknown.map((gap) => gap.class)],
    captured: section.captured,
    gaps: allGaps,
    status: allGaps.length === 0 ? "complete" : "failed-evidence",
  };
}
