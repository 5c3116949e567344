import { OatsError } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import { auditSubjectText, checkpointLine, loadLedgerLibrary, positiveInteger } from "./captures-shared.js";

const AUDIT_LOG = ".agents/audit/audit.jsonl";

export const auditShow: CommandSpec = {
  name: "audit show",
  define(command) {
    command
      .description("print the audit log, one line per entry (the whole chain is verified first)")
      .option("--limit <n>", "only the last n entries");
  },
  async run(context, _operands, options) {
    const limit = positiveInteger("--limit", options["limit"]);
    const library = await loadLedgerLibrary();
    const { entries, head } = library.readAudit(context.scope);
    const shown = limit === undefined ? entries : entries.slice(-limit);
    const lines = shown.map(
      (entry) =>
        `${entry.seq} ${entry.at} ${entry.principal} ${entry.action} ` +
        `${entry.outcome} ${auditSubjectText(entry.subject)}`,
    );
    return {
      result: { scope: context.scope, total: entries.length, head, entries: shown },
      lines: lines.length ? lines : [`no audit entries in ${context.scope}`],
      quietLines: lines,
    };
  },
};

export const auditVerify: CommandSpec = {
  name: "audit verify",
  define(command) {
    command
      .description(
        "check the whole audit log's hash chain and name the first broken line " +
          "(never repaired), and that it still extends what this operator's oats " +
          "verified before (its private checkpoint)",
      )
      .option(
        "--expect-head <hash>",
        "also fail (integrity-mismatch) unless the chain still contains this " +
          "entry hash (from `oats audit head`): it was not truncated or rewritten since",
      );
  },
  async run(context, _operands, options) {
    const library = await loadLedgerLibrary();
    const verdict = library.verifyAudit(context.scope);
    if (!verdict.ok) {
      const { line, seq, reason } = verdict.brokenAt;
      throw new OatsError(
        "integrity-mismatch",
        `audit log ${AUDIT_LOG} is broken at line ${line}${seq === null ? "" : ` (seq ${seq})`}: ${reason}`,
        {
          log: AUDIT_LOG,
          brokenAt: verdict.brokenAt,
        },
      );
    }
    const { checkpoint } = library.checkAgainstCheckpoint(context.scope, library.CHAIN_LOGS.audit);
    const expected = options["expectHead"];
    const anchor =
      typeof expected === "string" ? library.expectHead(context.scope, library.CHAIN_LOGS.audit, expected) : null;
    return {
      result: {
        scope: context.scope,
        ok: true,
        entries: verdict.entries,
        head: verdict.head,
        checkpoint,
        ...(anchor === null ? {} : { expectHead: { hash: expected, seq: anchor.at } }),
      },
      lines: [
        `audit log verified: ${verdict.entries} entr${verdict.entries === 1 ? "y" : "ies"}, head ${verdict.head}`,
        `checkpoint ${checkpointLine("audit log", checkpoint)}`,
        ...(anchor === null ? [] : [`  extends the expected head ${String(expected)} (seq ${anchor.at})`]),
      ],
      quietLines: [verdict.head],
    };
  },
};

export const auditHead: CommandSpec = {
  name: "audit head",
  define(command) {
    command.description(
      "print the current heads of the approvals ledger and the audit log (both " +
        "chains verified in full); keep them outside the scope and pass them " +
        "back with --expect-head",
    );
  },
  async run(context) {
    const library = await loadLedgerLibrary();
    const heads = library.logHeads(context.scope);
    return {
      result: { scope: context.scope, approvals: heads.approvals, audit: heads.audit },
      lines: [
        `approvals ${heads.approvals.entries} ${heads.approvals.head}`,
        `audit ${heads.audit.entries} ${heads.audit.head}`,
      ],
      quietLines: [heads.approvals.head, heads.audit.head],
    };
  },
};
