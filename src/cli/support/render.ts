import type { ApprovalSubject } from "../../captures/index.js";
import type { OatsError } from "../../core/index.js";
import { reasonRemedy } from "./remedies.js";

/** `capture nightly oats.tree-exec.v1:sha256-…`: the three operands `oats approve` takes, in order. */
export function subjectText(subject: Pick<ApprovalSubject, "kind" | "key" | "integrity">): string {
  return `${subject.kind} ${subject.key} ${subject.integrity}`;
}

/** The command line that approves exactly this subject (kind, key and integrity are shell-safe by their grammar). */
export function approveCommand(subject: Pick<ApprovalSubject, "kind" | "key" | "integrity">): string {
  return `oats approve ${subjectText(subject)} --reason "<why>"`;
}

/** Human-mode rendering: short result lines on stdout, `oats: <code>: <message>` and one remedy line on stderr. */

export interface IntegrityLike {
  readonly format: string;
  readonly value: string;
}

export function integrityText(integrity: IntegrityLike): string {
  return `${integrity.format}:${integrity.value}`;
}

const REMEDIES: Record<string, string> = {
  "artifact-not-found":
    "nothing is retained under that id and integrity in this scope; check " +
    "--scope, --kind and the integrity, or retain the artifact first.",
  "resolution-not-found":
    "no such resolution record (or instance reference) in this scope; check " +
    "--scope and the id or instance name (`oats resolution ls` lists the records).",
  "blob-not-found": "no such pinned blob in this scope; check --scope and the digest.",
  "job-not-found": "no such queued job in this scope; check --scope and the job id (`oats queue ls` lists the jobs).",
  "run-not-found":
    "no run with that handle or id (or prefix) in this scope; check --scope, and `oats run ls` lists the runs.",
  "approval-required":
    "nothing ran: the executable's exact digest is not approved (or its " +
    "approval was revoked). Inspect it, then approve that exact digest with " +
    "`oats approve <kind> <key> <integrity> --reason <why>`.",
  "classification-refused":
    "nothing ran: the capture's effective classification does not allow this " +
    "principal (or the current classification config is unusable). Dispatch " +
    "as a principal the config names sovereign, or fix the config named " +
    "above; a declared level never loosens a derived one.",
  "audit-unavailable":
    "nothing ran: the audit log could not be written, and an unaudited " +
    "action is refused. Make <scope>/.agents/audit writable (and its last " +
    "line intact), then retry.",
  "invalid-artifact-reference":
    "ids match ^[a-z0-9][a-z0-9._-]*$ (at most 214 characters), source keys " +
    "are 64 lowercase hex, and integrities are full F:sha256-<64 lowercase " +
    "hex>; correct the argument and retry.",
  "invalid-artifact-store":
    "a store directory under <scope>/.agents is missing, not a directory, a " +
    "symlink, or has a foreign .gitignore; inspect it by hand, oats will not " +
    "write through it.",
  "invalid-artifact": "the path named above is not a tree oats can retain or verify; inspect it by hand.",
  "artifact-not-contained": "a computed path would leave its store; use a plain identifier.",
  "invalid-lock":
    "fix the lock file (oats lock v2: lockfileVersion 2, packages, " +
    "capabilities) or point --lock at the lock the capability was installed from.",
  "invalid-resolution":
    "the resolution record (or plan) is malformed, not canonical, or not a " +
    "regular file; it was not used and was left as it is. Prepare the " +
    "instance again from its plan rather than editing a record by hand.",
  "resolution-incomplete":
    "the record is partial or unknown: the inputs listed in " +
    "details.unresolved could not be established. Settle them and run `oats " +
    "prepare` with a complete plan; a partial record is never run.",
  "secret-in-record":
    "a secret literal was found at the pointer named above; nothing was " +
    "written. Replace it with a credential reference ({kind: env, name} or " +
    "{kind: provider, provider, key}) in the plan.",
  "invalid-input":
    "the input named above was refused as it is, and nothing was changed; " +
    "correct it and retry (`oats <command> --help` lists the arguments).",
  "integrity-mismatch":
    "the stored revision is damaged or the expected digest is wrong; it was " +
    "not repaired. `oats repair <kind>:<key>@<integrity> --from <trusted copy>` " +
    "puts back bytes that verify against the revision's own digest and quarantines " +
    "the damaged tree (`oats repair --help`); or check the expected digest.",
  "provenance-mismatch":
    "the tree's .oats-installation.json does not match the lock's rows; " +
    "reinstall the capability from its locked source, or use the lock it was " +
    "installed from.",
  "registry-refused":
    "nothing was published: the registry was refused or could not be used (details.reason: insecure-remote, tls, unreachable, connection-lost, redirect-other-host, auth-realm, unauthorized, protocol). Use https:// registries with a certificate the system trusts (plain HTTP only on loopback), check credentials (OATS_REGISTRY_USER/OATS_REGISTRY_PASSWORD or the Docker/Podman auth file), then retry; see docs/design/fleet.md (Transport, auth and trust boundary).",
  "attestation-refused":
    "the signed attestation was not believed and nothing was accepted under it " +
    "(details.reason: signature-invalid, key-not-trusted, trust-removed, trust-unknown, " +
    "subject-mismatch, subject-not-held, predicate-type, statement-invalid, too-large). " +
    "Check which key signed it (`oats attestation ls`) and what this host trusts " +
    "(`oats trust ls`); see docs/design/attestations.md.",
  busy: "another oats process holds the store lock; wait for it to finish and retry.",
  "evidence-incomplete":
    "the run is intact (nothing was edited), but it lacks evidence its " +
    "profile requires (details.gaps): treat its result as unproven. A run " +
    "sealed by `oats run seal` has no exit status; run the capture again to " +
    "get complete evidence.",
  "internal-error": "an unexpected failure; nothing was published. Retry, and report the message above if it persists.",
};

