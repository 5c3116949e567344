import type { CommandSpec } from "../context.js";
import { artifactKey, kindOption, loadLibrary, receiptOutcome } from "./shared.js";

export const retain: CommandSpec = {
  name: "retain",
  define(command) {
    command
      .description("copy a tree into the store under its full digest, verified before it becomes visible")
      .argument("<dir>", "the tree to retain")
      .requiredOption("--id <id>", "capability id, capture name, or for --kind source a 64-hex key or qualified identity (git:..., path:...)")
      .addOption(kindOption("artifact kind"))
      .option("--lock <file>", "oats lock v2 file: retain the capability at its locked integrity and check its provenance")
      .option("--expect <integrity>", "the oats.tree-exec.v1 integrity the tree must have (F:sha256-<hex>)");
  },
  async run(context, [dir], options) {
    const { parseFlags, retainFlags } = await import("../flags.js");
    const flags = parseFlags(retainFlags, options);
    const library = await loadLibrary();
    const progress = context.progress(`retain ${flags.id}`);
    try {
      if (flags.lock !== undefined) {
        const lock = library.readLockFile(flags.lock);
        return receiptOutcome(await library.retainCapabilityArtifact(context.scope, dir!, flags.id, lock, { onProgress: progress.bytes }));
      }
      const { key, identity } = artifactKey(library, flags.kind, flags.id);
      const receipt = await library.retainTree(
        context.scope,
        { kind: flags.kind, key, source: dir!, ...(flags.expect === undefined ? {} : { expect: flags.expect }) },
        { onProgress: progress.bytes },
      );
      return receiptOutcome(receipt, identity);
    } finally {
      progress.end();
    }
  },
};
