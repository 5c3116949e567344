import type { CommandSpec } from "../context.js";
import { artifactKey, kindOption, loadLibrary, receiptOutcome } from "./shared.js";

export const verify: CommandSpec = {
  name: "verify",
  define(command) {
    command
      .description("re-hash a retained revision and compare it with its integrity (reads the store only; repairs nothing)")
      .argument("<id>", "capability id, capture name, or source key / qualified identity")
      .option("--integrity <integrity>", "the revision's integrity (F:sha256-<hex>; bare sha256-<hex> means oats.tree-legacy.v0)")
      .option("--lock <file>", "oats lock v2 file naming the capability's integrity; also checks provenance")
      .addOption(kindOption("artifact kind"));
  },
  async run(context, [id], options) {
    const { parseFlags, verifyFlags } = await import("../flags.js");
    const flags = parseFlags(verifyFlags, options);
    const library = await loadLibrary();
    const progress = context.progress(`verify ${id}`);
    try {
      if (flags.lock !== undefined) {
        const lock = library.readLockFile(flags.lock);
        return receiptOutcome(await library.verifyRetainedCapability(context.scope, id!, lock, { onProgress: progress.update }));
      }
      const { key, identity } = artifactKey(library, flags.kind, id!);
      return receiptOutcome(await library.verifyTree(context.scope, { kind: flags.kind, key, integrity: flags.integrity }, { onProgress: progress.update }), identity);
    } finally {
      progress.end();
    }
  },
};
