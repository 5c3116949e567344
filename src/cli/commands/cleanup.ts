import type { CommandSpec } from "../support/context.js";
import { loadLibrary } from "./shared.js";

export const cleanup: CommandSpec = {
  name: "cleanup",
  define(command) {
    command.description("remove staging left by crashed retains (only that; a live publisher's staging is kept)");
  },
  async run(context) {
    const library = await loadLibrary();
    const report = await library.cleanupStaging(context.scope);
    const lines = [
      ...report.removed.map((path) => `removed  ${path}`),
      ...report.active.map((path) => `in use   ${path}`),
    ];
    return {
      result: report,
      lines: lines.length ? lines : ["nothing to clean up"],
      quietLines: report.removed,
    };
  },
};
