import { OatsError } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import { loadResolutionLibrary } from "./resolution-shared.js";

export const reconstruct: CommandSpec = {
  name: "reconstruct",
  define(command) {
    command
      .description(
        "record what an existing instance runs, from its instance.json and the " +
          "lock that installed it; only what verifies exactly is taken (a partial " +
          "or unknown result is reported and refused, exit 6)",
      )
      .argument("<instance-home>", "the instance's home directory (holding instance.json)");
  },
  async run(context, [home]) {
    const library = await loadResolutionLibrary();
    const progress = context.progress(`reconstruct ${home}`);
    let done: Awaited<ReturnType<typeof library.reconstruct>>;
    try {
      done = await library.reconstruct(context.scope, home!);
    } finally {
      progress.end();
    }
    const { record } = done;
    const result = {
      id: done.id,
      status: done.status,
      instance: done.ref.instance,
      ref: done.ref,
      refMoved: done.refMoved,
      evidence: record.evidence,
      unresolved: record.unresolved,
      entrypoints: Object.keys(record.entrypoints),
    };
    const lines = [
      `${done.status} resolution ${done.id}`,
      done.refMoved
        ? `  instance ${done.ref.instance} -> ${done.ref.resolution}`
        : `  instance ${done.ref.instance} still -> ${done.ref.resolution} (kept: the new record is not ready)`,
      `  ${record.evidence.length} evidence item(s), ${Object.keys(record.entrypoints).length} entry point(s)`,
      ...record.unresolved.map((entry) => `  unresolved ${entry.pointer}: ${entry.reason}`),
    ];
    if (done.status === "reconstructed") return { result, lines, quietLines: [done.id] };
    // The record is written, so it can be inspected, but a partial or unknown result is never reported as success.
    const failure = new OatsError(
      "resolution-incomplete",
      `instance ${done.ref.instance}: reconstruction is ${done.status}, ` +
        `${record.unresolved.length} input(s) could not be established; record ` +
        `${done.id} was written but is not ready`,
      {
        ...result,
      },
    );
    return { result, lines, quietLines: [done.id], failure };
  },
};
