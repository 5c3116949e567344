import { lstatSync } from "node:fs";
import { OatsError, isOatsError } from "../../core/index.js";
import type { CommandSpec } from "../support/context.js";
import { artifactKey, kindOption, loadLibrary, receiptOutcome, type Library } from "./shared.js";

const BARE = /^sha256-[0-9a-f]{64}$/;

/**
 * A bare `sha256-<hex>` means oats.tree-legacy.v0. When that misses but the
 * same digest is retained under its oats.tree-exec.v1 name, the operator
 * almost certainly copied an exec digest without its format: say so, rather
 * than "not retained".
 */
function execNamedHint(
  library: Library,
  scope: string,
  kind: string,
  key: string,
  integrity: string,
  error: unknown,
): unknown {
  if (
    !BARE.test(integrity) ||
    !isOatsError(error) ||
    error.code !== "artifact-not-found" ||
    error.details["reason"] === "scope-missing"
  )
    return error;
  const exec = { format: library.TREE_EXEC, value: integrity } as const;
  let dir: string;
  try {
    dir = library.retainedTreeDir(scope, { kind: kind as "capability", key, integrity: exec });
    if (!lstatSync(dir).isDirectory()) return error;
  } catch {
    return error;
  }
  const text = `${library.TREE_EXEC}:${integrity}`;
  return new OatsError(
    "artifact-not-found",
    `${error.message}; a bare sha256-<hex> means ${library.TREE_LEGACY}, and this digest is retained as ${text}`,
    { ...error.details, reason: "exec-named-only", execIntegrity: text, execDir: dir },
    { cause: error },
  );
}

export const verify: CommandSpec = {
  name: "verify",
  define(command) {
    command
      .description(
        "re-hash a retained revision and compare it with its integrity (reads the store only; repairs nothing)",
      )
      .argument("<id>", "capability id, capture name, or source key / qualified identity")
      .option(
        "--integrity <integrity>",
        "the revision's integrity (F:sha256-<hex>; bare sha256-<hex> means oats.tree-legacy.v0)",
      )
      .option("--lock <file>", "oats lock v2 file naming the capability's integrity; also checks provenance")
      .addOption(kindOption("artifact kind"));
  },
  async run(context, [id], options) {
    const { parseFlags, verifyFlags } = await import("../support/flags.js");
    const flags = parseFlags(verifyFlags, options);
    const library = await loadLibrary();
    const progress = context.progress(`verify ${id}`);
    try {
      if (flags.lock !== undefined) {
        const lock = library.readLockFile(flags.lock);
        return receiptOutcome(
          await library.verifyRetainedCapability(context.scope, id!, lock, { onProgress: progress.update }),
        );
      }
      const { key, identity } = artifactKey(library, flags.kind, id!);
      try {
        return receiptOutcome(
          await library.verifyTree(
            context.scope,
            { kind: flags.kind, key, integrity: flags.integrity! },
            { onProgress: progress.update },
          ),
          identity,
        );
      } catch (error) {
        throw execNamedHint(library, context.scope, flags.kind, key, flags.integrity!, error);
      }
    } finally {
      progress.end();
    }
  },
};
