import { OatsError, type ErrorCode } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import { differenceLines, integrityText } from "../support/render.js";
import { checkpointLine } from "./captures-shared.js";

const NOUNS: Record<string, [string, string]> = {
  revisions: ["revision", "revisions"],
  records: ["record", "records"],
  blobs: ["blob", "blobs"],
  instances: ["instance ref", "instance refs"],
  jobs: ["queued job", "queued jobs"],
  pins: ["pin", "pins"],
  quarantine: ["quarantined tree", "quarantined trees"],
  approvals: ["ledger entry", "ledger entries"],
  audit: ["audit entry", "audit entries"],
};

function count(n: number, cls: string): string {
  const [one, many] = NOUNS[cls] ?? [cls, cls];
  return `${n} ${n === 1 ? one : many}`;
}

export const fsck: CommandSpec = {
  name: "fsck",
  define(command) {
    command.description(
      "check everything the scope holds (revisions, records, blobs, instance " +
        "refs, queued jobs, pins, approvals ledger, audit log, leftovers: " +
        "staging, leases, run copies, quarantined trees); report, never repair",
    );
  },
  async run(context) {
    const { fsckScope } = await import("../../scope/index.js");
    const progress = context.progress("fsck");
    let report: Awaited<ReturnType<typeof fsckScope>>;
    try {
      report = await fsckScope(context.scope, { onArtifact: progress.artifacts });
    } finally {
      progress.end();
    }
    const lines: string[] = [];
    for (const outcome of report.outcomes) {
      const name = `${outcome.kind} ${outcome.key} ${integrityText(outcome.integrity)}`;
      lines.push(
        outcome.ok ? `ok       ${name}` : `DAMAGED  ${name}: ${outcome.error?.code}: ${outcome.error?.message}`,
      );
      if (!outcome.ok && outcome.error)
        lines.push(...differenceLines(outcome.error.details ?? {}).map((l) => `  ${l}`));
    }
    // Grouped by class; revision damage is already on its own line above.
    for (const [cls, findings] of Object.entries(report.classes)) {
      if (cls === "revisions" || findings.length === 0) continue;
      lines.push(`${cls}: ${findings.length} finding${findings.length === 1 ? "" : "s"}`);
      for (const finding of findings)
        lines.push(
          `  ${finding.code ?? "notice"}  ` +
            `${finding.kind === "notice" ? finding.path : finding.subject}: ` +
            `${finding.message}`,
        );
    }
    lines.push(
      `checkpoint ${checkpointLine("approvals ledger", report.checkpoint.approvals)}`,
      `checkpoint ${checkpointLine("audit log", report.checkpoint.audit)}`,
    );

    const total = Object.values(report.classes).reduce((sum, findings) => sum + findings.length, 0);
    const counted = Object.entries(report.counts).map(([cls, n]) => count(n, cls));
    lines.push(
      `checked ${counted.join(", ")}: ${total === 0 ? "no findings" : `${total} finding${total === 1 ? "" : "s"}`}` +
        (report.worst ? ` (most serious: ${report.worst.code})` : ""),
    );

    const worst = report.worst;
    if (!worst?.code) return { result: report, lines };
    // Damage is a refusal: the exit code and envelope error are those of the most serious finding; details hold the
    // whole report.
    const failures =
      total -
      Object.values(report.classes)
        .flat()
        .filter((finding) => finding.kind === "notice").length;
    const failure = new OatsError(
      worst.code as ErrorCode,
      `${failures} finding${failures === 1 ? "" : "s"} in the scope; most serious (${worst.class}): ${worst.message}`,
      { first: worst, report },
    );
    return { result: report, lines, failure };
  },
};
