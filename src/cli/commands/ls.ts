import type { CommandSpec } from "../context.js";
import { integrityText } from "../render.js";
import { loadLibrary } from "./shared.js";

export const ls: CommandSpec = {
  name: "ls",
  define(command) {
    command.description("list the retained revisions in the scope (lists; does not verify)");
  },
  async run(context) {
    const library = await loadLibrary();
    const revisions = library.listRetained(context.scope);
    const lines = revisions.map((entry) => `${entry.kind} ${entry.key} ${integrityText(entry.integrity)}`);
    return {
      result: { scope: context.scope, revisions },
      lines: lines.length ? lines : [`no retained revisions in ${context.scope}`],
      quietLines: lines,
    };
  },
};
