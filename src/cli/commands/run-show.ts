import type { CommandSpec } from "../support/context.js";
import { loadEvidenceLibrary, logLines, receivedFor, resultText } from "./run-shared.js";

export const runShow: CommandSpec = {
  name: "run show",
  define(command) {
    command
      .description(
        "print a run (a local run, or one received with `oats pull --run`): its " +
          "record (when sealed) and its log with the stamps (not verified: `oats " +
          "run verify` checks it)",
      )
      .argument("<run>", "the run's handle or id (sha256-<64 hex>), or a unique prefix of either");
  },
  async run(context, [ref]) {
    const library = await loadEvidenceLibrary();
    let run;
    try {
      run = library.readRun(context.scope, ref!);
    } catch (error) {
      const found = await receivedFor(context.scope, ref!, error);
      if (found === null) throw error;
      const { resolveScope } = await import("../../retention/store/components.js");
      const got = library.readReceivedRun(resolveScope(context.scope), found);
      const record = got.record;
      const lines = [...got.lines.map((line) => `${line.at} ${line.stream} ${line.text}`), ...got.footer];
      return {
        result: {
          received: true,
          from: got.from,
          runId: got.runId,
          handle: record.handle,
          state: "sealed",
          record,
          lines: got.lines,
          footer: got.footer,
        },
        lines: [
          `received run ${record.handle}: ` +
            `${resultText({ result: record.result, status: record.evidence.status, state: "sealed" })} ` +
            `${got.runId}`,
          `  received from ${got.from ?? "?"} (not run here; \`oats run verify\` checks it)`,
          `  job ${record.job}, resolution ${record.resolution}`,
          `  started ${record.startedAt}, ended ${record.endedAt}, principal ${record.principal}`,
          `  log ${record.log.lines} line${record.log.lines === 1 ? "" : "s"}, ` +
            `${record.log.bytes} bytes, ${record.log.digest}`,
          ...lines,
        ],
        quietLines: lines,
      };
    }
    const { record } = run;
    const head =
      `run ${run.handle}: ` +
      resultText({ result: record?.result ?? null, status: record?.evidence.status ?? null, state: run.state }) +
      (run.runId === null ? "" : ` ${run.runId}`);
    const about =
      record === null
        ? [
            `  job ${run.control?.base.job ?? "?"}, resolution ` +
              `${run.control?.base.resolution ?? "?"}, started ` +
              `${run.control?.base.startedAt ?? "?"}`,
          ]
        : [
            `  job ${record.job}, resolution ${record.resolution}`,
            `  started ${record.startedAt}, ended ${record.endedAt}, principal ${record.principal}`,
            `  log ${record.log.lines} line${record.log.lines === 1 ? "" : "s"}, ` +
              `${record.log.bytes} bytes, ${record.log.digest}`,
            `  redactions ` +
              (record.redactions.length === 0
                ? "none"
                : record.redactions.map((row) => `${row.rule} x${row.count}`).join(", ")),
            `  evidence ${record.evidence.status}` +
              (record.evidence.gaps.length === 0
                ? ""
                : `; gaps: ${record.evidence.gaps.map((gap) => `${gap.class} (${gap.reason})`).join(", ")}`),
          ];
    const { control: _control, ...shown } = run;
    return {
      result: { ...shown, state: run.state },
      lines: [head, ...about, ...logLines(run)],
      quietLines: logLines(run),
    };
  },
};
