import type { CommandSpec } from "../support/context.js";

/** The attestation library (keys, trust, statements), loaded only when a command runs. */
export function loadAttestationLibrary() {
  return import("../../attestation/index.js");
}

/**
 * `oats key generate|show`: the operator's Ed25519 signing key, kept in the
 * operator's private state (never in a scope). Only the public key and its
 * key id are ever printed; the private key is in no output, in either mode.
 */
export const keyGenerate: CommandSpec = {
  name: "key generate",
  define(command) {
    command.description(
      "make this account's Ed25519 signing key in the operator's private state (0600; never printed); " +
        "from then on approvals and sealed runs are also signed statements",
    );
  },
  async run() {
    const library = await loadAttestationLibrary();
    const made = library.generateSigningKey();
    return {
      result: {
        algorithm: made.algorithm,
        keyid: made.keyid,
        publicKey: made.spki,
        pem: made.pem,
        createdAt: made.createdAt,
      },
      lines: [
        `made the signing key ${made.keyid} (ed25519) at ${library.keyPath()}`,
        `  public key  ${made.spki}`,
        "  others trust it with: oats trust add <public key> --name <name> --for approvals|runs",
      ],
      quietLines: [made.keyid],
    };
  },
};

export const keyShow: CommandSpec = {
  name: "key show",
  define(command) {
    command
      .description("print this account's public key (one line, and as PEM for cosign --key) and its key id")
      .option("--pem", "print only the PEM block");
  },
  async run(_context, _operands, options) {
    const library = await loadAttestationLibrary();
    const key = library.loadSigningKey();
    if (key === null) {
      const { OatsError } = await import("../../core/index.js");
      throw new OatsError("artifact-not-found", "this account has no signing key: `oats key generate` makes one", {
        path: library.keyPath(),
        reason: "no-key",
      });
    }
    const pem = key.pem.trimEnd().split("\n");
    return {
      result: {
        algorithm: key.algorithm,
        keyid: key.keyid,
        publicKey: key.spki,
        pem: key.pem,
        createdAt: key.createdAt,
      },
      lines:
        options["pem"] === true
          ? pem
          : [`key id      ${key.keyid}`, `public key  ${key.spki}`, `created     ${key.createdAt}`, ...pem],
      quietLines: [key.spki],
    };
  },
};
