import type { CommandSpec } from "../support/context.js";
import { loadFleetLibrary } from "./push-artifacts.js";

const kindOf = (predicateType: string | null) =>
  predicateType === null ? "?" : predicateType.endsWith("/approval/v1") ? "approval" : "run";

/** `oats attestation ls|verify`: the signed statements this scope holds (its own and pulled ones). */
export const attestationLs: CommandSpec = {
  name: "attestation ls",
  define(command) {
    command
      .description(
        "list the signed statements in this scope (approvals and runs, own and pulled) with what their " +
          "signature check says: verified by a trusted key, or why not",
      )
      .argument("[subject]", "only statements naming a digest that starts with this (a resolution or run id)");
  },
  async run(context, [subject]) {
    const library = await loadFleetLibrary();
    const rows = library.listAttestations(context.scope, subject);
    return {
      result: { scope: context.scope, attestations: rows },
      lines: rows.length
        ? rows.map(
            (row) =>
              `${row.id}  ${kindOf(row.predicateType)}  ${row.status}${row.trust === null ? "" : ` (${row.trust})`}  ` +
              `${row.keyid ?? "?"}  ${row.subjects.map((each) => each.name).join(", ")}`,
          )
        : ["no attestations in this scope"],
      quietLines: rows.map((row) => row.id),
    };
  },
};

export const attestationVerify: CommandSpec = {
  name: "attestation verify",
  define(command) {
    command
      .description(
        "verify a signed statement: its signature with a key this scope trusts for its kind, its statement's " +
          "schema, and every subject against what this scope holds",
      )
      .argument(
        "<ref>",
        "an attestation id (sha256-<hex>, or a unique prefix), or a file holding an envelope or bundle",
      );
  },
  async run(context, [ref]) {
    const library = await loadFleetLibrary();
    const verdict = await library.verifyAttestation(context.scope, ref!);
    return {
      result: verdict,
      lines: [
        `verified ${kindOf(verdict.predicateType)} attestation ${verdict.id}`,
        ...verdict.checked.map((line) => `  ${line}`),
      ],
      quietLines: [verdict.id],
    };
  },
};
