import { OatsError } from "../../errors.js";
import type { CommandSpec } from "../context.js";
import { loadEvidenceLibrary } from "./run-shared.js";

export const runVerify: CommandSpec = {
  name: "run verify",
  define(command) {
    command
      .description("check a sealed run: the record hashes to its id, the log to the record's digest, and the audit log holds its run-start and run-end entries; failed-evidence exits non-zero")
      .argument("<run>", "the run's handle or id (sha256-<64 hex>), or a unique prefix of either");
  },
  async run(context, [ref]) {
    const library = await loadEvidenceLibrary();
    const verdict = library.verifyRun(context.scope, ref!);
    const { record, ...rest } = verdict;
    const gaps = record.evidence.gaps.map((gap) => `${gap.class} (${gap.reason})`);
    const failure =
      verdict.status === "failed-evidence"
        ? new OatsError("integrity-mismatch", `run ${verdict.handle} verifies but is sealed failed-evidence: required evidence missing: ${gaps.join(", ")}`, { handle: verdict.handle, runId: verdict.runId, gaps: record.evidence.gaps, reason: "run-failed-evidence" })
        : undefined;
    return {
      result: { ...rest, evidence: record.evidence },
      lines: [
        `verified run ${verdict.handle}: ${verdict.result}${verdict.status === "failed-evidence" ? " failed-evidence" : ""} ${verdict.runId}`,
        `  record  hashes to its id`,
        `  log     ${record.log.lines} line${record.log.lines === 1 ? "" : "s"}, ${record.log.bytes} bytes, ${record.log.digest}`,
        `  audit   run-start seq ${verdict.checks.audit.start}, run-end seq ${verdict.checks.audit.end}`,
      ],
      quietLines: [verdict.runId],
      ...(failure ? { failure } : {}),
    };
  },
};