const REFUSED = "the request was refused by policy; the details say what is required before it can proceed.";

/** One line telling the user what to do about a refusal. */
export function remedy(
  error: Pick<OatsError, "code" | "kind" | "details"> & { readonly message?: string },
  command: string | null,
): string {
  if (error.code === "usage")
    return command
      ? `run \`oats ${command} --help\` for its usage.`
      : "run `oats --help` for the commands and options.";
  if (command === "fsck" && error.details["report"] !== undefined) {
    return (
      "fsck repaired nothing. The findings above name each damaged, dangling " +
      "or unreadable thing by class and path; inspect them, keep copies as " +
      "evidence, and re-create what is damaged from a trusted source " +
      "(docs/design/fsck.md)."
    );
  }
  const byReason = reasonRemedy(error, command);
  if (byReason !== null) return byReason;
  if (error.code === "integrity-mismatch") {
    const reason = error.details["reason"];
    if (reason === "source-differs") {
      return (
        "the source tree is not the one the lock or --expect names; nothing was " +
        "retained. Check the integrity, or re-materialize the source from a " +
        "trusted origin."
      );
    }
    if (reason === "staged-copy-differs") {
      return "the staged copy changed after it was written; nothing was published. Check the disk and retry.";
    }
  }
  if (
    error.code === "integrity-mismatch" &&
    error.details["id"] !== undefined &&
    error.details["expected"] === error.details["id"]
  ) {
    return (
      "the resolution record's bytes no longer hash to its id: it is damaged " +
      "and was not used or repaired. Prepare the instance again from its plan; " +
      "inspect the file by hand before removing it."
    );
  }
  if (error.code === "approval-required") {
    const subject = error.details["subject"] as { kind?: unknown; key?: unknown; integrity?: unknown } | undefined;
    if (
      subject &&
      typeof subject.kind === "string" &&
      typeof subject.key === "string" &&
      typeof subject.integrity === "string"
    ) {
      const what = subject.kind === "composition" ? "this exact composition" : "this exact digest";
      return (
        `nothing ran: ${what} is not approved (or its approval was revoked). ` +
        `Inspect ` +
        `it${subject.kind === "composition" ? " (`oats capture prepare` printed it)" : ""}, ` +
        `then approve it with ` +
        `\`${approveCommand(subject as ApprovalSubject)}\`.`
      );
    }
  }
  if (
    error.code === "audit-unavailable" &&
    (error.details["ledger"] as { recorded?: unknown } | undefined)?.recorded === true
  ) {
    return (
      "the decision was recorded in the approvals ledger (details.ledger) but " +
      "could not be audited; make <scope>/.agents/audit writable (and its last " +
      "line intact). Do not repeat the decision."
    );
  }
  if (error.code === "integrity-mismatch" && error.details["crossCheck"] !== undefined) {
    return (
      "nothing ran: the approvals ledger and the audit log disagree about this " +
      "subject's latest decision (details.ledger and details.audit name both " +
      "sides), so one was edited or a decision was interrupted between its two " +
      "writes. Keep both logs as evidence and compare them (`oats approvals`, " +
      "`oats audit show`); once understood, decide again with `oats approve` " +
      "or `oats revoke`, which writes a new decision to both logs."
    );
  }
  if (error.code === "integrity-mismatch" && error.details["expectHead"] !== undefined) {
    return (
      "the log no longer contains the head you remembered: entries were " +
      "removed from its end or it was rewritten. Keep it as evidence and " +
      "restore it from a copy you trust; oats never repairs it."
    );
  }
  if (error.code === "integrity-mismatch" && error.details["checkpoint"] !== undefined) {
    return (
      "bytes of this log that oats had already verified have changed, or the " +
      "log was truncated or removed. Nothing ran. Keep it as evidence and " +
      "restore it from a copy you trust; only after that, and only if you " +
      "accept the log as it is now, remove the checkpoint file for it under " +
      "details.stateDir."
    );
  }
  if (error.code === "integrity-mismatch" && error.details["brokenAt"] !== undefined) {
    return (
      "the hash-chained log was edited or damaged from the line named above " +
      "on; oats never repairs it. Keep a copy as evidence and inspect it by " +
      "hand (`oats audit verify` checks the audit log)."
    );
  }
  if (
    error.code === "invalid-input" &&
    (error.details["spec"] !== undefined || /^capture spec\b/.test(error.message ?? ""))
  ) {
    return (
      "the capture spec is not valid (name, executable {tree | capability, " +
      "path, args}, target, classification, classificationConfig, profile, " +
      "env, credentials; YAML or JSON); fix the field named above and retry. " +
      "Nothing was pinned."
    );
  }
  if (
    error.code === "invalid-input" &&
    (error.details["config"] !== undefined || error.details["profile"] !== undefined)
  ) {
    return (
      "the classification config or capture profile named above is not valid " +
      "(YAML, schemaVersion 1, only the documented fields); fix it and retry. " +
      "Nothing was pinned."
    );
  }
  if (error.code === "invalid-input" && error.details["reason"] === "job-exists") {
    return (
      "that job id is already queued for another resolution; pass --replace to " +
      "re-point it, or choose another --job."
    );
  }
  if (
    error.code === "invalid-input" &&
    error.details["resolution"] !== undefined &&
    error.details["kind"] !== undefined
  ) {
    return "only a capture resolution can be queued; pass the id `oats capture prepare` printed.";
  }
  if (error.code === "invalid-artifact-reference" && error.details["expectedFormat"] !== undefined) {
    return (
      "an approval binds to one exact oats.tree-exec.v1 digest (legacy and " +
      "package-payload digests do not cover the whole executable tree); copy " +
      "the one `oats capture prepare` printed."
    );
  }
  if (error.code === "invalid-input" && (error.details["job"] !== undefined || /^job\b/.test(error.message ?? ""))) {
    return "a job id matches ^[a-z0-9][a-z0-9._-]*$ (at most 214 characters); correct the argument and retry.";
  }
  if (error.code === "invalid-input" && (error.details["plan"] !== undefined || /^plan\b/.test(error.message ?? ""))) {
    return (
      "the plan file is not a valid plan (schemaVersion 1, instance, " +
      "capabilities, entrypoints, ...; YAML or JSON); fix the field named " +
      "above and retry. Nothing was retained or written."
    );
  }
  if (error.code === "invalid-input" && error.details["id"] !== undefined && error.details["path"] === undefined) {
    return (
      "a resolution id is sha256-<64 lowercase hex> (as `oats prepare` and " +
      "`oats resolution ls` print it); correct the argument and retry."
    );
  }
  if (
    error.code === "invalid-input" &&
    error.details["instance"] !== undefined &&
    error.details["path"] === undefined
  ) {
    return "an instance name matches ^[a-z0-9][a-z0-9._-]*$ (at most 214 characters); correct the argument and retry.";
  }
  if (
    error.code === "artifact-not-found" &&
    error.details["host"] !== undefined &&
    error.details["repository"] !== undefined
  ) {
    return (
      "the registry named above has no such tag or digest in that repository; check the reference " +
      "(<registry>/<repository>:<tag> or @sha256:<digest>) and that it was pushed there (`oats push --help`; " +
      "docs/design/fleet.md)."
    );
  }
  if (
    error.code === "artifact-not-found" &&
    error.details["key"] === undefined &&
    error.details["path"] !== undefined
  ) {
    return "the directory named above does not exist; check the path.";
  }
  if (error.code === "invalid-artifact-store" && error.details["scope"] !== undefined) {
    return "pass --scope (or set OATS_SCOPE to) an existing deployment directory; oats never creates the scope itself.";
  }
  if (error.details["reason"] === "changed-while-reading") {
    return "a file changed while it was read; nothing was hashed half-old. Retry once nothing is writing to the tree.";
  }
  return REMEDIES[error.code] ?? (error.kind === "refused" ? REFUSED : REMEDIES["internal-error"]!);
}

