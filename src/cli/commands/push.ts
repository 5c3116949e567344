import type { CommandOutcome, CommandSpec, CliContext } from "../support/context.js";
import { usageError } from "../support/envelope.js";
import { pushArtifacts } from "./push-artifacts.js";

/**
 * `oats push`: a small dispatcher on operands and scheme.
 *
 * - no operands: deliver the run-evidence outbox to `--to` (default
 *   $OATS_EVIDENCE_TO); `--dry-run` lists what would be sent;
 * - operands (resolution ids, `kind:key@integrity`): push those artifacts to
 *   an OCI registry (`oci://`, or `http://` for a loopback registry;
 *   push-artifacts.ts).
 *
 * A new kind of push adds a branch in `run`, not a new command.
 */

function loadDelivery() {
  return import("../../evidence/index.js");
}

function destination(context: CliContext, options: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  const given = options["to"];
  if (typeof given === "string" && given !== "") return given;
  const configured = env["OATS_EVIDENCE_TO"];
  if (typeof configured === "string" && configured !== "") return configured;
  throw usageError("oats push needs a destination: --to dir:/path (or OATS_EVIDENCE_TO)", {
    flag: "--to",
    scope: context.scope,
  });
}

async function pushOutbox(context: CliContext, options: Record<string, unknown>): Promise<CommandOutcome> {
  const delivery = await loadDelivery();
  const to = destination(context, options, process.env);
  const result = await delivery.pushEvidence(context.scope, {
    to,
    dryRun: options["dryRun"] === true,
    allowSameFilesystem: options["allowSameFilesystem"] === true,
    insecure: options["insecure"] === true,
  });
  const lines = result.dryRun
    ? [
        `${result.pending.length} run${result.pending.length === 1 ? "" : "s"} ` +
          `to deliver to ${result.to} (dry run: nothing sent); ` +
          `${result.alreadyDelivered} already delivered`,
        ...result.pending.map((entry) => `  ${entry.seq} ${entry.runId}`),
      ]
    : [
        `delivered ${result.delivered.length} ` +
          `run${result.delivered.length === 1 ? "" : "s"} to ${result.to}, each ` +
          `read back and verified; ${result.alreadyDelivered} already delivered`,
        ...result.delivered.map((entry) => `  ${entry.seq} ${entry.runId}`),
        ...result.queuedNow.map((run) => `  queued first (the outbox had missed it): ${run}`),
      ];
  const warnings = result.notQueued.map(
    (run) => `sealed run ${run.handle} could not be queued (${run.code}): ${run.reason}`,
  );
  return {
    result: { scope: context.scope, ...result },
    lines,
    warnings,
    quietLines: (result.dryRun ? result.pending : result.delivered).map((entry) => entry.runId),
  };
}

export const pushCommand: CommandSpec = {
  name: "push",
  define(command) {
    command
      .description(
        "push resolutions or artifacts to an OCI registry (only what it lacks is " +
          "uploaded), or with no refs deliver the run-evidence outbox, verifying " +
          "each run by reading it back before marking it delivered",
      )
      .argument(
        "[refs...]",
        "a resolution id sha256-<64 hex> or an artifact " +
          "<kind>:<key>@<integrity>; without refs, the evidence outbox is pushed",
      )
      .option(
        "--to <destination>",
        "oci://host[:port]/repository[:tag] for refs; dir:/abs/path (a share on " +
          "another filesystem) for the outbox; default $OATS_EVIDENCE_TO",
      )
      .option("--insecure", "plain HTTP to an oci:// registry (loopback only)")
      .option("--dry-run", "list the runs that would be delivered; send nothing")
      .option(
        "--allow-same-filesystem",
        "accept a dir: share on the scope's own filesystem (by default that is an unmounted share, so unreachable)",
      );
  },
  async run(context, operands, options) {
    const refs = (operands as readonly unknown[])
      .flat()
      .filter((ref) => ref !== undefined)
      .map(String);
    if (refs.length === 0) return pushOutbox(context, options);
    const to = typeof options["to"] === "string" ? options["to"] : "";
    if (/^(oci|http):\/\//.test(to)) return pushArtifacts(context, refs, to, options);
    throw usageError(`pushing refs needs a registry: --to oci://host[:port]/repository (got ${JSON.stringify(to)})`, {
      flag: "--to",
      to,
    });
  },
};

export const outboxLs: CommandSpec = {
  name: "outbox ls",
  define(command) {
    command
      .description("list the run-evidence outbox in order: each queued run and the destinations that read it back")
      .option("--to <destination>", "only this destination's deliveries (default: every destination with a mark)");
  },
  async run(context, _operands, options) {
    const delivery = await loadDelivery();
    const to = typeof options["to"] === "string" ? options["to"] : undefined;
    const entries = delivery.listOutbox(context.scope, to === undefined ? {} : { to, allowSameFilesystem: true });
    const lines = entries.map(
      (entry) =>
        `${entry.seq} ${entry.runId} ${entry.handle} ` +
        (entry.delivered.length === 0 ? "queued" : `delivered to ${entry.delivered.map((mark) => mark.to).join(", ")}`),
    );
    return {
      result: { scope: context.scope, entries, queued: entries.filter((entry) => entry.delivered.length === 0).length },
      lines: lines.length ? lines : [`the evidence outbox of ${context.scope} is empty`],
      quietLines: lines,
    };
  },
};
