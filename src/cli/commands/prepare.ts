import type { CommandSpec } from "../support/context.js";
import { loadResolutionLibrary } from "./resolution-shared.js";

export const prepare: CommandSpec = {
  name: "prepare",
  define(command) {
    command
      .description(
        "resolve a plan: retain and verify every artifact it names, write the " +
          "complete record, then point the instance at it",
      )
      .argument("<plan>", "plan file (.yaml, .yml or .json); relative paths in it resolve against its directory");
  },
  async run(context, [planFile]) {
    const library = await loadResolutionLibrary();
    const plan = library.readPlanFile(planFile!);
    const progress = context.progress(`prepare ${plan.instance}`);
    let prepared: Awaited<ReturnType<typeof library.prepare>>;
    try {
      prepared = await library.prepare(context.scope, plan, { onProgress: progress.update });
    } finally {
      progress.end();
    }
    const entrypoints = Object.keys(prepared.record.entrypoints);
    return {
      result: {
        id: prepared.id,
        status: prepared.status,
        instance: prepared.instance,
        ref: prepared.ref,
        record: prepared.record,
      },
      lines: [
        `${prepared.status === "kept" ? "kept (already recorded)" : "prepared"} resolution ${prepared.id}`,
        `  instance ${prepared.instance} -> ${prepared.ref.resolution}`,
        `  ${Object.keys(prepared.record.artifacts).length} artifact(s), ` +
          `${entrypoints.length} entry ` +
          `point(s)${entrypoints.length ? `: ${entrypoints.join(", ")}` : ""}`,
      ],
      quietLines: [prepared.id],
    };
  },
};
