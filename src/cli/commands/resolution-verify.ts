import type { CommandSpec } from "../support/context.js";
import {
  artifactLines,
  entrypointLines,
  entrypointsResult,
  loadResolutionLibrary,
  subjectText,
} from "./resolution-shared.js";

export const resolutionVerify: CommandSpec = {
  name: "resolution verify",
  define(command) {
    command
      .description(
        "read a resolution record, re-hash every artifact it references, and " +
          "check it is ready to run (a partial or unknown record is refused)",
      )
      .argument("<id>", "the record's id, sha256-<64 hex>");
  },
  async run(context, [id]) {
    const library = await loadResolutionLibrary();
    const progress = context.progress(`resolution verify ${id}`);
    let read: Awaited<ReturnType<typeof library.readResolution>>;
    try {
      read = await library.readResolution(context.scope, id!, { verify: true });
    } finally {
      progress.end();
    }
    // Verified bytes are not readiness: a partial or unknown record is refused here (resolution-incomplete, exit 6).
    library.checkReadiness(read.record);
    const { record } = read;
    const artifacts = library.referencedArtifacts(record);
    return {
      result: {
        id: read.id,
        status: record.status,
        subject: record.subject,
        verified: read.verified,
        artifacts,
        entrypoints: entrypointsResult(read),
      },
      lines: [
        `verified resolution ${read.id}: ${record.status} ` +
          `${subjectText(record)}, ${artifacts.length} ` +
          `artifact${artifacts.length === 1 ? "" : "s"} re-hashed`,
        ...artifactLines(record),
        ...entrypointLines(read),
      ],
      quietLines: [read.id],
    };
  },
};
