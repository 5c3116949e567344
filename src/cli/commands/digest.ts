import { Option } from "commander";
import { resolve } from "node:path";
import { DEFAULT_TREE_FORMAT, TREE_FORMAT_CHOICES } from "../constants.js";
import type { CommandSpec } from "../context.js";
import { integrityText } from "../render.js";
import { loadLibrary } from "./shared.js";

export const digest: CommandSpec = {
  name: "digest",
  define(command) {
    command
      .description("print a directory tree's digest (touches no store)")
      .argument("<dir>", "the tree to digest")
      .addOption(new Option("--format <format>", "tree digest format").choices(TREE_FORMAT_CHOICES).default(DEFAULT_TREE_FORMAT));
  },
  async run(context, [dir], options) {
    const { digestFlags, parseFlags } = await import("../flags.js");
    const flags = parseFlags(digestFlags, options);
    const library = await loadLibrary();
    const progress = context.progress(`digest ${dir}`);
    let value: string;
    try {
      const digests = await library.digestTree(dir!, [flags.format], { onProgress: progress.bytes });
      value = digests[flags.format]!;
    } finally {
      progress.end();
    }
    const integrity = { format: flags.format, value };
    const text = integrityText(integrity);
    return { result: { dir: resolve(dir!), integrity, text }, lines: [text], quietLines: [text] };
  },
};
