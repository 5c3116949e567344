/** Remedies of evidence delivery (`oats push`, `oats outbox ls`, the posture at dispatch), by `details.reason`;
 * merged into remedies.ts. */
export const DELIVERY_REMEDIES: Record<string, string> = {
  "far-side-unreachable":
    "the far side named above cannot be reached (details.probe says why: " +
    "missing, not-a-directory, same-filesystem for an unmounted share); " +
    "everything stays queued. Mount or create it and run `oats push` again.",
  "read-back-mismatch":
    "what the far side returned is not what was sent (details.differences); " +
    "the run stays queued and nothing was marked. Check the far side's " +
    "storage, then push again.",
  "existing-content-differs":
    "the far side already holds other content under this run's id; nothing " +
    "was replaced. Inspect that copy on the far side before removing it by " +
    "hand; oats never overwrites it.",
  "outbox-unwritable":
    "the evidence outbox (.agents/outbox) cannot be written, so no run may " +
    "start; fix its directory (a symlink, permissions or a full disk are the " +
    "usual causes) and retry.",
  "evidence-far-side-unreachable":
    "confidential work runs only when its evidence far side (--evidence-to " +
    "or OATS_EVIDENCE_TO) can be reached; bring it back and dispatch again. " +
    "Nothing was started.",
  "transport-not-built": "that kind of destination is not available yet; use dir:/path.",
  "unknown-scheme": "an evidence destination is dir:/abs/path (a share on another filesystem).",
  "no-scheme": "an evidence destination names its scheme: dir:/abs/path.",
  "staging-replaced":
    "another user replaced the staging directory on the share while it was " +
    "written; nothing was delivered. Restrict who can write the share's " +
    "runs/ directory and push again.",
};
