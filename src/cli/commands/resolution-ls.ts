import { OatsError, isOatsError, type ErrorCode } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import { loadResolutionLibrary, subjectText } from "./resolution-shared.js";

export const resolutionLs: CommandSpec = {
  name: "resolution ls",
  define(command) {
    command.description(
      "list the resolution records in the scope with their status and subject " +
        "(each record is read and checked; artifacts are not re-hashed)",
    );
  },
  async run(context) {
    const library = await loadResolutionLibrary();
    const records = library.listResolutionIds(context.scope).map((id) => {
      try {
        const { record } = library.readRecordBytes(context.scope, id);
        return { id, ok: true as const, status: record.status, kind: record.kind, subject: record.subject };
      } catch (error) {
        if (!isOatsError(error)) throw error;
        return { id, ok: false as const, error: error.toJSON() };
      }
    });
    const lines = records.map((entry) =>
      entry.ok
        ? `${entry.id} ${entry.status} ${subjectText(entry)}`
        : `${entry.id} INVALID ${entry.error.code}: ${entry.error.message}`,
    );
    const result = { scope: context.scope, records };
    const first = records.find((entry) => !entry.ok);
    const outcome = {
      result,
      lines: lines.length ? lines : [`no resolution records in ${context.scope}`],
      quietLines: lines,
    };
    if (!first || first.ok) return outcome;
    // A record that does not read back is reported, like fsck's damage: the first one's code and exit, the whole list
    // in the details.
    const failure = new OatsError(
      first.error.code as ErrorCode,
      `${records.filter((entry) => !entry.ok).length} of ${records.length} ` +
        `resolution records do not read back; first: ${first.error.message}`,
      {
        first,
        records,
      },
    );
    return { ...outcome, failure };
  },
};
