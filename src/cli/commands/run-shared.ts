import type { ReadRun, RunSummary } from "../../evidence/index.js";

/** The evidence library, loaded only when a run command runs. */
export function loadEvidenceLibrary() {
  return import("../../evidence/index.js");
}

/** `OK`, or `OK failed-evidence` when the record declares an unmet required class. */
export function resultText(run: { result: string | null; status: string | null; state: string }): string {
  if (run.result === null)
    return run.state === "running" ? "RUNNING" : run.state === "foreign" ? "FOREIGN" : "UNSEALED";
  return run.status === "failed-evidence" ? `${run.result} failed-evidence` : run.result;
}

export function summaryLine(run: RunSummary): string {
  const exit =
    run.exit === null
      ? ""
      : run.exit.signal !== null
        ? ` ${run.exit.signal}`
        : run.exit.code !== null
          ? ` exit ${run.exit.code}`
          : "";
  if (run.error !== null) return `${run.handle}  DAMAGED  ${run.error}`;
  const line = `${run.handle}  ${resultText(run)}${exit}  job ${run.job ?? "?"}  ${run.runId ?? "(not sealed)"}`;
  // A foreign run says why oats will not cancel or seal it (run-standing.ts).
  return run.foreign === null ? line : `${line}  (not started by this account's oats: ${run.foreign.message})`;
}

/** The log as stored: `<stamp> <stream> <text>`, then the footer. */
export function logLines(run: ReadRun): string[] {
  return [...run.lines.map((line) => `${line.at} ${line.stream} ${line.text}`), ...run.footer];
}

/** A local run's ref that names no local run may name a received one: its location, or null (the local error stands).
 * */
export async function receivedFor(
  scope: string,
  ref: string,
  error: unknown,
): Promise<{ runId: string; dir: string } | null> {
  if (!(error instanceof Error) || (error as { code?: unknown }).code !== "run-not-found") return null;
  const library = await loadEvidenceLibrary();
  const { resolveScope } = await import("../../retention/store/components.js");
  return library.findReceived(resolveScope(scope), ref);
}
