import type { ReadResolution, ResolutionRecord } from "../../resolution/index.js";
import { integrityText } from "../support/render.js";

/** The resolution library, loaded only when a command runs. */
export function loadResolutionLibrary() {
  return import("../../resolution/index.js");
}

export type ResolutionLibrary = Awaited<ReturnType<typeof loadResolutionLibrary>>;

/** `instance alpha` / `capture nightly`: the record's label. */
export function subjectText(record: Pick<ResolutionRecord, "subject">): string {
  const subject = record.subject as Record<string, string>;
  const [kind] = Object.keys(subject);
  return kind === undefined ? "?" : `${kind} ${subject[kind]}`;
}

/** Entry points as the JSON result shows them: what the record says, and where it resolved inside its retained
 * artifact. */
export function entrypointsResult(read: ReadResolution) {
  return Object.fromEntries(
    Object.entries(read.record.entrypoints).map(([name, entrypoint]) => [
      name,
      { ...entrypoint, resolved: read.entrypoints[name] },
    ]),
  );
}

/** One line per entry point: name, role, the resolved path and its arguments. */
export function entrypointLines(read: ReadResolution): string[] {
  return Object.entries(read.record.entrypoints).map(([name, entrypoint]) => {
    const args = entrypoint.args.length ? ` ${entrypoint.args.map((arg) => JSON.stringify(arg)).join(" ")}` : "";
    return `  entry ${name} (${entrypoint.role}) ${read.entrypoints[name]}${args}`;
  });
}

/** One line per selected artifact. */
export function artifactLines(record: ResolutionRecord): string[] {
  const lines = Object.entries(record.artifacts).map(
    ([id, entry]) => `  artifact ${id} ${integrityText(entry.artifact.integrity)}`,
  );
  if (record.source)
    lines.unshift(
      `  source ${record.source.identity} @ ${record.source.revision} ` +
        `${integrityText(record.source.artifact.integrity)}`,
    );
  return lines;
}

/** What a partial or unknown record leaves open. */
export function unresolvedLines(record: ResolutionRecord): string[] {
  return record.unresolved.map((entry) => `  unresolved ${entry.pointer}: ${entry.reason}`);
}
