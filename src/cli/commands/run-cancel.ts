import type { CommandSpec } from "../support/context.js";
import { loadEvidenceLibrary, resultText } from "./run-shared.js";

export const runCancel: CommandSpec = {
  name: "run cancel",
  define(command) {
    command
      .description(
        "cancel a running run: its dispatcher kills the child's whole process " +
          "group (SIGTERM, then SIGKILL) and seals it CANCELLED, keeping every " +
          "line captured",
      )
      .argument("<run>", "the run's handle, or a unique prefix of it")
      .option("--wait <seconds>", "how long to wait for the run to be sealed", "30");
  },
  async run(context, [ref], options) {
    const library = await loadEvidenceLibrary();
    const seconds = Number(options["wait"]);
    const run = await library.cancelRun(context.scope, ref!, {
      waitMs: Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 30_000,
    });
    const result = run.record?.result ?? null;
    return {
      result: { handle: run.handle, runId: run.runId, result, exit: run.record?.exit ?? null },
      lines: [
        (
          `cancelled run ${run.handle}: ` +
          `${resultText({ result, status: run.record?.evidence.status ?? null, state: run.state })} ` +
          `${run.runId ?? ""}`
        ).trimEnd(),
      ],
      quietLines: [run.runId ?? run.handle],
    };
  },
};
