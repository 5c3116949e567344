import type { CommandSpec } from "../support/context.js";
import { checkpointLine, loadCapturesLibrary, loadLedgerLibrary, subjectText } from "./captures-shared.js";

export const approvals: CommandSpec = {
  name: "approvals",
  define(command) {
    command
      .description(
        "list every subject the approvals ledger or the audit log has decided " +
          "on, with its latest decision cross-checked against the other log (both " +
          "chains are verified first); a decision the two logs disagree on is " +
          "listed as UNCONFIRMED and never as approved",
      )
      .option(
        "--expect-head <hash>",
        "fail (integrity-mismatch) unless the ledger's chain still contains this " +
          "entry hash (from `oats audit head`): it was not truncated or rewritten since",
      );
  },
  async run(context, _operands, options) {
    const library = await loadCapturesLibrary();
    const expected = options["expectHead"];
    const ledger = await loadLedgerLibrary();
    const anchor =
      typeof expected === "string" ? ledger.expectHead(context.scope, ledger.CHAIN_LOGS.approvals, expected) : null;
    const { approvals: listing, checkpoint } = library.approvalsReport(context.scope);
    const decision = ({ subject, approved, confirmed, mismatch, entry }: (typeof listing)[number]) => {
      const state = !confirmed ? "UNCONFIRMED" : approved ? "approved" : "revoked ";
      const said =
        entry === null
          ? "no ledger entry"
          : `seq ${entry.seq}${confirmed ? "" : ` ${entry.action}`} by ` +
            `${entry.operator} at ${entry.at}: ${entry.reason}`;
      return `${state} ${subjectText(subject)} ${said}${mismatch ? ` [${mismatch.reason}: ${mismatch.why}]` : ""}`;
    };
    const lines = listing.flatMap((item) => [
      decision(item),
      ...(item.approved && item.entry !== null && item.entry.composition !== undefined
        ? library
            .compositionSummary(
              library.parseComposition(item.entry.composition, `the composition approved at seq ${item.entry.seq}`),
            )
            .map((line) => `    ${line}`)
        : []),
    ]);
    return {
      result: {
        scope: context.scope,
        approvals: listing,
        checkpoint,
        ...(anchor === null
          ? {}
          : { expectHead: { hash: expected, seq: anchor.at, entries: anchor.entries, head: anchor.head } }),
      },
      lines: [
        ...(lines.length ? lines : [`no approvals in ${context.scope}`]),
        `checkpoint ${checkpointLine("approvals ledger", checkpoint.approvals)}`,
        `checkpoint ${checkpointLine("audit log", checkpoint.audit)}`,
      ],
      quietLines: listing.map(decision),
    };
  },
};