/**
 * The stderr lines of a human-mode error: `oats: <code>: <message>`, the
 * remedy, then, when validation found more than one problem, each of them
 * (`details.issues`, as --json lists them) on its own indented line.
 */
export function humanError(
  error: Pick<OatsError, "code" | "kind" | "message" | "details">,
  command: string | null,
): string {
  const oneLine = (text: string) => text.replace(/\s*\n\s*/g, " ").trim();
  const issues = Array.isArray(error.details["issues"]) ? (error.details["issues"] as unknown[]) : [];
  const problems =
    issues.length > 1
      ? issues.map((issue) => {
          const { pointer, path, message } = (issue ?? {}) as { pointer?: unknown; path?: unknown; message?: unknown };
          const at =
            typeof pointer === "string"
              ? `${pointer}: `
              : Array.isArray(path) && path.length > 0
                ? `${path.join(".")}: `
                : "";
          return `  ${at}${oneLine(typeof message === "string" ? message : JSON.stringify(issue))}\n`;
        })
      : [];
  const differing = differenceLines(error.details).map((line) => `${line}\n`);
  const head = `oats: ${error.code}: ${oneLine(error.message)}\n${remedy(error, command)}\n`;
  return `${head}${problems.join("")}${differing.join("")}`;
}

/**
 * Every differing path of a damaged revision that the refusal lists (`details.differences`, capped), one indented
 * line each with its change, and a count of those not listed; nothing when there is only the one the message names.
 */
export function differenceLines(details: Record<string, unknown>): string[] {
  const listed = Array.isArray(details["differences"])
    ? (details["differences"] as { path?: unknown; change?: unknown }[])
    : [];
  const total = typeof details["differenceCount"] === "number" ? details["differenceCount"] : listed.length;
  if (total <= 1) return [];
  const lines = listed.map((row) => `  ${String(row.change).padEnd(14)} ${String(row.path)}`);
  if (total > listed.length) lines.push(`  ... and ${total - listed.length} more differing paths not listed`);
  return lines;
}
