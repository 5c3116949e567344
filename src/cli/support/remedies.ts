/**
 * The second line of a human error, chosen by what actually failed
 * (`details.reason`, and where the error came from) rather than by its code
 * alone: a wrong --tarball-integrity and a damaged stored revision are both
 * `integrity-mismatch`, but the fix for one is not the fix for the other.
 * Returns null when the reason says nothing the code's own remedy does not.
 */

import { RUN_REMEDIES } from "./run-remedies.js";
import { DELIVERY_REMEDIES } from "./delivery-remedies.js";

interface RefusalLike {
  readonly code: string;
  readonly details: Record<string, unknown>;
}

const ARCHIVE_ENTRY =
  "the archive holds an entry oats refuses to extract (the reason and " +
  "entry are named above); nothing was retained. Do not use this archive: " +
  "rebuild the package from its source, or fetch it again from a trusted registry.";

const BUNDLE_DAMAGED =
  "the bundle is truncated, damaged or not an oats bundle (the reason is " +
  "named above); nothing was imported. Export it again from the source " +
  "scope (`oats export`) and copy it whole.";

const BY_REASON: Record<string, string> = {
  ...RUN_REMEDIES,
  ...DELIVERY_REMEDIES,
  // Dispatch as root (captures/privilege.ts): the generic classification remedy would mislead.
  "privileged-account":
    "nothing ran: as root, only a composition approved as privileged runs. " +
    'Dispatch as an ordinary user, or add "privileged": true to the capture ' +
    "spec, prepare it again and approve that composition.",
  // The scope and the source.
  "scope-missing":
    "pass --scope (or set OATS_SCOPE to) an existing deployment directory; oats never creates the scope itself.",
  "scope-not-a-directory":
    "pass --scope (or set OATS_SCOPE to) a directory, not a file; oats never creates the scope itself.",
  "source-missing": "the source directory named above does not exist; check the path.",
  "source-not-a-directory":
    "the source named above is not a directory; give the directory to retain " +
    "(a package tarball is retained from a regular file).",
  "source-contains-store":
    "the source directory contains the scope's store, so it would copy " +
    "itself; retain from a directory outside --scope.",
  "absolute-symlink":
    "the source holds an absolute symlink (named above); make it relative to " +
    "its own directory, pointing inside the tree, or remove it, then retry. " +
    "Nothing was retained.",
  "escaping-symlink":
    "the source holds a symlink that leads outside the tree (named above); " +
    "make it point inside the tree or remove it, then retry. Nothing was retained.",
  "broken-symlink":
    "the source holds a symlink whose target does not exist (named above); " +
    "fix or remove it, then retry. Nothing was retained.",
  "symlink-loop":
    "the source holds symlinks that point at each other in a loop (named " +
    "above); fix or remove them, then retry. Nothing was retained.",
  "special-file":
    "the source holds a device, FIFO or socket (named above); only files, " +
    "directories and relative symlinks can be retained. Remove it and retry.",
  unreadable:
    "a file of the source cannot be read by this user (named above); fix its " +
    "permissions and retry. Nothing was retained.",
  // Tarballs.
  "tarball-integrity":
    "the tarball's bytes are not the ones --tarball-integrity names; nothing " +
    "was extracted or stored. Check the value (package-lock.json's " +
    "`integrity` for that package) or fetch the tarball again from a trusted " +
    "registry.",
  "invalid-tarball-integrity":
    "--tarball-integrity takes the SRI string package-lock.json records: " +
    "sha512-<88 base64 characters> (or sha1-/sha256-/sha384-); correct the " +
    "argument and retry.",
  "tarball-changed":
    "the tarball changed while it was read; nothing was retained. Retry once nothing is writing to it.",
  "corrupt-archive":
    "the file is truncated or is not a (gzipped) tar archive; nothing was " +
    "retained. Fetch it again (compare its size and --tarball-integrity) and retry.",
  "empty-archive": "the archive holds no entries; nothing was retained. Check that it is the package you meant.",
  "too-many-entries":
    "the archive goes beyond oats's extraction limits (named above); nothing " +
    "was retained. If it is genuinely that large, inspect it and repeat with " +
    "the matching --max-entries, --max-expanded-bytes, --max-path-bytes, " +
    "--max-depth or --max-header-bytes.",
  // Output files.
  "output-exists":
    "the output file already exists and was left as it is; pass --force to " +
    "replace it, choose another -o path, or give `-o -` to write to stdout.",
  "output-is-directory": "-o names a directory; give the path of the file to write (or `-` for stdout).",
  // Source identities and git.
  "invalid-identity":
    "a source identity is git:<url>#<path> (e.g. git:https://host/org/repo#souls/a), path:<absolute dir>, or the 64-hex key of one; correct --identity and retry.",
  "not-a-full-commit":
    "--revision takes `local` or a full 40-hex commit (no refs, no " +
    "abbreviations); run `git rev-parse <ref>` and pass its output.",
  "not-a-commit": "--revision must name a commit object; run `git rev-parse <ref>^{commit}` and pass its output.",
  "commit-not-found":
    "that commit is not in the local repository; `git fetch` it first (oats never fetches), then retry.",
  "not-a-git-repository":
    "the source is not a git repository; pass its working tree's root, or " +
    "use --revision local to retain the directory as it is.",
  "not-repository-root":
    "pass the root of the git repository (where .git is), not a directory " +
    "inside it; the identity's #path selects the subdirectory.",
  "git-unavailable": "git could not be run; install git (or put it on PATH) and retry, or use --revision local.",
  submodule:
    "the commit's tree holds a git submodule, which oats cannot retain from " +
    "a commit; retain the submodule's own repository separately.",
  // Operator files.
  "duplicate-key":
    "the file named above has the same key twice in one object (at the " +
    "pointer named above), which JSON would silently resolve to the last; " +
    "keep one and retry.",
  "too-deep":
    "the file named above is nested deeper than oats reads (the bound is " +
    "named above); no plan, spec, config or record needs that depth. Flatten " +
    "it and retry.",
  "proto-key": "the file named above holds a `__proto__` key, which oats refuses; rename it and retry.",
  // Exports and imports.
  "changed-while-exporting":
    "a retained revision changed while it was exported; the partial output " +
    "was removed. Run `oats verify` (or `oats fsck`) on it, then retry.",
  "missing-entry": BUNDLE_DAMAGED,
  "unlisted-entry": BUNDLE_DAMAGED,
  "manifest-not-canonical": BUNDLE_DAMAGED,
  "invalid-manifest": BUNDLE_DAMAGED,
  "incomplete-resolution": BUNDLE_DAMAGED,
  // Approvals.
  "not-retained":
    "nothing was approved: that exact tree is not retained in this scope " +
    "(check the kind, key and digest against `oats ls`). To approve it ahead " +
    "of retention, repeat with --force.",
  "state-unsafe":
    "nothing was approved or run: another local user could change the " +
    "operator's private state (details.path, details.problem), so no " +
    "checkpoint can anchor the approvals ledger and the audit log. Do what " +
    "details.fix says, or point OATS_STATE_DIR at a private directory, then retry.",
  "never-approved":
    "nothing was revoked: that exact subject has no decision in this scope " +
    "(check it against `oats approvals`). To record the revocation anyway, " +
    "repeat with --force.",
  // Revisions.
  "exec-named-only":
    "a bare sha256-<hex> means oats.tree-legacy.v0 (the lock's digest); this " +
    "one is retained under its oats.tree-exec.v1 name: pass --integrity with " +
    "the format (details.execIntegrity).",
  "damaged-revision":
    "the revision already stored under that digest is damaged, and oats " +
    "never overwrites it; inspect it (`oats verify`, `oats fsck`), then move " +
    "it aside by hand and retry.",
};

