import { readFileSync } from "node:fs";
import type { CommandSpec } from "../support/context.js";
import { usageError } from "../support/envelope.js";
import { loadAttestationLibrary } from "./key.js";

/** A public key operand: the one-line base64 SPKI, a PEM block, or a file holding one. */
function publicKeyText(operand: string): string {
  if (/^[A-Za-z0-9+/]+={0,2}$/.test(operand) || operand.includes("-----BEGIN")) return operand;
  try {
    return readFileSync(operand, "utf8").slice(0, 16 * 1024);
  } catch {
    throw usageError("<public-key> is the one-line key `oats key show` prints, a PEM block, or a file holding one", {
      flag: "<public-key>",
    });
  }
}

/**
 * `oats trust add|ls|rm`: which keys this operator trusts in this scope,
 * for approvals (`dispatch --approved-by`) or runs (`attestation verify`).
 * Kept in the operator's private state, never in the scope; each change is
 * audited.
 */
export const trustAdd: CommandSpec = {
  name: "trust add",
  define(command) {
    command
      .description(
        "trust a public key (another host's `oats key show`) in this scope, for approvals or for runs " +
          "(kept in the operator's private state, audited)",
      )
      .argument("<public-key>", "the one-line public key `oats key show` prints, a PEM block, or a file of either")
      .requiredOption("--name <name>", "the name `dispatch --approved-by` and listings use for it")
      .requiredOption("--for <purpose>", "approvals (dispatch under its signed approvals) or runs (believe its runs)");
  },
  async run(context, [key], options) {
    const library = await loadAttestationLibrary();
    const change = await library.addTrust(context.scope, {
      publicKey: publicKeyText(key!),
      name: String(options["name"]),
      purpose: String(options["for"]),
    });
    const { entry } = change;
    return {
      result: { status: change.status, entry, audit: change.audit },
      lines: [
        `${change.status === "kept" ? "already trusted" : "trusted"} ${entry.name}: ` +
          `${entry.keyid} for ${entry.purpose}` +
          (change.audit === null ? "" : ` (audit seq ${change.audit.seq})`),
      ],
      quietLines: [entry.keyid],
    };
  },
};

export const trustLs: CommandSpec = {
  name: "trust ls",
  define(command) {
    command.description("list the keys this operator trusts in this scope, and the trusts removed");
  },
  async run(context) {
    const library = await loadAttestationLibrary();
    const store = library.readTrust(context.scope);
    const lines = [
      ...store.entries.map(
        (entry) => `${entry.name}  ${entry.purpose}  ${entry.keyid}  added by ${entry.addedBy} at ${entry.addedAt}`,
      ),
      ...store.removed.map(
        (entry) =>
          `${entry.name}  ${entry.purpose}  ${entry.keyid}  REMOVED by ${entry.removedBy} at ${entry.removedAt}`,
      ),
    ];
    return {
      result: { scope: context.scope, entries: store.entries, removed: store.removed },
      lines: lines.length ? lines : ["this scope trusts no key"],
      quietLines: store.entries.map((entry) => entry.name),
    };
  },
};

export const trustRm: CommandSpec = {
  name: "trust rm",
  define(command) {
    command
      .description("stop trusting a key: nothing it signed is believed for its purpose from now on (audited)")
      .argument("<name>", "the trust's name (`oats trust ls`)");
  },
  async run(context, [name]) {
    const library = await loadAttestationLibrary();
    const change = await library.removeTrust(context.scope, name!);
    return {
      result: { status: change.status, entry: change.entry, audit: change.audit },
      lines: [`removed the trust ${change.entry.name} (${change.entry.keyid}, ${change.entry.purpose})`],
      quietLines: [change.entry.name],
    };
  },
};
