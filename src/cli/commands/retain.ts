import { statSync } from "node:fs";
import type { ArtifactReceipt } from "../../retention/index.js";
import type { CommandOutcome, CommandSpec } from "../support/context.js";
import { archiveOnlyLimits, defineLimitFlags, takeLimitFlags } from "../support/limit-flags.js";
import { loadLifecycleLibrary } from "./lifecycle-shared.js";
import { artifactKey, kindOption, loadLibrary, receiptOutcome } from "./shared.js";

/** A regular file operand is a package tarball; anything else goes to the directory retain (which reports what it
 * is). */
function isRegularFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

export const retain: CommandSpec = {
  name: "retain",
  define(command) {
    command
      .description(
        "copy a tree (a directory, or an npm-style package tarball) into the " +
          "store under its full digest, verified before it becomes visible",
      )
      .argument(
        "<dir|tarball>",
        "the tree to retain, or a package tarball (.tgz with entries under package/) to extract safely and retain",
      )
      .requiredOption(
        "--id <id>",
        "capability id, capture name, or for --kind source a 64-hex key or qualified identity (git:..., path:...)",
      )
      .addOption(kindOption("artifact kind"))
      .option(
        "--lock <file>",
        "oats lock v2 file: retain the capability at its locked integrity and check its provenance",
      )
      .option("--expect <integrity>", "the oats.tree-exec.v1 integrity the tree must have (F:sha256-<hex>)")
      .option("--no-pin", "do not pin the revision: gc may collect it once nothing else keeps it and its grace passes")
      .option(
        "--tarball-integrity <sri>",
        "tarball only: the SRI the tarball bytes must have (sha512-..., as in " +
          "package-lock.json), checked before extraction",
      );
    defineLimitFlags(command);
  },
  async run(context, [operand], options) {
    const { parseFlags, retainFlags } = await import("../support/flags.js");
    const { usageError } = await import("../support/envelope.js");
    const { limits, rest: withoutLimits } = takeLimitFlags(options);
    const { tarballIntegrity, pin: pinFlag, ...rest } = withoutLimits;
    const flags = parseFlags(retainFlags, rest);
    const tarball = isRegularFile(operand!);
    if (tarballIntegrity !== undefined && !tarball) {
      throw usageError(`--tarball-integrity applies to a package tarball, and ${operand} is not a regular file`, {
        operand,
      });
    }
    const archiveOnly = archiveOnlyLimits(limits);
    if (archiveOnly.length > 0 && !tarball)
      throw usageError(`${archiveOnly.join(", ")} applies to a package tarball, and ${operand} is not a regular file`, {
        operand,
      });
    const library = await loadLibrary();
    const progress = context.progress(`retain ${flags.id}`);
    const watch = { onProgress: progress.update, signal: context.interruptSignal() };
    const retainOptions = { ...watch, ...(limits.maxDepth === undefined ? {} : { maxDepth: limits.maxDepth }) };
    let retained: { outcome: CommandOutcome; receipt: ArtifactReceipt };
    try {
      retained = await retainOperand();
    } finally {
      progress.end();
    }
    if (pinFlag === false) return { ...retained.outcome, result: { ...resultOf(retained.outcome), pinned: false } };
    const { receipt } = retained;
    const pinned = await (await loadLifecycleLibrary()).pin(
      context.scope,
      `${receipt.kind}:${receipt.key}@${receipt.integrity.format}:${receipt.integrity.value}`,
    );
    return {
      ...retained.outcome,
      result: { ...resultOf(retained.outcome), pinned: true },
      lines: [...retained.outcome.lines, `  pinned    ${pinned.text} (oats unpin lets gc collect it)`],
    };

    async function retainOperand(): Promise<{ outcome: CommandOutcome; receipt: ArtifactReceipt }> {
      if (tarball) {
        const { retainTarball } = await import("../../acquisition/tarball.js");
        const extra = tarballIntegrity === undefined ? {} : { tarballIntegrity: tarballIntegrity as string };
        const { key, identity } =
          flags.lock === undefined
            ? artifactKey(library, flags.kind, flags.id)
            : { key: flags.id, identity: undefined };
        const request =
          flags.lock !== undefined
            ? { id: flags.id, lock: library.readLockFile(flags.lock), ...extra, limits }
            : {
                kind: flags.kind,
                key,
                ...(flags.expect === undefined ? {} : { expect: flags.expect }),
                ...extra,
                limits,
              };
        const receipt = await retainTarball(context.scope, operand!, request, watch);
        if (identity !== undefined) library.pinSourceIdentity(context.scope, identity);
        const outcome = receiptOutcome(receipt, identity);
        return {
          outcome: { ...outcome, lines: [...outcome.lines, `  tarball   ${receipt.tarballIntegrity}`] },
          receipt,
        };
      }
      if (flags.lock !== undefined) {
        const lock = library.readLockFile(flags.lock);
        const receipt = await library.retainCapabilityArtifact(context.scope, operand!, flags.id, lock, retainOptions);
        return { outcome: receiptOutcome(receipt), receipt };
      }
      const { key, identity } = artifactKey(library, flags.kind, flags.id);
      const receipt = await library.retainTree(
        context.scope,
        { kind: flags.kind, key, source: operand!, ...(flags.expect === undefined ? {} : { expect: flags.expect }) },
        retainOptions,
      );
      // So `oats ls` can show the identity, not only its key.
      if (identity !== undefined) library.pinSourceIdentity(context.scope, identity);
      return { outcome: receiptOutcome(receipt, identity), receipt };
    }
  },
};

function resultOf(outcome: CommandOutcome): Record<string, unknown> {
  return outcome.result as Record<string, unknown>;
}
