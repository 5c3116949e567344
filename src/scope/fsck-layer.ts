import { checkSharedLayer, type RetainedEntry } from "../retention/index.js";
import { notice, type Finding } from "./findings.js";

/**
 * The shared file layer's findings (retention's checkSharedLayer): a damaged
 * held file once, whatever links it; a writable held file or shared
 * revision entry; a path that no longer links its held file; and, as
 * notices, revisions not yet shared (`oats dedupe` converts them). Returns
 * the number of held files hashed and the revisions that matched their
 * anchored manifests (verified without re-hashing them).
 */
export async function checkLayer(
  scope: string,
  revisions: readonly RetainedEntry[],
  findings: Finding[],
): Promise<{ held: number; anchored: ReadonlySet<string> }> {
  const layer = await checkSharedLayer(scope, revisions, { anchored: true });
  for (const damaged of layer.damaged)
    findings.push({
      class: "files",
      subject: `held ${damaged.expected}`,
      path: damaged.path,
      code: "integrity-mismatch",
      kind: "mismatch",
      message:
        "held file does not hash to its name: " +
        `expected ${damaged.expected}, found ${damaged.actual ?? "unreadable"}`,
      details: { ...damaged, reason: "damaged-held-file" },
    });
  for (const entry of layer.writable)
    findings.push({
      class: "files",
      subject: entry.path,
      path: entry.path,
      code: "invalid-artifact",
      kind: "invalid",
      message: `writable (mode ${entry.mode.toString(8)}): a published file or directory is read-only`,
      details: { path: entry.path, mode: entry.mode.toString(8), reason: "writable" },
    });
  for (const broken of layer.brokenLinks)
    findings.push({
      class: "files",
      subject: `${broken.revision} ${broken.path}`,
      path: broken.revision,
      code: "invalid-artifact",
      kind: "invalid",
      message: `${broken.path} no longer links its held file ${broken.held}`,
      details: { ...broken, reason: "broken-link" },
    });
  for (const entry of layer.unshared)
    findings.push(
      notice(
        "files",
        entry.revision,
        `${entry.files} file${entry.files === 1 ? " is" : "s are"} not yet shared; \`oats dedupe --apply\` links them`,
      ),
    );
  return { held: layer.held, anchored: layer.anchored };
}
