import type { CliContext, CommandOutcome } from "../support/context.js";

/** The fleet library, loaded only when a command runs. */
export function loadFleetLibrary() {
  return import("../../fleet/index.js");
}

/**
 * `oats push <ref...> --to oci://host[:port]/repo[:tag] [--insecure]`: the
 * refs-to-registry half of `oats push` (push.ts dispatches here for an
 * oci:// or http:// destination).
 */
export async function pushArtifacts(
  context: CliContext,
  refs: readonly string[],
  to: string,
  options: Record<string, unknown>,
): Promise<CommandOutcome> {
  const library = await loadFleetLibrary();
  const report = await library.pushToRegistry(context.scope, refs, to, {
    insecure: options["insecure"] === true,
    signal: context.interruptSignal(),
  });
  const uploaded = report.blobs.filter((blob) => blob.status === "uploaded");
  const lines = [
    ...report.blobs.map(
      (blob) => `${blob.status === "uploaded" ? "uploaded" : "present "} ${blob.digest} ${blob.size} ${blob.what}`,
    ),
    ...report.manifests.map((manifest) =>
      [
        `${manifest.status} ${manifest.reference}`,
        ...(manifest.resolution ? [`  resolution ${manifest.resolution}`] : []),
        ...manifest.tags.map((tag) => `  tag ${tag}`),
      ].join("\n"),
    ),
    ...report.attestations.map(
      (row) =>
        `${row.status === "attached" ? "attached" : "present "} attestation ${row.id} ` +
        `(${row.predicateType.endsWith("/approval/v1") ? "approval" : "run"}) as ${row.digest} ` +
        `via the referrers ${row.via}`,
    ),
    `${uploaded.length} of ${report.blobs.length} blobs uploaded (${report.uploadedBytes} bytes)`,
  ];
  return { result: report, lines, quietLines: report.manifests.map((manifest) => manifest.reference) };
}
