import type { DispatchPlan } from "../../captures/index.js";
import { usageError } from "../support/envelope.js";
import type { CommandSpec } from "../support/context.js";
import { loadCapturesLibrary, subjectText } from "./captures-shared.js";

/**
 * The plan as results and lines show it: environment variable NAMES only.
 * Credential values (and pinned values, for uniformity) are never printed,
 * in either mode; the plan object itself holds them only to run the child.
 */
function planResult(plan: DispatchPlan) {
  const { env, ...rest } = plan;
  return { ...rest, env: Object.keys(env).sort() };
}

function planLines(plan: DispatchPlan): string[] {
  const { executable, approval, classification, credentials } = plan;
  const argv = executable.argv.map((arg) => JSON.stringify(arg)).join(" ");
  const names = Object.keys(plan.env).sort();
  return [
    `  run            ${executable.command}${argv ? ` ${argv}` : ""}`,
    `  executable     ${subjectText(executable.subject)}`,
    plan.approvedBy
      ? `  approved       signed by ${plan.approvedBy.trust} (${plan.approvedBy.keyid}): ${approval.operator} at ` +
        `${approval.at}: ${approval.reason}; attestation ${plan.approvedBy.attestation}`
      : `  approved       seq ${approval.seq} by ${approval.operator} at ${approval.at}: ${approval.reason}`,
    `  env            ${names.length ? names.join(", ") : "(none)"} (names only; values are never printed)`,
    `  credentials    provided ` +
      `${credentials.provided.length ? credentials.provided.join(", ") : "none"}; ` +
      `missing ${credentials.missing.length ? credentials.missing.join(", ") : "none"}`,
    `  classification declared ${classification.declared}, pinned ` +
      `${classification.pinned}, current ` +
      `${classification.current ?? "(config gone)"}: effective ` +
      `${classification.effective}`,
    `  run copy       ${plan.run.root} (private; working directory)`,
    `  checked        ${plan.verified.length} ` +
      `artifact${plan.verified.length === 1 ? "" : "s"} re-verified; principal ` +
      `${plan.principal}${plan.harness === null ? "" : `, harness ${plan.harness}`}; ` +
      `audit seq ${plan.audit.seq}`,
    ...(plan.preparedFrom === null ? [] : [`  re-prepared    from resolution ${plan.preparedFrom} (prepare-on-tick)`]),
  ];
}

/**
 * SIGINT and SIGTERM to the dispatcher cancel the run (the child's whole
 * process group goes; the run is sealed CANCELLED) instead of killing the
 * dispatcher and leaving an unsealed run. Handlers live only while it runs.
 */
async function withCancelSignals<T>(body: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const controller = new AbortController();
  const cancel = () => controller.abort();
  process.on("SIGINT", cancel);
  process.on("SIGTERM", cancel);
  try {
    return await body(controller.signal);
  } finally {
    process.removeListener("SIGINT", cancel);
    process.removeListener("SIGTERM", cancel);
  }
}

