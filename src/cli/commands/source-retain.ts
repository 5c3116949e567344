import type { CommandSpec } from "../support/context.js";
import { receiptOutcome } from "./shared.js";

/**
 * `oats source retain <dir|git-repo> --identity <id> --revision <commit|local>`:
 * retain a source tree keyed by its qualified identity. With a commit, the
 * directory is a local git repository and the tree of that commit is
 * retained, never the working tree; with `local`, the directory as it is.
 */
export const sourceRetain: CommandSpec = {
  name: "source retain",
  define(command) {
    command
      .description(
        "retain a source tree under its qualified identity: the tree of a git " +
          "commit (never the working tree), or a directory as it is",
      )
      .argument("<dir>", "the source directory (--revision local) or the local git repository (--revision <commit>)")
      .requiredOption("--identity <id>", "the qualified source identity: git:<url>#<path> or path:<absolute dir>")
      .requiredOption(
        "--revision <revision>",
        "a full 40-hex lowercase commit id, or `local` for the directory as it is",
      );
  },
  async run(context, [dir], options) {
    const { retainSource } = await import("../../acquisition/source.js");
    const progress = context.progress(`source retain ${String(options["identity"])}`);
    try {
      const receipt = await retainSource(
        context.scope,
        { identity: options["identity"] as string, revision: options["revision"] as string, dir: dir! },
        { onProgress: progress.update },
      );
      const outcome = receiptOutcome(receipt);
      const [head, ...rest] = outcome.lines;
      return {
        ...outcome,
        lines: [
          head!,
          `  identity  ${receipt.identity}`,
          `  revision  ${receipt.revision}${receipt.tree === undefined ? "" : ` (tree ${receipt.tree})`}`,
          ...rest,
        ],
      };
    } finally {
      progress.end();
    }
  },
};
