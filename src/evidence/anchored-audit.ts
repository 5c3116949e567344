import { CHAIN_LOGS, checkAgainstCheckpoint, readAudit, type AuditEntry } from "../ledger/index.js";

/**
 * The operator's audit chain as evidence may rely on it: checked against
 * this account's private checkpoint first (src/ledger/chain-sync.ts: a log
 * that no longer extends what this account verified is refused), then read
 * whole with its chain verified. Entries appended after the checkpoint by a
 * writer of the scope still verify (an unkeyed chain; see captures.md, "What
 * still needs an external witness"): what only this account wrote, it keeps
 * in its private state too (start-record.ts).
 */
export interface AnchoredAudit {
  readonly entries: readonly AuditEntry[];
  bySeq(seq: number): AuditEntry | undefined;
}

export function readAnchoredAudit(realScope: string): AnchoredAudit {
  checkAgainstCheckpoint(realScope, CHAIN_LOGS.audit);
  const { entries } = readAudit(realScope);
  const bySeq = new Map(entries.map((entry) => [entry.seq, entry]));
  return { entries, bySeq: (seq) => bySeq.get(seq) };
}

/** Read the anchored chain once, on first use; a failure is thrown to every caller. */
export function lazyAnchoredAudit(realScope: string): () => AnchoredAudit {
  let read: { audit: AnchoredAudit } | { error: unknown } | null = null;
  return () => {
    if (read === null) {
      try {
        read = { audit: readAnchoredAudit(realScope) };
      } catch (error) {
        read = { error };
      }
    }
    if ("error" in read) throw read.error;
    return read.audit;
  };
}

/** The entry at `ref` when it is exactly that entry (seq and hash). */
export function entryAt(audit: AnchoredAudit, ref: { seq: number; hash: string }): AuditEntry | null {
  const entry = audit.bySeq(ref.seq);
  return entry !== undefined && entry.hash === ref.hash ? entry : null;
}
