import type { CommandSpec } from "../context.js";
import { loadCapturesLibrary, subjectText } from "./captures-shared.js";

export const approvals: CommandSpec = {
  name: "approvals",
  define(command) {
    command.description("list every subject the approvals ledger has decided on, with its latest decision (the ledger's chain is verified first)");
  },
  async run(context) {
    const library = await loadCapturesLibrary();
    const listing = library.listApprovals(context.scope);
    const decision = ({ subject, approved, entry }: (typeof listing)[number]) =>
      `${approved ? "approved" : "revoked "} ${subjectText(subject)} seq ${entry.seq} by ${entry.operator} at ${entry.at}: ${entry.reason}`;
    const lines = listing.flatMap(({ subject, approved, entry }) => [
      decision({ subject, approved, entry }),
      ...(approved && entry.composition !== undefined ? library.compositionSummary(library.parseComposition(entry.composition, `the composition approved at seq ${entry.seq}`)).map((line) => `    ${line}`) : []),
    ]);
    return {
      result: { scope: context.scope, approvals: listing },
      lines: lines.length ? lines : [`no approvals in ${context.scope}`],
      quietLines: listing.map(decision),
    };
  },
};
