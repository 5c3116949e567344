import { OatsError, bytesDigest } from "../core/index.js";
import { digestFarSideFile, farSideRunOf, type FarSideRun } from "./evidence-file.js";
import type { OutboxEntry, OutboxFile } from "./outbox.js";
import type { OpenEntry } from "./outbox-open.js";
import type { EvidenceTransport } from "./transport.js";

/**
 * The proof of delivery (push.ts): what the far side holds for a run, read
 * from the far side itself after the put, compared file by file with what
 * was queued. Streaming when the transport offers openBack (every file
 * hashed as it passes, never held), whole files from readBack otherwise.
 */

/** Compare what the far side returned with what was queued; a typed refusal naming every difference. */
export function checkReadBack(entry: OutboxEntry, to: string, back: Map<string, Buffer> | null): void {
  const differences: string[] = [];
  for (const file of entry.files) {
    const bytes = back?.get(file.name);
    if (bytes === undefined) differences.push(`${file.name}: missing`);
    else if (bytesDigest(bytes) !== file.digest)
      differences.push(readBackDifference(file, bytesDigest(bytes), bytes.length));
  }
  refuseDifferences(entry, to, differences, back?.keys() ?? []);
}

/**
 * checkReadBack, streaming: every file the far side lists is hashed as it
 * streams from the far side (stopping past the queued size) and compared
 * with what was queued; a size the far side states that is not the queued
 * one is a difference without reading a byte.
 */
export async function checkFarSide(entry: OutboxEntry, to: string, back: FarSideRun | null): Promise<void> {
  const differences: string[] = [];
  for (const file of entry.files) {
    const there = back?.files.get(file.name);
    if (there === undefined) {
      differences.push(`${file.name}: missing`);
      continue;
    }
    const streamed =
      there.size === file.bytes ? await digestFarSideFile(there, file.bytes) : { digest: "-", bytes: there.size };
    if (streamed.digest !== file.digest || streamed.bytes !== file.bytes)
      differences.push(readBackDifference(file, streamed.digest, streamed.bytes));
  }
  refuseDifferences(entry, to, differences, back?.files.keys() ?? []);
}

function readBackDifference(file: OutboxFile, digest: string, bytes: number): string {
  return `${file.name}: read back ${digest} (${bytes} bytes), queued ${file.digest} (${file.bytes} bytes)`;
}

/**
 * The refusal of both checks: `differences` found among the queued files,
 * and every name the far side lists that was not queued (`unexpected`).
 */
function refuseDifferences(entry: OutboxEntry, to: string, differences: string[], listed: Iterable<string>): void {
  for (const name of listed)
    if (!entry.files.some((file) => file.name === name)) differences.push(`${name}: unexpected`);
  if (differences.length > 0) throw readBackMismatch(entry, to, differences);
}

/** The typed refusal of a read-back that is not what was queued (reason `read-back-mismatch`). */
function readBackMismatch(entry: OutboxEntry, to: string, differences: string[]): OatsError {
  return new OatsError(
    "integrity-mismatch",
    `run ${entry.runId} (outbox seq ${entry.seq}) did not read back intact ` +
      `from ${to}: ${differences.join("; ")}; it stays queued`,
    { to, seq: entry.seq, runId: entry.runId, differences, reason: "read-back-mismatch" },
  );
}

/** Put an entry and read it back from the far side, streaming both ways (whole files from a readBack-only one). */
export async function deliverEntry(transport: EvidenceTransport, entry: OutboxEntry, opened: OpenEntry): Promise<void> {
  await transport.put({ runId: entry.runId, seq: entry.seq, files: opened.files });
  const to = transport.describe();
  if (transport.openBack === undefined) {
    const back = await transport.readBack(entry.runId);
    return checkFarSide(entry, to, back === null ? null : farSideRunOf(back));
  }
  const back = await transport.openBack(entry.runId);
  try {
    await checkFarSide(entry, to, back);
  } finally {
    await back?.close();
  }
}
