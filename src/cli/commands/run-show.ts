import type { CommandSpec } from "../context.js";
import { loadEvidenceLibrary, logLines, resultText } from "./run-shared.js";

export const runShow: CommandSpec = {
  name: "run show",
  define(command) {
    command
      .description("print a run: its record (when sealed) and its log with the stamps (not verified: `oats run verify` checks it)")
      .argument("<run>", "the run's handle or id (sha256-<64 hex>), or a unique prefix of either");
  },
  async run(context, [ref]) {
    const library = await loadEvidenceLibrary();
    const run = library.readRun(context.scope, ref!);
    const { record } = run;
    const head = `run ${run.handle}: ${resultText({ result: record?.result ?? null, status: record?.evidence.status ?? null, state: run.state })}${run.runId === null ? "" : ` ${run.runId}`}`;
    const about = record === null
      ? [`  job ${run.control?.base.job ?? "?"}, resolution ${run.control?.base.resolution ?? "?"}, started ${run.control?.base.startedAt ?? "?"}`]
      : [
          `  job ${record.job}, resolution ${record.resolution}`,
          `  started ${record.startedAt}, ended ${record.endedAt}, principal ${record.principal}`,
          `  log ${record.log.lines} line${record.log.lines === 1 ? "" : "s"}, ${record.log.bytes} bytes, ${record.log.digest}`,
          `  redactions ${record.redactions.length === 0 ? "none" : record.redactions.map((row) => `${row.rule} x${row.count}`).join(", ")}`,
          `  evidence ${record.evidence.status}${record.evidence.gaps.length === 0 ? "" : `; gaps: ${record.evidence.gaps.map((gap) => `${gap.class} (${gap.reason})`).join(", ")}`}`,
        ];
    const { control: _control, ...shown } = run;
    return {
      result: { ...shown, state: run.state },
      lines: [head, ...about, ...logLines(run)],
      quietLines: logLines(run),
    };
  },
};
