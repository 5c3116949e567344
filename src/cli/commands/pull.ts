import { OatsError } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import { defineLimitFlags, takeLimitFlags } from "../support/limit-flags.js";
import { loadFleetLibrary } from "./push-artifacts.js";

export const pullCommand: CommandSpec = {
  name: "pull",
  define(command) {
    command
      .description(
        "pull a resolution (or trees) from an OCI registry, or a sealed run's " +
          "evidence from a far side (oci://…:run-<hex>, or --run): every digest is " +
          "verified before anything is published; pulling never approves",
      )
      .argument(
        "<reference>",
        "oci://host[:port]/repository:tag or …@sha256:<hex> (http://… for a loopback registry); a run: …/repository:run-<hex>, or a far side (oci://…/repository, dir:/share) with --run",
      )
      .option(
        "--run <id>",
        "pull this sealed run's evidence (sha256-<64 hex>) from the far side <reference> into .agents/received-runs/",
      )
      .option("--insecure", "plain HTTP to an oci:// registry (loopback only)");
    defineLimitFlags(command);
  },
  async run(context, [reference], options) {
    const run = runReference(reference!, options["run"]);
    if (run !== null) {
      const evidence = await import("../../evidence/index.js");
      const report = await evidence.receiveRun(context.scope, run.from, run.runId, {
        insecure: options["insecure"] === true,
      });
      return {
        result: report,
        lines: [
          `${report.status === "written" ? "received" : "kept"} run ` +
            `${report.runId} (${report.handle}, job ${report.job}: ${report.result}) ` +
            `from ${report.from}`,
          `  checked: record hashes to the run id; log ${report.logLines} ` +
            `line${report.logLines === 1 ? "" : "s"} matches the record's digest; ` +
            `${report.auditLines} audit line${report.auditLines === 1 ? "" : "s"} ` +
            `well-formed and naming this run`,
          "  not checked: the sending host's audit chain (only that host can verify it)",
        ],
        quietLines: [report.runId],
      };
    }
    const { limits } = takeLimitFlags(options);
    const library = await loadFleetLibrary();
    const progress = context.progress(`pull ${reference}`);
    let report;
    try {
      report = await library.pullFromRegistry(context.scope, reference!, {
        insecure: options["insecure"] === true,
        limits,
        onProgress: progress.update,
        signal: context.interruptSignal(),
      });
    } finally {
      progress.end();
    }
    const lines = [
      `pulled ${report.reference}`,
      ...report.artifacts.map((row) => `${row.status} ${row.kind} ${row.key} ${row.integrity}`),
      ...report.blobs.map((row) => `${row.status} blob ${row.digest}`),
      ...report.resolutions.map((row) => `${row.status} resolution ${row.id}`),
      ...report.attestations.map((row) =>
        row.status === "refused"
          ? `refused attestation ${row.digest}: ${row.refusal?.reason ?? row.refusal?.code}: ${row.refusal?.message}`
          : `${row.status} attestation ${row.id} ` +
            `(${row.predicateType?.endsWith("/approval/v1") ? "approval" : "run"}, ` +
            `${row.verifiedBy === null ? `key ${row.keyid} not trusted here` : `verified: ${row.verifiedBy}`})`,
      ),
      ...report.approve.flatMap((row) => [
        `not approved here: capture ${row.subject.key} (resolution ` +
          `${row.resolution}); to dispatch it on this host, review it and run:`,
        `  ${row.command}`,
      ]),
    ];
    return { result: report, lines, quietLines: report.resolutions.map((row) => row.id) };
  },
};

/** A run pull: `--run <id>` with any far side, or an OCI reference tagged `run-<hex>`; null for a resolution pull. */
function runReference(reference: string, run: unknown): { from: string; runId: string } | null {
  if (typeof run === "string") {
    if (/:run-[0-9a-f]{64}$/.test(reference))
      throw new OatsError("usage", "give the run once: a run-<hex> tag or --run, not both", {
        reference: reference.slice(0, 300),
      });
    return { from: reference, runId: run };
  }
  const tagged = /^((?:oci|http):\/\/.+):run-([0-9a-f]{64})$/.exec(reference);
  if (tagged) return { from: tagged[1]!, runId: `sha256-${tagged[2]}` };
  if (reference.startsWith("dir:"))
    throw new OatsError("usage", "a dir: far side holds runs: name one with --run sha256-<hex>", {
      reference: reference.slice(0, 300),
    });
  return null;
}
