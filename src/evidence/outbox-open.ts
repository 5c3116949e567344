import { join } from "node:path";
import { OatsError } from "../core/index.js";
import { readRegularFile } from "../retention/index.js";
import { bufferFile, holdEvidenceFile, type EvidenceFile, type HeldEvidenceFile } from "./evidence-file.js";
import { entryName, outboxRoot, type OutboxEntry } from "./outbox.js";
import type { EvidenceFileName } from "./transport.js";

/**
 * record.json and audit.jsonl of an entry are read whole, and no larger than
 * this: a sealed record is at most 16 MiB (sealed-run.ts) and the audit
 * lines of one run a few KiB. The log has no bound of its own: it is only
 * ever streamed.
 */
const SMALL_FILE_LIMIT = 64 * 1024 * 1024;

/** An entry's files opened for delivery: the log held open by descriptor, the small files in memory as well. */
export interface OpenEntry {
  readonly files: ReadonlyMap<EvidenceFileName, EvidenceFile>;
  readonly recordBytes: Buffer | undefined;
  readonly auditBytes: Buffer | undefined;
  /** Release the log's descriptor (once every stream of it has stopped). */
  close(): Promise<void>;
}

/**
 * An entry's files, each checked against the digest it was queued with
 * (`integrity-mismatch` otherwise). The log is opened once (O_NOFOLLOW, a
 * regular file), hashed through a bounded buffer and held open: what is
 * sent is read through that descriptor, and the transport holds its copy to
 * the digest checked here. record.json and audit.jsonl are read whole, at
 * most SMALL_FILE_LIMIT bytes each.
 */
export async function openEntryFiles(scope: string, entry: OutboxEntry): Promise<OpenEntry> {
  const dir = join(outboxRoot(scope), "entries", entryName(entry.seq, entry.runId));
  const files = new Map<EvidenceFileName, EvidenceFile>();
  const held: HeldEvidenceFile[] = [];
  const small = new Map<EvidenceFileName, Buffer>();
  try {
    for (const file of entry.files) {
      const refuse = (failure: string, details: Record<string, unknown>) =>
        new OatsError("integrity-mismatch", `outbox entry ${entry.seq} (${entry.runId}): ${file.name} is ${failure}`, {
          seq: entry.seq,
          runId: entry.runId,
          file: file.name,
          reason: failure,
          ...details,
        });
      let opened: EvidenceFile;
      if (file.name === "log") {
        const log = await holdEvidenceFile(join(dir, file.name), refuse);
        held.push(log);
        opened = log;
      } else {
        const bytes = readRegularFile(join(dir, file.name), { limit: SMALL_FILE_LIMIT, refuse });
        small.set(file.name, bytes);
        opened = bufferFile(bytes);
      }
      if (opened.digest !== file.digest || opened.size !== file.bytes) {
        throw new OatsError(
          "integrity-mismatch",
          `outbox entry ${entry.seq} (${entry.runId}): ${file.name} changed since it was queued`,
          { seq: entry.seq, runId: entry.runId, file: file.name, expected: file.digest, actual: opened.digest },
        );
      }
      files.set(file.name, opened);
    }
  } catch (error) {
    await Promise.all(held.map((file) => file.close()));
    throw error;
  }
  return {
    files,
    recordBytes: small.get("record.json"),
    auditBytes: small.get("audit.jsonl"),
    close: async () => void (await Promise.all(held.map((file) => file.close()))),
  };
}
