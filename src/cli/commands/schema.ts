import { Argument } from "commander";
import { SCHEMA_CHOICES } from "../support/constants.js";
import type { CommandSpec } from "../support/context.js";

export const schema: CommandSpec = {
  name: "schema",
  define(command) {
    command
      .description(
        "print the JSON Schema of a documented format (generated from the schema " +
          "that reads it; see docs/design/formats.md)",
      )
      .addArgument(new Argument("<name>", "the format").choices(SCHEMA_CHOICES));
  },
  async run(_context, [name]) {
    // commander's .choices() already refused an unknown name (usage, exit 2).
    const { formatJsonSchema, formatJsonSchemaText, isSchemaName } = await import("../../schemas/json-schema.js");
    if (!isSchemaName(name)) throw new Error(`unreachable: ${String(name)} passed the choices`);
    const text = formatJsonSchemaText(name);
    return { result: { name, schema: formatJsonSchema(name) }, lines: [text.trimEnd()], quietLines: [text.trimEnd()] };
  },
};
