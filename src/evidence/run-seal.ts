import { closeSync, constants, fstatSync, fsyncSync, ftruncateSync, openSync, readSync } from "node:fs";
import { join } from "node:path";
import { audit } from "../ledger/index.js";
import type { AppendOptions } from "../ledger/index.js";
import { bytesDigester } from "../core/index.js";
import { faultPoint, readInPieces, writeRestSync } from "../retention/index.js";
import { formatFooter, type RunExit, type RunResult } from "./log-format.js";
import { sealRecord, type EvidenceSection, type RunRecord } from "./run-record.js";
import { LOG_FILE, writeRecord, type RunBase } from "./run-store.js";
import { judgeRunEvidence } from "./run-policy.js";
import { attestSealedRun } from "./run-attest.js";

/**
 * Sealing, shared by the dispatcher (run-exec.ts) and `oats run seal`
 * (run-api.ts): append the footer, fsync the log, hash the whole file as it
 * now is on disk, write the record (stage + fsync + link), then append the
 * `run-end` audit entry naming the run id. The record is sealed before the
 * audit entry, so the entry can name it; a failed run-end append leaves a
 * sealed run that `oats run verify` reports as missing its end entry.
 *
 * A seal that fails or crashes before its record is in place (a full disk,
 * a kill) leaves the run open with its footer, whole or torn, at the log's
 * end: `oats run seal` cuts it off and quotes it in a note (run-api.ts), so
 * the exit status it names is not lost.
 */

/** What the record says it captured, judged against the profile's required classes. */
export type EvidenceJudge = (facts: EvidenceFacts) => EvidenceSection;

export interface EvidenceFacts {
  readonly required: readonly string[];
  readonly result: RunResult;
  readonly exit: RunExit;
  readonly lines: number;
  readonly redactions: readonly { rule: string; count: number }[];
  readonly environment: readonly string[];
}

/** The one judge of a sealed record's evidence (run-policy.ts, evidence-classes.ts); callers cannot replace it. */
export function defaultEvidence(facts: EvidenceFacts): EvidenceSection {
  return judgeRunEvidence(facts);
}

export interface SealInput {
  readonly realScope: string;
  readonly dir: string;
  readonly base: RunBase;
  readonly startAudit: { seq: number; hash: string };
  readonly exit: RunExit;
  readonly result: RunResult;
  readonly lines: number;
  readonly notes: readonly string[];
  readonly endedAt: string;
  readonly redactions: readonly { rule: string; count: number }[];
  readonly appendOptions?: AppendOptions;
}

export interface Sealed {
  readonly id: string;
  readonly record: RunRecord;
  /** Set when the run-end entry could not be appended (the run is sealed all the same). */
  readonly auditError: string | null;
  /** The run's signed statement (run-attest.ts): its id, or null without a signing key. */
  readonly attestation: string | null;
  /** Why the statement could not be written although a key is present (the run is sealed all the same). */
  readonly attestationError: string | null;
}

/** Open the log for the footer (append, never through a symlink); a torn last line (a crash mid-write) is cut off,
 * and counted. */
export function openLogForSeal(dir: string): { fd: number; torn: number } {
  const fd = openSync(join(dir, LOG_FILE), constants.O_RDWR | constants.O_APPEND | constants.O_NOFOLLOW);
  const size = fstatSync(fd).size;
  let keep = size;
  const probe = Buffer.alloc(64 * 1024);
  while (keep > 0) {
    const from = Math.max(0, keep - probe.length);
    const got = readSync(fd, probe, 0, keep - from, from);
    const at = probe.subarray(0, got).lastIndexOf(0x0a);
    if (at >= 0) {
      keep = from + at + 1;
      break;
    }
    keep = from;
  }
  if (keep !== size) ftruncateSync(fd, keep);
  return { fd, torn: size - keep };
}

function hashFile(fd: number): { digest: string; bytes: number } {
  const digester = bytesDigester();
  const bytes = readInPieces(fd, fstatSync(fd).size, (piece) => digester.update(piece));
  return { digest: digester.digest(), bytes };
}

/** Footer, fsync, record, run-end entry. `logFd` must be open for reading and appending; it is closed here. */
export async function sealRun(input: SealInput, logFd: number): Promise<Sealed> {
  let log: { digest: string; bytes: number };
  try {
    // All of it, or the error of the write that could not go on: never a record over a footer with its end missing.
    writeRestSync(logFd, Buffer.from(formatFooter(input.exit, input.result, input.notes), "utf8"));
    fsyncSync(logFd);
    log = hashFile(logFd);
  } finally {
    closeSync(logFd);
  }
  const { required, ...base } = input.base;
  const redactions = input.redactions.map((row) => ({ rule: row.rule, count: row.count }));
  const facts: EvidenceFacts = {
    required,
    result: input.result,
    exit: input.exit,
    lines: input.lines,
    redactions,
    environment: base.environment,
  };
  const record: RunRecord = {
    format: "oats.run.v1",
    ...base,
    startAudit: { seq: input.startAudit.seq, hash: input.startAudit.hash },
    endedAt: input.endedAt,
    exit: { code: input.exit.code, signal: input.exit.signal },
    result: input.result,
    log: { digest: log.digest, lines: input.lines, bytes: log.bytes },
    redactions,
    evidence: defaultEvidence(facts),
  };
  const { bytes, id } = sealRecord(record);
  faultPoint("record", input.dir);
  writeRecord(input.dir, bytes);
  let auditError: string | null = null;
  try {
    await audit(
      input.realScope,
      {
        action: "run-end",
        subject: { handle: base.handle, job: base.job, resolution: base.resolution },
        outcome: "ok",
        details: {
          runId: id,
          exit: { ...record.exit },
          result: record.result,
          status: record.evidence.status,
          log: { ...record.log },
        },
      },
      input.appendOptions ?? {},
    );
  } catch (error) {
    auditError = error instanceof Error ? error.message : String(error);
  }
  const attested = attestSealedRun(input.realScope, record, id);
  return { id, record, auditError, attestation: attested.attestation?.id ?? null, attestationError: attested.error };
}
