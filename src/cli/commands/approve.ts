import type { ApprovalAttestation, ApprovalEntry, ApprovalSubjectInput } from "../../captures/index.js";
import type { CommandSpec } from "../support/context.js";
import { loadCapturesLibrary, requiredText, subjectText } from "./captures-shared.js";

/**
 * `oats approve|revoke <kind> <key> <integrity> --reason <text>`. The
 * operator is never an option: the library records this process's own
 * account@host. The grammar of kind, key and integrity (only a full
 * oats.tree-exec.v1 digest is approvable) is the library's to check.
 */
function decision(action: "approve" | "revoke"): CommandSpec {
  const past = action === "approve" ? "approved" : "revoked";
  return {
    name: action,
    define(command) {
      command
        .description(
          action === "approve"
            ? "approve one exact capture composition (as `oats capture prepare` prints " +
                "it) or oats.tree-exec.v1 tree digest (appended to the approvals ledger " +
                "and audited)"
            : "revoke an approval: queued work naming that digest is refused from now on (the latest decision wins)",
        )
        .argument(
          "<kind>",
          "composition (a capture's whole composition), or an artifact kind: capture, capability or source",
        )
        .argument("<key>", "the capture name, or the artifact's key (a capability id)")
        .argument(
          "<integrity>",
          "the exact digest: oats.json.v1:sha256-<64 hex> for a composition, " +
            "oats.tree-exec.v1:sha256-<64 hex> for a tree",
        )
        .requiredOption("--reason <text>", `why it is ${past} (recorded with the decision)`)
        .option(
          "--force",
          action === "approve"
            ? "approve a tree that is not retained in this scope (yet): approving ahead of retention"
            : "record a revocation for a subject that was never approved in this scope",
        );
    },
    async run(context, [kind, key, integrity], options) {
      const reason = requiredText("--reason", options["reason"]);
      const force = options["force"] === true;
      const library = await loadCapturesLibrary();
      // Operands as typed: the library checks every field of the subject.
      const subject = { kind, key, integrity } as ApprovalSubjectInput;
      // A typo guard, before anything is written: the decision itself is the library's.
      const target = action === "approve" ? await library.checkApprovalTarget(context.scope, subject, force) : null;
      const previous = action === "revoke" ? library.checkRevokeTarget(context.scope, subject, force) : null;
      let signed: ApprovalAttestation | null = null;
      const entry: ApprovalEntry = await library[action](context.scope, subject, {
        reason,
        onAttestation: (outcome) => {
          signed = outcome;
        },
      });
      const attestation = (signed as ApprovalAttestation | null)?.attestation ?? null;
      const attestationError = (signed as ApprovalAttestation | null)?.error ?? null;
      const tree = entry.subject.kind !== "composition";
      const what =
        action === "approve"
          ? tree
            ? [
                target?.retained
                  ? `  retained  ${target.retained}`
                  : "  not retained in this scope: approved ahead of retention (--force)",
              ]
            : []
          : [
              previous === null
                ? "  it was never approved here: recorded with --force"
                : `  revokes   seq ${previous.seq} (${previous.action} by ${previous.operator} at ${previous.at})`,
            ];
      return {
        result: {
          action,
          subject: entry.subject,
          approved: action === "approve",
          entry,
          forced: force,
          ...(action === "approve"
            ? {
                attestation:
                  attestation === null
                    ? null
                    : { id: attestation.id, keyid: attestation.keyid, path: attestation.envelope },
              }
            : {}),
          ...(action === "approve"
            ? tree
              ? { retained: target?.retained ?? null }
              : {}
            : {
                revokes:
                  previous === null
                    ? null
                    : { seq: previous.seq, action: previous.action, operator: previous.operator, at: previous.at },
              }),
        },
        lines: [
          `${past} ${subjectText(entry.subject)}`,
          ...(entry.composition === undefined
            ? []
            : library
                .compositionSummary(library.parseComposition(entry.composition, "the approved composition"))
                .map((line) => `  ${line}`)),
          ...what,
          `  seq ${entry.seq} by ${entry.operator} at ${entry.at}: ${entry.reason}`,
          ...(attestation === null ? [] : [`  signed    attestation ${attestation.id} by ${attestation.keyid}`]),
        ],
        ...(attestationError === null
          ? {}
          : { warnings: [`approved, but no signed statement was written: ${attestationError.message}`] }),
        quietLines: [String(entry.seq)],
      };
    },
  };
}

export const approve = decision("approve");
export const revoke = decision("revoke");
