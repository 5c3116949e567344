/**
 * Evidence classes (the capture profile, enforced): what a sealed run
 * record must carry for the run to count as evidence at all. The capture
 * profile names the required classes; the profile's bytes are pinned and its
 * digest is part of the approved composition, so the required set a run is
 * judged against is the approved one, read from the pinned blob at dispatch.
 * Nothing a dispatcher passes at run time takes part in it.
 *
 * A run that misses a required class keeps its real `result` (OK, FAILED,
 * ...) but its evidence status is `failed-evidence`.
 */

export const EVIDENCE_CLASSES = [
  "log",
  "exit-status",
  "environment-names",
  "approval",
  "classification",
  "redaction-statement",
] as const;
export type EvidenceClass = (typeof EVIDENCE_CLASSES)[number];

/**
 * What is required when no profile is pinned, or the pinned profile says
 * nothing about evidence: every class. A profile may require fewer only by
 * saying so, and that profile is what the approver approved.
 */
export const DEFAULT_REQUIRED_EVIDENCE: readonly EvidenceClass[] = EVIDENCE_CLASSES;

export function isEvidenceClass(name: string): name is EvidenceClass {
  return (EVIDENCE_CLASSES as readonly string[]).includes(name);
}

/** Classes in their canonical order, each once. */
export function canonicalClasses(classes: Iterable<EvidenceClass>): EvidenceClass[] {
  const set = new Set(classes);
  return EVIDENCE_CLASSES.filter((name) => set.has(name));
}

/**
 * The facts of a run that decide which classes it captured. Each is null
 * when the run could not establish it; the strings say why (they become the
 * gap's reason).
 */
export interface RunEvidenceFacts {
  /** The log's digest and line count, once the log was written and digested. */
  readonly log: { readonly digest: string; readonly lines: number } | null;
  /** How the child ended; both null means it is unknown (e.g. an interrupted dispatcher). */
  readonly exit: { readonly code: number | null; readonly signal: string | null } | null;
  /** The names (never values) of the environment the child was given. */
  readonly environmentNames: readonly string[] | null;
  /** The approval ledger entry the dispatch ran under. */
  readonly approval: { readonly seq: number; readonly hash: string } | null;
  /** The effective classification the dispatch was gated on. */
  readonly classification: string | null;
  /** The redaction statement (rule names and counts), once the log was complete. */
  readonly redactions: ReadonlyArray<{ readonly rule: string; readonly count: number }> | null;
}

export interface EvidenceGap {
  readonly class: EvidenceClass;
  readonly reason: string;
}

export interface EvidenceSection {
  readonly required: EvidenceClass[];
  readonly captured: EvidenceClass[];
  readonly gaps: EvidenceGap[];
  readonly status: "complete" | "failed-evidence";
}

const NOT_CAPTURED: Record<EvidenceClass, string> = {
  log: "no complete log was written",
  "exit-status": "the child's exit status is unknown",
  "environment-names": "the names of the child's environment were not recorded",
  approval: "the approval the run ran under was not recorded",
  classification: "the effective classification was not recorded",
  "redaction-statement": "no redaction statement was produced",
};

/** Which classes the facts establish, with a reason for each that is missing. */
export function capturedClasses(facts: RunEvidenceFacts): {
  captured: EvidenceClass[];
  missing: Map<EvidenceClass, string>;
} {
  const has: Record<EvidenceClass, boolean> = {
    log: facts.log !== null,
    "exit-status": facts.exit !== null && (facts.exit.code !== null || facts.exit.signal !== null),
    "environment-names": facts.environmentNames !== null,
    approval: facts.approval !== null,
    classification: facts.classification !== null,
    "redaction-statement": facts.redactions !== null,
  };
  const captured = EVIDENCE_CLASSES.filter((name) => has[name]);
  const missing = new Map(
    EVIDENCE_CLASSES.filter((name) => !has[name]).map((name) => [name, NOT_CAPTURED[name]] as const),
  );
  return { captured, missing };
}

/**
 * The record's `evidence` section: the required classes, every class the run
 * captured, a gap (with its reason) for each required class it did not, and
 * `failed-evidence` when there is any gap. `reasons` may give a more precise
 * reason for a class the run could not capture (e.g. "dispatcher interrupted").
 */
export function evidenceSection(
  required: Iterable<EvidenceClass>,
  captured: Iterable<EvidenceClass>,
  reasons: ReadonlyMap<EvidenceClass, string> = new Map(),
): EvidenceSection {
  const requiredList = canonicalClasses(required);
  const capturedList = canonicalClasses(captured);
  const have = new Set(capturedList);
  const gaps = requiredList
    .filter((name) => !have.has(name))
    .map((name) => ({ class: name, reason: reasons.get(name) ?? NOT_CAPTURED[name] }));
  return {
    required: requiredList,
    captured: capturedList,
    gaps,
    status: gaps.length === 0 ? "complete" : "failed-evidence",
  };
}

/** evidenceSection from a run's facts. */
export function evidenceFromFacts(required: Iterable<EvidenceClass>, facts: RunEvidenceFacts): EvidenceSection {
  const { captured, missing } = capturedClasses(facts);
  return evidenceSection(required, captured, missing);
}
