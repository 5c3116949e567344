/** Remedies of the run commands (`oats run ...`), by `details.reason`; merged into remedies.ts. */
export const RUN_REMEDIES: Record<string, string> = {
  "run-unsealed":
    "the run's dispatcher is gone and the run was never sealed; close it " +
    "with `oats run seal <run>` (it keeps every line captured and is sealed " +
    "INTERRUPTED).",
  "run-running":
    "the run is still going (its dispatcher is alive); wait for it, or stop it with `oats run cancel <run>`.",
  "log-unwritable":
    "the run's log could not be written (details.errno; a full disk, most " +
    "often), so the child was stopped. When details.sealed is true the run " +
    "is sealed CANCELLED with the cause in its footer; otherwise free space " +
    "and close it with `oats run seal <handle>`.",
  "seal-failed":
    "the child ended but its run could not be sealed (details.errno; a full " +
    "disk, most often); the log keeps every line and the run stays open. " +
    "Free space and close it with `oats run seal <handle>` (sealed " +
    "INTERRUPTED, the exit status in a note).",
  "run-sealed": "the run is already sealed; `oats run show <run>` prints it and `oats run verify <run>` checks it.",
  "run-cancel-pending":
    "cancel was requested and the dispatcher has not sealed the run yet; look again with `oats run ls` in a moment.",
  "run-never-started":
    "the run directory was left before its child started (no run-start audit " +
    "entry); nothing ran. Remove the directory named above by hand.",
  "ambiguous-run": "several runs start with that prefix (details.matches); give more of the handle or the run id.",
  "invalid-run-ref":
    "a run is named by its handle (`oats run ls`), its id sha256-<64 hex>, or a unique prefix of either.",
  "run-log-mismatch":
    "the run's log is not the log that was sealed (edited, truncated or " +
    "damaged since); the record's digest is the evidence, keep both files as " +
    "they are for inspection.",
  "run-record-mismatch":
    "the run's record.json is not the sealed record (edited or damaged " +
    "since); keep it as it is for inspection, and compare with the run-end " +
    "audit entry, which names the id it was sealed with.",
  "run-audit-mismatch":
    "the audit log does not hold this run's run-start and run-end entries as " +
    "the record names them; check `oats audit verify`, and keep the run as " +
    "it is for inspection.",
  "run-damaged":
    "a file of the run directory is missing, not a regular file, a symlink " +
    "or malformed; oats never follows or repairs it. Inspect the run " +
    "directory by hand.",
  "run-log-malformed":
    "the run log is not in the oats log format (stamps, streams, footer); it " +
    "was edited or damaged. Keep it as it is for inspection.",
  "run-record-malformed":
    "the run's record.json is not an oats.run.v1 record; it was edited or damaged. Keep it as it is for inspection.",
  "run-record-not-canonical":
    "the run's record.json is not in canonical form; it was edited. Keep it as it is for inspection.",
};
