import { Option } from "commander";
import type { ArtifactReceipt } from "../../retention/index.js";
import { KIND_CHOICES } from "../support/constants.js";
import type { CommandOutcome } from "../support/context.js";
import { integrityText } from "../support/render.js";

export function kindOption(what: string): Option {
  return new Option("--kind <kind>", what).choices(KIND_CHOICES).default("capability");
}

/** The library, loaded only when a command runs (help and parse errors never need it). */
export function loadLibrary() {
  return import("../../retention/index.js");
}

export type Library = Awaited<ReturnType<typeof loadLibrary>>;

/**
 * The store key for an id. A source is keyed by the 64 hex of its qualified
 * identity's oats.json.v1 digest; a qualified identity (anything with a ':',
 * e.g. `git:https://host/org/repo#souls/a`) is converted, a 64-hex key is
 * used as given. Other kinds use the id itself.
 */
export function artifactKey(library: Library, kind: string, id: string): { key: string; identity?: string } {
  if (kind === "source" && id.includes(":")) return { key: library.sourceIdentityKey(id), identity: id };
  return { key: id };
}

const STATUS_WORDS: Record<ArtifactReceipt["status"], string> = {
  retained: "retained",
  kept: "kept (already retained; verified)",
  verified: "verified",
};

export function receiptOutcome(receipt: ArtifactReceipt, identity?: string): CommandOutcome {
  const result = identity === undefined ? receipt : { ...receipt, identity };
  const lines = [
    `${STATUS_WORDS[receipt.status]} ${receipt.kind} ${receipt.key}`,
    ...(identity === undefined ? [] : [`  identity  ${identity}`]),
    `  integrity ${integrityText(receipt.integrity)}`,
    ...(receipt.execIntegrity.value === receipt.integrity.value &&
    receipt.execIntegrity.format === receipt.integrity.format
      ? []
      : [`  exec      ${integrityText(receipt.execIntegrity)}`]),
    `  dir       ${receipt.dir}`,
    ...leftOutLines(receipt),
  ];
  return { result, lines, quietLines: [integrityText(receipt.integrity)] };
}

/** What the store does not hold of the source: its empty directories, which identity does not cover. */
export function leftOutLines(receipt: Pick<ArtifactReceipt, "leftOut">): string[] {
  const left = receipt.leftOut;
  if (!left) return [];
  const count = left.emptyDirectories;
  const more = count > left.paths.length ? [`  ... and ${count - left.paths.length} more`] : [];
  return [
    `  left out  ${count} empty director${count === 1 ? "y" : "ies"} (outside tree identity, not stored):`,
    ...left.paths.map((path) => `    ${path}/`),
    ...more,
  ];
}
