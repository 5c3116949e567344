import type { CommandSpec } from "../context.js";
import { loadEvidenceLibrary, summaryLine } from "./run-shared.js";

export const runLs: CommandSpec = {
  name: "run ls",
  define(command) {
    command.description("list the runs of this scope (oldest first): handle, result, exit, job and run id; unsealed runs say so");
  },
  async run(context) {
    const library = await loadEvidenceLibrary();
    const runs = library.listRuns(context.scope);
    return {
      result: { runs },
      lines: runs.length === 0 ? ["no runs"] : runs.map(summaryLine),
      quietLines: runs.map((run) => run.runId ?? run.handle),
    };
  },
};
