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
      .option("--include-damaged", "delete unreachable damaged items too (otherwise they are reported and kept)")
      .option(
        "--why <ref>",
        "say what keeps one item (<kind>:<key>@<integrity>, a resolution id or a blob digest): each root that " +
          "reaches it and the record it goes through, or its grace period; deletes nothing",
      );
  },
  async run(context, _operands, options) {
    const graceMs = parseDuration(options["grace"], "--grace");
    if (options["delete"] === true && options["dryRun"] === true) {
      const { usageError } = await import("../support/envelope.js");
      throw usageError("--delete and --dry-run contradict each other", { reason: "conflicting-flags" });
    }
    const library = await loadLifecycleLibrary();
    if (options["why"] !== undefined) {
      if (options["delete"] === true) {
        const { usageError } = await import("../support/envelope.js");
        throw usageError("--why only reads: it cannot be combined with --delete", { reason: "conflicting-flags" });
      }
      const why = library.gcWhy(context.scope, String(options["why"]), { graceMs });
      return { result: why, lines: whyLines(why), quietLines: why.keptBy.map((each) => each.root) };
    }
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
      `shared files nothing links: ${report.heldFiles.files.length} ` +
        `(${bytesText(report.heldFiles.bytes)}) ${report.deleted ? "removed" : "would be removed"}`,
    );
    return { result: report, lines, quietLines: report.collect.map((item) => item.ref) };
  },
};

type Why = ReturnType<Awaited<ReturnType<typeof loadLifecycleLibrary>>["gcWhy"]>;

function whyLines(why: Why): string[] {
  const age = `${Math.round(why.ageMs / 1000)} s old; grace ${Math.round(why.graceMs / 1000)} s`;
  if (why.verdict === "kept-by-roots")
    return [
      `${why.type} ${why.ref} is kept by ${why.keptBy.length} root${why.keptBy.length === 1 ? "" : "s"}:`,
      ...why.keptBy.map((each) => `  ${each.root}${each.via === undefined ? "" : ` (through resolution ${each.via})`}`),
    ];
  if (why.verdict === "kept-young")
    return [`${why.type} ${why.ref}: no root reaches it; kept only while younger than the grace period (${age})`];
  return [`${why.type} ${why.ref}: no root reaches it and its grace has passed (${age}): gc --delete removes it`];
}
