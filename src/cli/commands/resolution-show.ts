import type { CommandSpec } from "../support/context.js";
import { entrypointsResult, loadResolutionLibrary, subjectText } from "./resolution-shared.js";

export const resolutionShow: CommandSpec = {
  name: "resolution show",
  define(command) {
    command
      .description(
        "print a resolution record (checked: digest, canonical bytes, schema, " +
          "entry point containment; artifacts not re-hashed)",
      )
      .argument("<id>", "the record's id, sha256-<64 hex> (an oats.json.v1: prefix is accepted)");
  },
  async run(context, [id]) {
    const library = await loadResolutionLibrary();
    const read = await library.readResolution(context.scope, id!, { verify: false });
    const { record } = read;
    return {
      result: { id: read.id, path: read.path, record, entrypoints: entrypointsResult(read) },
      lines: [`resolution ${read.id}: ${record.status} ${subjectText(record)}`, JSON.stringify(record, null, 2)],
      quietLines: [JSON.stringify(record, null, 2)],
    };
  },
};
