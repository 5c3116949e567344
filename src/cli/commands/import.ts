import type { CommandSpec } from "../context.js";
import { defineLimitFlags, takeLimitFlags } from "../limit-flags.js";
import { loadBundleLibrary } from "./export.js";

export const importCommand: CommandSpec = {
  name: "import",
  define(command) {
    command
      .description("verify every tree, record and blob of a bundle in staging, then publish them (nothing is published unless everything verifies)")
      .argument("<bundle>", "a bundle written by `oats export`");
    defineLimitFlags(command);
  },
  async run(context, [bundle], options) {
    const { limits } = takeLimitFlags(options);
    const library = await loadBundleLibrary();
    const progress = context.progress(`import ${bundle}`);
    let report;
    try {
      report = await library.importBundle(context.scope, bundle!, { limits, onProgress: progress.update, signal: context.interruptSignal() });
    } finally {
      progress.end();
    }
    const lines = [
      ...report.artifacts.map((row) => `${row.status} ${row.kind} ${row.key} ${row.integrity}`),
      ...report.blobs.map((row) => `${row.status} blob ${row.digest}`),
      ...report.resolutions.map((row) => `${row.status} resolution ${row.id}`),
    ];
    return { result: report, lines: lines.length ? lines : [`${report.bundle}: the bundle lists nothing`], quietLines: [] };
  },
};
