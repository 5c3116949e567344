import { OatsError } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import type { ReceivedVerdict } from "../../evidence/index.js";
import { loadEvidenceLibrary, receivedFor } from "./run-shared.js";

/**
 * A run that verifies (record, log and audit entries are what was sealed) but was sealed failed-evidence: its
 * profile required evidence the run does not carry. Not tampering, so not integrity-mismatch: `evidence-incomplete`,
 * its own kind and exit code (8).
 */
function evidenceFailure(runId: string, handle: string, gaps: { class: string; reason: string }[]): OatsError {
  return new OatsError(
    "evidence-incomplete",
    `run ${handle} verifies but is sealed failed-evidence: required evidence ` +
      `missing: ${gaps.map((gap) => `${gap.class} (${gap.reason})`).join(", ")}`,
    { handle, runId, gaps, reason: "run-failed-evidence" },
  );
}

function verifiedReceived(verdict: ReceivedVerdict) {
  const { record, ...rest } = verdict;
  return {
    result: { ...rest, received: true, evidence: record.evidence },
    lines: [
      `verified received run ${verdict.handle}: ` +
        `${verdict.result}${verdict.status === "failed-evidence" ? " failed-evidence" : ""} ` +
        `${verdict.runId}`,
      `  from    ${verdict.from ?? "?"}`,
      `  record  hashes to its id`,
      `  log     ${record.log.lines} line${record.log.lines === 1 ? "" : "s"}, ` +
        `${record.log.bytes} bytes, ${record.log.digest}`,
      `  audit   checked against the delivered audit lines only ` +
        `(${verdict.checks.audit.lines}: run-start seq ` +
        `${verdict.checks.audit.start}, run-end seq ` +
        `${verdict.checks.audit.end}); the sending host's audit chain is not ` +
        `verifiable here`,
      `  pulled  run-receive entry seq ${verdict.checks.audit.received} of this scope's audit log names these bytes`,
    ],
    quietLines: [verdict.runId],
    ...(verdict.status === "failed-evidence"
      ? { failure: evidenceFailure(verdict.runId, verdict.handle, record.evidence.gaps) }
      : {}),
  };
}

export const runVerify: CommandSpec = {
  name: "run verify",
  define(command) {
    command
      .description(
        "check a sealed run: the record hashes to its id, the log to the " +
          "record's digest, and the audit log holds its run-start and run-end " +
          "entries (a received run: against its delivered audit lines only); " +
          "an intact run sealed failed-evidence exits 8 (evidence-incomplete)",
      )
      .argument("<run>", "the run's handle or id (sha256-<64 hex>), or a unique prefix of either");
  },
  async run(context, [ref]) {
    const library = await loadEvidenceLibrary();
    let verdict;
    try {
      verdict = library.verifyRun(context.scope, ref!);
    } catch (error) {
      const found = await receivedFor(context.scope, ref!, error);
      if (found === null) throw error;
      const { resolveScope } = await import("../../retention/store/components.js");
      return verifiedReceived(library.verifyReceivedRun(found, library.readAnchoredAudit(resolveScope(context.scope))));
    }
    const { record, ...rest } = verdict;
    const failure =
      verdict.status === "failed-evidence"
        ? evidenceFailure(verdict.runId, verdict.handle, record.evidence.gaps)
        : undefined;
    return {
      result: { ...rest, evidence: record.evidence },
      lines: [
        `verified run ${verdict.handle}: ` +
          `${verdict.result}${verdict.status === "failed-evidence" ? " failed-evidence" : ""} ` +
          `${verdict.runId}`,
        `  record  hashes to its id`,
        `  log     ${record.log.lines} line${record.log.lines === 1 ? "" : "s"}, ` +
          `${record.log.bytes} bytes, ${record.log.digest}`,
        `  audit   run-start seq ${verdict.checks.audit.start}, run-end seq ${verdict.checks.audit.end}`,
      ],
      quietLines: [verdict.runId],
      ...(failure ? { failure } : {}),
    };
  },
};
