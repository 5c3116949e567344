import type { CommandSpec } from "../support/context.js";
import { entrypointLines, entrypointsResult, loadResolutionLibrary, unresolvedLines } from "./resolution-shared.js";

export const instanceShow: CommandSpec = {
  name: "instance show",
  define(command) {
    command
      .description(
        "which resolution an instance runs: its reference, the record's status " +
          "and entry points (artifacts not re-hashed)",
      )
      .argument("<name>", "the instance name");
  },
  async run(context, [name]) {
    const library = await loadResolutionLibrary();
    const ref = library.readInstanceRef(context.scope, name!);
    const read = await library.readResolution(context.scope, ref.resolution, { verify: false });
    const { record } = read;
    return {
      result: {
        instance: ref.instance,
        resolution: read.id,
        status: record.status,
        kind: record.kind,
        unresolved: record.unresolved,
        entrypoints: entrypointsResult(read),
      },
      lines: [
        `instance ${ref.instance} -> resolution ${read.id} (${record.status})`,
        ...unresolvedLines(record),
        ...entrypointLines(read),
      ],
      quietLines: [read.id],
    };
  },
};
