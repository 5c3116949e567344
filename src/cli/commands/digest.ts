import { Option } from "commander";
import { resolve } from "node:path";
import { DEFAULT_TREE_FORMAT, TREE_FORMAT_CHOICES } from "../support/constants.js";
import type { CommandSpec } from "../support/context.js";
import { integrityText } from "../support/render.js";
import type { TreeFormat } from "../../retention/index.js";

export const digest: CommandSpec = {
  name: "digest",
  define(command) {
    command
      .description("print a directory tree's digest (touches no store)")
      .argument("<dir>", "the tree to digest")
      .addOption(
        new Option("--format <format>", "tree digest format").choices(TREE_FORMAT_CHOICES).default(DEFAULT_TREE_FORMAT),
      );
  },
  async run(context, [dir], options) {
    // commander's .choices() already checked --format. The digest module is
    // loaded alone: `oats digest` needs neither zod nor the store, and their
    // load time is most of what a digest of a small tree costs.
    const format = options["format"] as TreeFormat;
    const { digestTree } = await import("../../retention/digest/tree.js");
    const progress = context.progress(`digest ${dir}`);
    let value: string;
    try {
      const digests = await digestTree(dir!, [format], { onProgress: progress.update });
      value = digests[format]!;
    } finally {
      progress.end();
    }
    const integrity = { format, value };
    const text = integrityText(integrity);
    return { result: { dir: resolve(dir!), integrity, text }, lines: [text], quietLines: [text] };
  },
};
