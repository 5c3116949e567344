import type { CommandSpec } from "../support/context.js";
import { approveCommand, derivedText, loadCapturesLibrary } from "./captures-shared.js";

export const capturePrepare: CommandSpec = {
  name: "capture prepare",
  define(command) {
    command
      .description(
        "pin a capture: retain its executable tree, pin its classification " +
          "config, profile and spec, and write its resolution record (approval is " +
          "a separate step)",
      )
      .argument("<spec>", "capture spec (.yaml, .yml or .json); relative paths in it resolve against its directory");
  },
  async run(context, [specFile]) {
    const library = await loadCapturesLibrary();
    const progress = context.progress(`capture prepare ${specFile}`);
    let prepared: Awaited<ReturnType<typeof library.prepareCapture>>;
    try {
      prepared = await library.prepareCapture(context.scope, specFile!, { onProgress: progress.update });
    } finally {
      progress.end();
    }
    const { classification, subject, composition } = prepared;
    const capture = prepared.record.capture!;
    const warnings = classification.mismatch
      ? [
          `capture ${capture.name}: declared level ${classification.declared} ` +
            `differs from the level the classification config derives, ` +
            `${classification.derived.level}; effective ${classification.effective} ` +
            `(audited as a security event)`,
        ]
      : [];
    return {
      result: {
        id: prepared.id,
        status: prepared.status,
        capture: capture.name,
        subject,
        composition: { subject: composition.subject, value: composition.value },
        approve: approveCommand(composition.subject),
        classification,
        blobs: prepared.blobs,
        retained: prepared.retained,
        record: prepared.record,
      },
      lines: [
        `${prepared.status === "kept" ? "kept (already recorded)" : "prepared"} ` +
          `capture ${capture.name}: resolution ${prepared.id}`,
        `  levels     declared ${classification.declared}, derived ` +
          `${derivedText(classification.derived)}, effective ${classification.effective}`,
        `  composition ${composition.subject.integrity} (what an approval covers):`,
        ...library.compositionSummary(composition.value).map((line) => `    ${line}`),
        `  approve    ${approveCommand(composition.subject)}`,
      ],
      quietLines: [prepared.id],
      warnings,
    };
  },
};
