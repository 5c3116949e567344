import type { CommandSpec } from "../context.js";
import { defineLimitFlags, takeLimitFlags } from "../limit-flags.js";
import { loadFleetLibrary } from "./push-artifacts.js";

export const pullCommand: CommandSpec = {
  name: "pull",
  define(command) {
    command
      .description("pull a resolution (or trees) from an OCI registry: every OCI and oats digest is verified in staging before anything is published; pulling never approves")
      .argument("<reference>", "oci://host[:port]/repository:tag or …@sha256:<hex> (http://… for a loopback registry)")
      .option("--insecure", "plain HTTP to an oci:// registry (loopback only)");
    defineLimitFlags(command);
  },
  async run(context, [reference], options) {
    const { limits } = takeLimitFlags(options);
    const library = await loadFleetLibrary();
    const progress = context.progress(`pull ${reference}`);
    let report;
    try {
      report = await library.pullFromRegistry(context.scope, reference!, { insecure: options["insecure"] === true, limits, onProgress: progress.update, signal: context.interruptSignal() });
    } finally {
      progress.end();
    }
    const lines = [
      `pulled ${report.reference}`,
      ...report.artifacts.map((row) => `${row.status} ${row.kind} ${row.key} ${row.integrity}`),
      ...report.blobs.map((row) => `${row.status} blob ${row.digest}`),
      ...report.resolutions.map((row) => `${row.status} resolution ${row.id}`),
      ...report.approve.flatMap((row) => [`not approved here: capture ${row.subject.key} (resolution ${row.resolution}); to dispatch it on this host, review it and run:`, `  ${row.command}`]),
    ];
    return { result: report, lines, quietLines: report.resolutions.map((row) => row.id) };
  },
};
