import type { CommandSpec } from "../support/context.js";
import { STDIO, toStdout } from "../support/stdio-files.js";

/** The acquisition library (bundles), loaded only when a command runs. */
export function loadBundleLibrary() {
  return import("../../acquisition/index.js");
}

export const exportCommand: CommandSpec = {
  name: "export",
  define(command) {
    command
      .description(
        "write retained artifacts (and resolutions with everything they reference and pin) into a verified tar bundle",
      )
      .argument(
        "<ref...>",
        "an artifact <kind>:<key>@<integrity> (e.g. " +
          "capability:demo.hello@oats.tree-exec.v1:sha256-...) or a resolution id " +
          "sha256-<64 hex>",
      )
      .requiredOption(
        "-o, --output <file>",
        "the bundle file to write (written beside it, then renamed into place); `-` writes it to stdout",
      )
      .option("--force", "replace an existing file at --output");
  },
  async run(context, operands, options) {
    // commander hands a variadic argument over as one array operand.
    const refs = (operands as readonly unknown[]).flat().map(String);
    const library = await loadBundleLibrary();
    const output = String(options["output"]);
    const progress = context.progress(`export ${output}`);
    const watch = { onProgress: progress.update, signal: context.interruptSignal() };
    let report;
    try {
      if (output === STDIO) {
        // The bundle is stdout's only content: no summary lines there.
        const written = await toStdout(context.json, (path) => library.exportBundle(context.scope, refs, path, watch));
        return { result: { ...written, path: STDIO }, lines: [], quietLines: [] };
      }
      report = await library.exportBundle(context.scope, refs, output, { force: options["force"] === true, ...watch });
    } finally {
      progress.end();
    }
    const lines = [
      ...report.artifacts.map(
        (row) =>
          `exported ${row.kind} ${row.key} ` +
          `${row.integrity}${row.translatedFrom ? ` (from ${row.translatedFrom})` : ""}`,
      ),
      ...report.resolutions.map((row) => `exported resolution ${row.id}`),
      ...report.blobs.map((row) => `exported blob ${row.digest}`),
      `wrote ${report.path} (${report.bytes} bytes)`,
    ];
    return { result: report, lines, quietLines: [report.path] };
  },
};
