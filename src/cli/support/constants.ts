import type { RecurrencePolicy } from "../../captures/index.js";
import type { SchemaName } from "../../schemas/index.js";
import type { ArtifactKind, TreeFormat } from "../../retention/index.js";

/**
 * Choices the CLI offers, kept here (checked against the library's types at
 * compile time) so defining commands and printing help load no library code.
 */
export const KIND_CHOICES = ["capability", "source", "capture"] as const satisfies readonly ArtifactKind[];
export const TREE_FORMAT_CHOICES = [
  "oats.tree-exec.v1",
  "oats.tree-legacy.v0",
  "oats.package-payload-exec.v1",
] as const satisfies readonly TreeFormat[];
export const DEFAULT_TREE_FORMAT = "oats.tree-exec.v1" satisfies TreeFormat;
export const RECURRENCE_CHOICES = ["capture", "prepare-on-tick"] as const satisfies readonly RecurrencePolicy[];
export const SCHEMA_CHOICES = [
  "plan",
  "capture-spec",
  "capture-profile",
  "classification-config",
  "lock",
  "resolution",
  "approval-statement",
  "run-statement",
] as const satisfies readonly SchemaName[];
export const COMMAND_NAMES = [
  "retain",
  "verify",
  "path",
  "digest",
  "ls",
  "fsck",
  "cleanup",
  "dedupe",
  "prepare",
  "resolution show",
  "resolution verify",
  "resolution ls",
  "instance show",
  "reconstruct",
  "capture prepare",
  "approve",
  "revoke",
  "approvals",
  "queue add",
  "queue ls",
  "dispatch",
  "audit show",
  "audit verify",
  "audit head",
  "export",
  "import",
  "source retain",
  "schema",
  "completion",
  "gc",
  "pin",
  "unpin",
  "pins",
  "repair",
  "run ls",
  "run show",
  "run verify",
  "run cancel",
  "run seal",
  "push",
  "pull",
  "outbox ls",
  "doctor",
  "key generate",
  "key show",
  "trust add",
  "trust ls",
  "trust rm",
  "attestation ls",
  "attestation verify",
] as const;