export const dispatch: CommandSpec = {
  name: "dispatch",
  define(command) {
    command
      .description(
        "resolve a queued job into what would run, re-verifying everything and " +
          "checking approval and classification now; --exec runs it",
      )
      .argument("<job>", "the queued job's id (`oats queue ls` lists them)")
      .option(
        "--exec",
        "run the plan as a recorded run (`oats run show`) and exit with the " +
          "child's exit code (128 + signal number for a signal); its output is " +
          "shown live, masked as the log keeps it, unless --quiet (in --json mode on stderr)",
      )
      .option("--harness <label>", "a label the harness gives itself, recorded in the audit log (never the principal)")
      .option(
        "--keep-run-copy",
        "with --exec: keep the private copy the child ran from (reported) instead of removing it",
      )
      .option(
        "--approved-by <trust>",
        "accept, instead of a local approval, an approval of this exact composition signed by the key this " +
          "scope trusts for approvals under this name (`oats trust add … --for approvals`; `oats pull` brings it)",
      )
      .option(
        "--evidence-to <destination>",
        "with --exec: the far side for the run's evidence (dir:/path; default " +
          "$OATS_EVIDENCE_TO); unreachable refuses confidential work, buffers the rest",
      )
      .option(
        "--allow-same-filesystem",
        "with --exec: accept a dir: far side on the scope's own filesystem (by default that is an unmounted " +
          "share, so unreachable), as `oats push --allow-same-filesystem` does",
      );
  },
  async run(context, [job], options) {
    const library = await loadCapturesLibrary();
    const exec = options["exec"] === true;
    const harness = options["harness"] as string | undefined;
    const keep = options["keepRunCopy"] === true;
    if (keep && !exec)
      throw usageError("--keep-run-copy keeps the copy a run ran from: it needs --exec", { flag: "--keep-run-copy" });
    // Every refusal happens here, before anything runs.
    const evidenceTo = options["evidenceTo"] as string | undefined;
    if (evidenceTo !== undefined && !exec)
      throw usageError("--evidence-to names where a run's evidence goes: it needs --exec", { flag: "--evidence-to" });
    const sameFilesystem = options["allowSameFilesystem"] === true;
    if (sameFilesystem && !exec)
      throw usageError("--allow-same-filesystem is about where a run's evidence goes: it needs --exec", {
        flag: "--allow-same-filesystem",
      });
    const delivery = {
      ...(evidenceTo === undefined ? {} : { to: evidenceTo }),
      ...(sameFilesystem ? { allowSameFilesystem: true } : {}),
    };
    const approvedBy = options["approvedBy"] as string | undefined;
    const planOptions = {
      ...(harness === undefined ? {} : { harness }),
      ...(approvedBy === undefined ? {} : { approvedBy }),
      ...(Object.keys(delivery).length === 0 ? {} : { delivery }),
    };
    // An exec'd dispatch is planned by the evidence layer, which checks the outbox and the far side first.
    const plan = exec
      ? await (await import("../../evidence/index.js")).planQueuedRun(context.scope, job!, planOptions)
      : await library.resolveQueuedCapture(context.scope, job!, planOptions);
    const head = `job ${plan.job}: resolution ${plan.resolution}`;
    if (!exec) {
      // The plan's run copy was the verification; nothing will run from it.
      await library.discardDispatchPlan(plan);
      return {
        result: { ...planResult(plan), exec: false },
        lines: [`dispatch plan for ${head} (not run; pass --exec to run it)`, ...planLines(plan)],
        quietLines: [plan.resolution],
      };
    }
    // Every exec'd dispatch is a run (src/evidence): logged, sealed, audited at start and end.
    // In --json mode stdout carries only the envelope: the child's stdout goes to stderr.
    const evidence = await import("../../evidence/index.js");
    const output = context.quiet
      ? "quiet"
      : context.json
        ? { stdout: process.stderr, stderr: process.stderr }
        : "inherit";
    const run = await withCancelSignals((signal) =>
      evidence.runDispatchPlanWithEvidence(context.scope, plan, { output, signal, keep }),
    );
    const runResult = {
      runId: run.runId,
      handle: run.handle,
      exit: run.exit,
      result: run.result,
      status: run.record.evidence.status,
      attestation: run.attestation ?? null,
    };
    return {
      result: {
        ...planResult(plan),
        exec: true,
        exitCode: run.exitCode,
        kept: run.kept,
        ...runResult,
        warnings: run.warnings,
      },
      lines: [
        `dispatched ${head}: exit ${run.exitCode}`,
        `  run            ${run.handle} ${run.result} (${run.record.evidence.status}) ${run.runId}`,
        // Said only when a far side is configured: "none" is the default and says nothing new.
        ...(plan.delivery === null || plan.delivery.posture === "none" ? [] : [`  ${plan.delivery.receipt}`]),
        ...(run.kept === null ? [] : [`  kept run copy  ${run.kept}`]),
        ...(run.attestation ? [`  signed         attestation ${run.attestation}`] : []),
      ],
      quietLines: [run.runId],
      exitCode: run.exitCode,
      warnings: run.warnings,
    };
  },
};
