import { Argument } from "commander";
import { SHELLS, type Shell } from "../completion.js";
import type { CommandSpec } from "../context.js";

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
  async run(_context, [shell]) {
    // main.js is loaded already (it ran this command); importing it here rather than at the top avoids a cycle.
    const [{ COMMANDS, GROUPS, VIRTUAL_COMMANDS }, { completionModel, completionScript }] = await Promise.all([
      import("../main.js"),
      import("../completion.js"),
    ]);
    const script = completionScript(shell as Shell, completionModel(COMMANDS, GROUPS, VIRTUAL_COMMANDS));
    return { result: { shell, script }, lines: [script.trimEnd()], quietLines: [script.trimEnd()] };
  },
};
