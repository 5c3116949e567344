import type { CommandSpec } from "../context.js";

/** The acquisition library (bundles), loaded only when a command runs. */
export function loadBundleLibrary() {
  return import("../../acquisition/bundle.js");
}

export const exportCommand: CommandSpec = {
  name: "export",
  define(command) {
    command
      .description("write retained artifacts (and resolutions with everything they reference and pin) into a verified tar bundle")
      .argument("<ref...>", "an artifact <kind>:<key>@<integrity> (e.g. capability:demo.hello@oats.tree-exec.v1:sha256-...) or a resolution id sha256-<64 hex>")
      .requiredOption("-o, --output <file>", "the bundle file to write (written beside it, then renamed into place)")
      .option("--force", "replace an existing file at --output");
  },
  async run(context, operands, options) {
    // commander hands a variadic argument over as one array operand.
    const refs = (operands as readonly unknown[]).flat().map(String);
    const library = await loadBundleLibrary();
    const progress = context.progress(`export ${String(options["output"])}`);
    let report;
    try {
      report = await library.exportBundle(context.scope, refs, String(options["output"]), { force: options["force"] === true, onProgress: progress.update, signal: context.interruptSignal() });
    } finally {
      progress.end();
    }
    const lines = [
      ...report.artifacts.map((row) => `exported ${row.kind} ${row.key} ${row.integrity}${row.translatedFrom ? ` (from ${row.translatedFrom})` : ""}`),
      ...report.resolutions.map((row) => `exported resolution ${row.id}`),
      ...report.blobs.map((row) => `exported blob ${row.digest}`),
      `wrote ${report.path} (${report.bytes} bytes)`,
    ];
    return { result: report, lines, quietLines: [report.path] };
  },
};
