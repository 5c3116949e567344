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
    const lines = listing.map(
      ({ subject, approved, entry }) => `${approved ? "approved" : "revoked "} ${subjectText(subject)} seq ${entry.seq} by ${entry.operator} at ${entry.at}: ${entry.reason}`,
    );
    return {
      result: { scope: context.scope, approvals: listing },
      lines: lines.length ? lines : [`no approvals in ${context.scope}`],
      quietLines: lines,
    };
  },
};
