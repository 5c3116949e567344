import type { ApprovalEntry } from "../../captures/index.js";
import type { CommandSpec } from "../context.js";
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
            ? "approve one exact capture composition (as `oats capture prepare` prints it) or oats.tree-exec.v1 tree digest (appended to the approvals ledger and audited)"
            : "revoke an approval: queued work naming that digest is refused from now on (the latest decision wins)",
        )
        .argument("<kind>", "composition (a capture's whole composition), or an artifact kind: capture, capability or source")
        .argument("<key>", "the capture name, or the artifact's key (a capability id)")
        .argument("<integrity>", "the exact digest: oats.json.v1:sha256-<64 hex> for a composition, oats.tree-exec.v1:sha256-<64 hex> for a tree")
        .requiredOption("--reason <text>", `why it is ${past} (recorded with the decision)`);
    },
    async run(context, [kind, key, integrity], options) {
      const reason = requiredText("--reason", options["reason"]);
      const library = await loadCapturesLibrary();
      const entry: ApprovalEntry = await library[action](context.scope, { kind, key, integrity }, { reason });
      return {
        result: { action, subject: entry.subject, approved: action === "approve", entry },
        lines: [
          `${past} ${subjectText(entry.subject)}`,
          ...(entry.composition === undefined ? [] : library.compositionSummary(library.parseComposition(entry.composition, "the approved composition")).map((line) => `  ${line}`)),
          `  seq ${entry.seq} by ${entry.operator} at ${entry.at}: ${entry.reason}`,
        ],
        quietLines: [String(entry.seq)],
      };
    },
  };
}

export const approve = decision("approve");
export const revoke = decision("revoke");
