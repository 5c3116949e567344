import type { CommandSpec } from "../support/context.js";
import { bytesText, loadLifecycleLibrary, parseDuration } from "./lifecycle-shared.js";

export const gcCommand: CommandSpec = {
  name: "gc",
  define(command) {
    command
      .description(
        "list (default) or delete what no root reaches: instance refs, queued " +
          "jobs, pins and run evidence keep their records, artifacts and blobs",
      )
      .option("--delete", "delete them (under the gc lock, once no publisher is in flight); without it, a dry run")
      .option("--dry-run", "only list what would go and the bytes it would free (the default)")
      .option("--grace <duration>", "keep unreachable items younger than this (by mtime), e.g. 24h, 30m, 0", "24h")
      .option("--include-damaged", "delete unreachable damaged items too (otherwise they are reported and kept)");
  },
  async run(context, _operands, options) {
    const graceMs = parseDuration(options["grace"], "--grace");
    if (options["delete"] === true && options["dryRun"] === true) {
      const { usageError } = await import("../support/envelope.js");
      throw usageError("--delete and --dry-run contradict each other", { reason: "conflicting-flags" });
    }
    const library = await loadLifecycleLibrary();
    const report = await library.gc(context.scope, {
      graceMs,
      delete: options["delete"] === true,
      includeDamaged: options["includeDamaged"] === true,
    });
    const verb = report.deleted ? "deleted" : "would delete";
    const lines: string[] = [];
    for (const item of report.collect)
      lines.push(
        `${verb.padEnd(12)} ${item.type.padEnd(8)} ${item.ref} ` +
          `(${bytesText(item.bytes)})${item.damaged ? ` DAMAGED: ${item.damaged.code}` : ""}`,
      );
    for (const item of report.damaged)
      lines.push(
        `damaged      ${item.type.padEnd(8)} ${item.ref}: ${item.damaged?.code} ` +
          `(kept; --include-damaged deletes it, \`oats repair\` repairs a revision)`,
      );
    for (const item of report.young)
      lines.push(`young        ${item.type.padEnd(8)} ${item.ref} (kept: younger than the grace period)`);
    for (const missing of report.roots.missing)
      lines.push(`missing      ${missing.root} names resolution ${missing.id}, which is not in the scope`);
    lines.push(
      `roots: ${report.roots.instances} ` +
        `instance${report.roots.instances === 1 ? "" : "s"}, ` +
        `${report.roots.jobs} job${report.roots.jobs === 1 ? "" : "s"}, ` +
        `${report.roots.pins} pin${report.roots.pins === 1 ? "" : "s"}, ` +
        `${report.roots.runFiles} run file${report.roots.runFiles === 1 ? "" : "s"}`,
      `kept: ${report.kept.revisions} ` +
        `revision${report.kept.revisions === 1 ? "" : "s"} (${report.kept.trees} ` +
        `tree${report.kept.trees === 1 ? "" : "s"}: legacy- and exec-named ` +
        `copies count once), ${report.kept.records} ` +
        `record${report.kept.records === 1 ? "" : "s"}, ${report.kept.blobs} ` +
        `blob${report.kept.blobs === 1 ? "" : "s"}`,
      `${report.deleted ? "freed" : "would free"} ${bytesText(report.bytes)} ` +
        `in ${report.collect.length} ` +
        `item${report.collect.length === 1 ? "" : "s"}${report.deleted ? "" : " (dry run: --delete deletes)"}`,
    );
    return { result: report, lines, quietLines: report.collect.map((item) => item.ref) };
  },
};
