import type { CommandSpec } from "../support/context.js";
import { STDIO, withStdinFile } from "../support/stdio-files.js";
import { defineLimitFlags, takeLimitFlags } from "../support/limit-flags.js";
import { loadBundleLibrary } from "./export.js";

export const importCommand: CommandSpec = {
  name: "import",
  define(command) {
    command
      .description(
        "verify every tree, record and blob of a bundle in staging, then publish " +
          "them (nothing is published unless everything verifies)",
      )
      .argument("<bundle>", "a bundle written by `oats export`; `-` reads it from stdin");
    defineLimitFlags(command);
  },
  async run(context, [bundle], options) {
    const { limits } = takeLimitFlags(options);
    const library = await loadBundleLibrary();
    const progress = context.progress(`import ${bundle}`);
    const watch = { limits, onProgress: progress.update, signal: context.interruptSignal() };
    let report;
    try {
      report =
        bundle === STDIO
          ? { ...(await withStdinFile((path) => library.importBundle(context.scope, path, watch))), bundle: STDIO }
          : await library.importBundle(context.scope, bundle!, watch);
    } finally {
      progress.end();
    }
    const lines = [
      ...report.artifacts.map((row) => `${row.status} ${row.kind} ${row.key} ${row.integrity}`),
      ...report.blobs.map((row) => `${row.status} blob ${row.digest}`),
      ...report.resolutions.map((row) => `${row.status} resolution ${row.id}`),
    ];
    return {
      result: report,
      lines: lines.length ? lines : [`${report.bundle}: the bundle lists nothing`],
      quietLines: [],
    };
  },
};
