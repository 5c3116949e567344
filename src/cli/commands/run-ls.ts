import type { CommandSpec } from "../support/context.js";
import { loadEvidenceLibrary, resultText, summaryLine } from "./run-shared.js";

export const runLs: CommandSpec = {
  name: "run ls",
  define(command) {
    command.description(
      "list the runs of this scope (oldest first): handle, result, exit, job " +
        "and run id; unsealed runs say so; then the runs received from a far " +
        "side (`oats pull --run`), marked received, with where from",
    );
  },
  async run(context) {
    const library = await loadEvidenceLibrary();
    const runs = library.listRuns(context.scope);
    const received = library.listReceivedRuns(context.scope);
    const receivedLines = received.map((run) =>
      run.error !== null
        ? `received ${run.runId}  DAMAGED  ${run.error}`
        : `received ${run.handle}  ${resultText({ ...run, state: "sealed" })}  job ` +
          `${run.job}  ${run.runId}  from ${run.from ?? "?"}`,
    );
    return {
      result: { runs, received },
      lines: runs.length + received.length === 0 ? ["no runs"] : [...runs.map(summaryLine), ...receivedLines],
      quietLines: [...runs.map((run) => run.runId ?? run.handle), ...received.map((run) => run.runId)],
    };
  },
};
