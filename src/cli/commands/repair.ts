import type { CommandSpec } from "../support/context.js";
import { loadLifecycleLibrary } from "./lifecycle-shared.js";

export const repairCommand: CommandSpec = {
  name: "repair",
  define(command) {
    command
      .description(
        "replace a damaged revision with bytes that verify against its own " +
          "digest; the damaged tree is moved to .agents/quarantine/, never deleted",
      )
      .argument("<ref>", "the damaged revision, <kind>:<key>@<integrity>")
      .requiredOption(
        "--from <source>",
        "a directory, an npm-style package tarball (.tgz) or an oats bundle holding the same tree",
      )
      .option(
        "--lock <file>",
        "the oats lock whose row names a legacy-named capability revision (its " +
          "provenance is checked); required for those",
      );
  },
  async run(context, operands, options) {
    const library = await loadLifecycleLibrary();
    const result = await library.repair(context.scope, operands[0]!, {
      from: String(options["from"]),
      ...(options["lock"] === undefined ? {} : { lock: String(options["lock"]) }),
    });
    return {
      result,
      lines: [
        `repaired ${result.ref}`,
        `  from       ${result.from.path} (${result.from.type})`,
        `  was        ${result.damage.code}`,
        `  quarantine ${result.quarantine} (kept for inspection)`,
        `  dir        ${result.dir}`,
      ],
      quietLines: [result.dir],
    };
  },
};
