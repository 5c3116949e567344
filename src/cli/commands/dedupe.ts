import type { CommandSpec } from "../support/context.js";
import { bytesText } from "./lifecycle-shared.js";
import { loadLibrary } from "./shared.js";

export const dedupe: CommandSpec = {
  name: "dedupe",
  define(command) {
    command
      .description(
        "list (default) or convert revisions stored before the shared file layer: their files become " +
          "read-only links to one held copy of each content",
      )
      .option("--apply", "convert them (each revision verified first, each file replaced atomically by its link)")
      .option("--dry-run", "only list the revisions and files not yet shared (the default)");
  },
  async run(context, _operands, options) {
    if (options["apply"] === true && options["dryRun"] === true) {
      const { usageError } = await import("../support/envelope.js");
      throw usageError("--apply and --dry-run contradict each other", { reason: "conflicting-flags" });
    }
    const library = await loadLibrary();
    const report = await library.dedupe(context.scope, { apply: options["apply"] === true });
    const lines: string[] = [];
    for (const revision of report.revisions) {
      const ref = `${revision.kind}:${revision.key}@${revision.integrity.format}:${revision.integrity.value}`;
      if (revision.damaged) lines.push(`damaged      ${ref}: ${revision.damaged.code} (not converted; see oats fsck)`);
      else if (report.dryRun)
        lines.push(`not shared   ${ref}: ${revision.unshared} files (${bytesText(revision.bytes)})`);
      else
        lines.push(
          `converted    ${ref}: ${revision.linked} linked, ${revision.stored} stored, ${revision.copied} copied` +
            `${revision.fallback ? ` (${revision.fallback})` : ""}`,
        );
    }
    lines.push(
      `${report.dryRun ? "would convert" : "converted"} ${report.files} files (${bytesText(report.bytes)}) in ` +
        `${report.revisions.length} revision${report.revisions.length === 1 ? "" : "s"}; ` +
        `${report.shared} already shared${report.dryRun ? " (dry run: --apply converts)" : ""}`,
    );
    return { result: report, lines, quietLines: report.revisions.map((revision) => revision.dir) };
  },
};
