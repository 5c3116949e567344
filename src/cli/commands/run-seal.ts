import type { CommandSpec } from "../support/context.js";
import { loadEvidenceLibrary } from "./run-shared.js";

export const runSeal: CommandSpec = {
  name: "run seal",
  define(command) {
    command
      .description(
        "seal a run whose dispatcher is gone as INTERRUPTED, keeping every line " +
          "it captured (a running run is refused: use `oats run cancel`)",
      )
      .argument("<run>", "the run's handle, or a unique prefix of it");
  },
  async run(context, [ref]) {
    const library = await loadEvidenceLibrary();
    const run = await library.sealInterruptedRun(context.scope, ref!);
    return {
      result: { handle: run.handle, runId: run.runId, result: run.record?.result ?? null, lines: run.lines.length },
      lines: [
        `sealed run ${run.handle}: INTERRUPTED ${run.runId}, ${run.lines.length} ` +
          `line${run.lines.length === 1 ? "" : "s"} kept`,
      ],
      quietLines: [run.runId ?? run.handle],
    };
  },
};
