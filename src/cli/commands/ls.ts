import { isOatsError } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import { integrityText } from "../support/render.js";
import { loadLibrary } from "./shared.js";

export const ls: CommandSpec = {
  name: "ls",
  define(command) {
    command.description(
      "list the retained revisions in the scope, with their size and, for " +
        "sources, their qualified identity (lists; does not verify)",
    );
  },
  async run(context) {
    const library = await loadLibrary();
    // A damaged identity blob does not stop the listing: it is shown, and `oats fsck` is where damage is judged.
    const identityOf = (key: string): { identity: string | null; identityError?: string } => {
      try {
        return { identity: library.readSourceIdentity(context.scope, key) };
      } catch (error) {
        if (!isOatsError(error) || error.kind === "internal") throw error;
        return { identity: null, identityError: error.code };
      }
    };
    const revisions = library.listRetained(context.scope).map((entry) => ({
      ...entry,
      ...(entry.kind === "source" ? identityOf(entry.key) : {}),
      size: library.revisionSize(entry.dir),
    }));
    const row = (entry: (typeof revisions)[number]) => `${entry.kind} ${entry.key} ${integrityText(entry.integrity)}`;
    const lines = revisions.map((entry) => {
      const size =
        `${library.formatBytes(entry.size.bytes)} in ${entry.size.files} ` + `file${entry.size.files === 1 ? "" : "s"}`;
      const unreadable =
        "identityError" in entry ? `(identity unreadable: ${entry.identityError})` : "(identity not recorded)";
      const identity = "identity" in entry ? `  ${entry.identity ?? unreadable}` : "";
      return `${row(entry)}  ${size}${identity}`;
    });
    return {
      result: { scope: context.scope, revisions },
      lines: lines.length ? lines : [`no retained revisions in ${context.scope}`],
      quietLines: revisions.map(row),
    };
  },
};
