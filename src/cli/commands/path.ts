import type { CommandSpec } from "../support/context.js";
import { artifactKey, kindOption, loadLibrary } from "./shared.js";

export const path: CommandSpec = {
  name: "path",
  define(command) {
    command
      .description("print where a revision lives (lexical only: this is not verification)")
      .argument("<id>", "capability id, capture name, or source key / qualified identity")
      .argument("<integrity>", "the revision's integrity (F:sha256-<hex>; bare sha256-<hex> means oats.tree-legacy.v0)")
      .addOption(kindOption("artifact kind"));
  },
  async run(context, [id, integrity], options) {
    const { parseFlags, pathFlags } = await import("../support/flags.js");
    const flags = parseFlags(pathFlags, options);
    const library = await loadLibrary();
    const { key, identity } = artifactKey(library, flags.kind, id!);
    const ref = library.parseArtifactRef({ kind: flags.kind, key, integrity: integrity! });
    const dir = library.retainedTreeDir(context.scope, ref);
    return {
      result: {
        kind: ref.kind,
        key: ref.key,
        ...(identity === undefined ? {} : { identity }),
        integrity: ref.integrity,
        dir,
      },
      lines: [dir],
      quietLines: [dir],
    };
  },
};
