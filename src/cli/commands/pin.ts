import type { CommandSpec } from "../support/context.js";
import { loadLifecycleLibrary } from "./lifecycle-shared.js";

const REF_HELP =
  "an artifact <kind>:<key>@<integrity> (e.g. " +
  "capability:demo.hello@oats.tree-exec.v1:sha256-...) or a resolution id " +
  "sha256-<64 hex>";

export const pinCommand: CommandSpec = {
  name: "pin",
  define(command) {
    command
      .description("keep a retained revision or a resolution (and all it references) from gc until it is unpinned")
      .argument("<ref>", REF_HELP);
  },
  async run(context, operands) {
    const library = await loadLifecycleLibrary();
    const result = await library.pin(context.scope, operands[0]!);
    return {
      result,
      lines: [`${result.status === "kept" ? "already pinned" : "pinned"} ${result.text}`],
      quietLines: [result.text],
    };
  },
};

export const unpinCommand: CommandSpec = {
  name: "unpin",
  define(command) {
    command
      .description("remove a pin; what it kept is collected by a later gc unless another root reaches it")
      .argument("<ref>", REF_HELP);
  },
  async run(context, operands) {
    const library = await loadLifecycleLibrary();
    const result = await library.unpin(context.scope, operands[0]!);
    return { result, lines: [`unpinned ${result.text}`], quietLines: [result.text] };
  },
};

export const pinsCommand: CommandSpec = {
  name: "pins",
  define(command) {
    command.description("list the pins of the scope");
  },
  async run(context) {
    const library = await loadLifecycleLibrary();
    const pins = library.listPins(context.scope);
    const lines = pins.map((pin) => `${library.pinRefText(pin.ref)}  pinned at ${pin.pinnedAt}`);
    return {
      result: { scope: context.scope, pins },
      lines: lines.length ? lines : [`no pins in ${context.scope}`],
      quietLines: pins.map((pin) => library.pinRefText(pin.ref)),
    };
  },
};
