import type { CommandSpec } from "../context.js";
import { usageError } from "../envelope.js";
import { pushArtifacts } from "./push-artifacts.js";

/**
 * `oats push`: where to is decided by the destination. `oci://` and
 * loopback `http://` send refs to a registry (push-artifacts.ts).
 */
export const pushCommand: CommandSpec = {
  name: "push",
  define(command) {
    command
      .description("push resolutions (with their trees and pinned blobs) or artifacts to an OCI registry; only what the registry lacks is uploaded")
      .argument("[ref...]", "a resolution id sha256-<64 hex> or an artifact <kind>:<key>@<integrity>")
      .requiredOption("--to <destination>", "oci://host[:port]/repository[:tag] (HTTPS), or http://… for a loopback registry")
      .option("--insecure", "plain HTTP to an oci:// registry (loopback only)");
  },
  async run(context, operands, options) {
    const refs = (operands as readonly unknown[]).flat().map(String);
    const to = String(options["to"]);
    if (/^(oci|http):\/\//.test(to)) {
      if (refs.length === 0) throw usageError("push to a registry needs at least one ref", { to });
      return pushArtifacts(context, refs, to, options);
    }
    throw usageError(`unknown destination ${JSON.stringify(to)}: expected oci://host[:port]/repository`, { to });
  },
};