/** Limits of an archive's extraction, each with its own --max-* flag. */
const ARCHIVE_LIMITS = new Set(["too-many-entries", "too-large", "path-too-long", "too-deep", "header-too-large"]);

/** Entry refusals of an archive: the writer refused what the archive holds. */
const ENTRY_REASONS = new Set([
  "absolute-path",
  "dot-dot",
  "outside-prefix",
  "absolute-symlink",
  "escaping-symlink",
  "hard-link",
  "special-file",
  "unsupported-entry",
  "duplicate-entry",
  "case-collision",
  "type-conflict",
  "through-symlink",
]);

/** A remedy for what failed, or null to fall back on the code's own. */
export function reasonRemedy(error: RefusalLike, command: string | null): string | null {
  if (error.code === "integrity-mismatch" && error.details["bundle"] !== undefined) {
    return (
      "an item of the bundle does not hash to what its manifest says: it was " +
      "altered or damaged in transit; nothing was imported. Export it again " +
      "from a trusted scope."
    );
  }
  const reason = error.details["reason"];
  if (typeof reason !== "string") {
    // A source given without a reason (older callers): the source remedy, not the generic one.
    return error.code === "invalid-input" && error.details["source"] !== undefined
      ? BY_REASON["source-missing"]!
      : null;
  }
  const fromArchive = error.details["archive"] !== undefined;
  if (
    command === "import" &&
    (error.details["bundle"] !== undefined || fromArchive) &&
    (reason === "corrupt-archive" || reason === "empty-archive")
  )
    return BUNDLE_DAMAGED;
  if (fromArchive && ARCHIVE_LIMITS.has(reason)) return BY_REASON["too-many-entries"]!;
  // The walk of a directory has a depth limit too; "too-deep" alone means a JSON or YAML file.
  if (reason === "too-deep" && error.code === "invalid-artifact") {
    return (
      "the tree is nested deeper than --max-depth allows (named above; default " +
      "256); nothing was retained. If that depth is meant, inspect the tree " +
      "and repeat with a larger --max-depth."
    );
  }
  if (fromArchive && ENTRY_REASONS.has(reason)) return ARCHIVE_ENTRY;
  // Verify meets the same reason; only a publisher is told it found one already there.
  if (reason === "damaged-revision" && command !== "retain" && command !== "source retain" && command !== "import")
    return null;
  if (reason === "not-a-directory" && error.details["source"] !== undefined)
    return BY_REASON["source-not-a-directory"]!;
  return Object.hasOwn(BY_REASON, reason) ? BY_REASON[reason]! : null;
}
