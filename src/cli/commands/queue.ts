import { Option } from "commander";
import { OatsError } from "../../core/index.js";
import { RECURRENCE_CHOICES } from "../support/constants.js";
import type { CommandSpec } from "../support/context.js";
import { loadCapturesLibrary } from "./captures-shared.js";

function recurrenceText(recurrence: { policy: string; every?: string | undefined }): string {
  return recurrence.every === undefined ? recurrence.policy : `${recurrence.policy} every ${recurrence.every}`;
}

const STATUS_WORDS = { written: "queued", kept: "kept (already queued)", replaced: "re-queued" } as const;

export const queueAdd: CommandSpec = {
  name: "queue add",
  define(command) {
    command
      .description("queue a capture resolution under a job id (the job names the record, never a command)")
      .argument("<resolution>", "the capture's resolution id, sha256-<64 hex> (as `oats capture prepare` prints it)")
      .requiredOption("--job <id>", "the job id (^[a-z0-9][a-z0-9._-]*$)")
      .addOption(
        new Option(
          "--recurrence <policy>",
          "capture: run the stored resolution; prepare-on-tick: re-prepare from the pinned spec on every dispatch",
        ).choices(RECURRENCE_CHOICES),
      )
      .option("--every <label>", "a schedule label for the scheduler (e.g. 1h); not interpreted by oats")
      .option("--replace", "re-point an existing job of the same id (atomically)");
  },
  async run(context, [resolution], options) {
    const library = await loadCapturesLibrary();
    const every = options["every"] as string | undefined;
    const policy = options["recurrence"] as (typeof RECURRENCE_CHOICES)[number] | undefined;
    const added = await library.addJob(
      context.scope,
      {
        job: options["job"] as string,
        resolution: resolution!,
        recurrence: { ...(policy === undefined ? {} : { policy }), ...(every === undefined ? {} : { every }) },
      },
      { replace: options["replace"] === true },
    );
    return {
      result: added,
      lines: [
        `${STATUS_WORDS[added.status]} job ${added.job.job} -> resolution ` +
          `${added.job.resolution} (${recurrenceText(added.job.recurrence)})`,
      ],
      quietLines: [added.job.job],
    };
  },
};

export const queueLs: CommandSpec = {
  name: "queue ls",
  define(command) {
    command.description(
      "list the queued jobs with the resolution each names (a damaged job is " +
        "listed with its error, and fails the command)",
    );
  },
  async run(context) {
    const library = await loadCapturesLibrary();
    const jobs = library
      .listJobs(context.scope)
      .map(({ job, queued, error }) =>
        queued ? { job, ok: true as const, queued } : { job, ok: false as const, error: error!.toJSON() },
      );
    const lines = jobs.map((entry) =>
      entry.ok
        ? `${entry.job} ${entry.queued.resolution} ` +
          `${recurrenceText(entry.queued.recurrence)} created ${entry.queued.createdAt}`
        : `${entry.job} DAMAGED ${entry.error.code}: ${entry.error.message}`,
    );
    const outcome = {
      result: { scope: context.scope, jobs },
      lines: lines.length ? lines : [`no queued jobs in ${context.scope}`],
      quietLines: lines,
    };
    const damaged = jobs.filter((entry) => !entry.ok);
    const first = damaged[0];
    if (!first || first.ok) return outcome;
    // Like fsck: the whole list is printed, then the first damaged job's code and exit, with every job in the details.
    const failure = new OatsError(
      first.error.code,
      `${damaged.length} of ${jobs.length} queued jobs do not read back; first: ${first.error.message}`,
      { first, jobs },
    );
    return { ...outcome, failure };
  },
};
