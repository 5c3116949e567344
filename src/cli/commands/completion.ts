import { Argument } from "commander";
import { SHELLS, type Shell } from "../support/completion.js";
import type { CommandSpec } from "../support/context.js";

export const completion: CommandSpec = {
  name: "completion",
  define(command) {
    command
      .description(
        "print a shell completion script (bash: `source <(oats completion " +
          "bash)`; fish: `oats completion fish | source`)",
      )
      .addArgument(new Argument("<shell>", "the shell").choices(SHELLS));
  },
  async run(context, [shell]) {
    const [{ GROUPS, VIRTUAL_COMMANDS }, { completionModel, completionScript }] = await Promise.all([
      import("../support/groups.js"),
      import("../support/completion.js"),
    ]);
    const script = completionScript(shell as Shell, completionModel(context.commands, GROUPS, VIRTUAL_COMMANDS));
    return { result: { shell, script }, lines: [script.trimEnd()], quietLines: [script.trimEnd()] };
  },
};
