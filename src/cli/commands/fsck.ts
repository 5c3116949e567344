import { OatsError, type ErrorCode } from "../../errors.js";
import type { CommandSpec } from "../context.js";
import { integrityText } from "../render.js";
import { loadLibrary } from "./shared.js";

export const fsck: CommandSpec = {
  name: "fsck",
  define(command) {
    command.description("verify every retained revision; report damage, never repair it");
  },
  async run(context) {
    const library = await loadLibrary();
    const progress = context.progress("fsck");
    let report: Awaited<ReturnType<typeof library.fsck>>;
    try {
      report = await library.fsck(context.scope, { onArtifact: progress.artifacts });
    } finally {
      progress.end();
    }
    const lines: string[] = [];
    for (const outcome of report.outcomes) {
      const name = `${outcome.kind} ${outcome.key} ${integrityText(outcome.integrity)}`;
      lines.push(outcome.ok ? `ok       ${name}` : `DAMAGED  ${name}: ${outcome.error?.code}: ${outcome.error?.message}`);
    }
    for (const path of report.staging) lines.push(`staging  ${path} (left by an interrupted retain; \`oats cleanup\` removes it)`);
    for (const path of report.unexpected) lines.push(`unknown  ${path} (not written by oats; left alone)`);
    lines.push(`checked ${report.checked} revision${report.checked === 1 ? "" : "s"}: ${report.ok} ok, ${report.damaged} damaged`);

    const first = report.outcomes.find((outcome) => !outcome.ok);
    if (!first?.error) return { result: report, lines };
    // Damage is a refusal: the exit code and envelope error are those of the first damaged revision, the details hold the whole report.
    const failure = new OatsError(
      first.error.code as ErrorCode,
      `${report.damaged} of ${report.checked} retained revisions damaged; first: ${first.error.message}`,
      { first, report },
    );
    return { result: report, lines, failure };
  },
};
