/**
 * The documented formats (docs/design/formats.md): each JSON Schema in
 * docs/design/<name>.schema.json is what the zod schema generates now (a
 * stale file fails), `oats schema <name>` prints exactly that file, and each
 * complete example in formats.md is read by the real reader and accepted by
 * its JSON Schema; the same example with a required key removed is refused
 * by both.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { parse as parseYaml } from "yaml";
import { SCHEMA_NAMES, formatJsonSchemaText, schemaFileName, type SchemaName } from "../src/schemas/json-schema.js";
import {
  OatsError,
  classificationGate,
  parseClassificationConfig,
  readCaptureProfileFile,
  readCaptureSpecFile,
  readLockFile,
  readPlanFile,
} from "../src/index.js";
import { REPO, runOats, tempDir } from "./helpers.js";
import { violation, type Schema } from "./schema-validator.js";
import { refusal } from "./support/refusals.js";

const DESIGN = join(REPO, "docs/design");
const schemaOf = (name: SchemaName): Schema => JSON.parse(readFileSync(join(DESIGN, schemaFileName(name)), "utf8"));

/** The fenced block that follows `<!-- example: NAME -->` in formats.md. */
function example(name: string): { text: string; language: string } {
  const doc = readFileSync(join(DESIGN, "formats.md"), "utf8");
  const match = new RegExp(`<!-- example: ${name} -->\\n\`\`\`(\\w+)\\n([\\s\\S]*?)\\n\`\`\`\\n`).exec(doc);
  assert.ok(match, `formats.md has an example for ${name}`);
  return { language: match[1]!, text: `${match[2]}\n` };
}

/** Each documented format: how its real reader reads the example, and a key the reader requires. */
const READERS: Record<
  Exclude<SchemaName, "resolution" | "approval-statement" | "run-statement">,
  { file: string; read: (path: string) => unknown; required: string }
> = {
  plan: { file: "plan.yaml", read: (path) => readPlanFile(path), required: "instance" },
  "capture-spec": { file: "spec.yaml", read: (path) => readCaptureSpecFile(path), required: "name" },
  "capture-profile": { file: "profile.yaml", read: (path) => readCaptureProfileFile(path), required: "schemaVersion" },
  "classification-config": {
    file: "classification.yaml",
    read: (path) => parseClassificationConfig(readFileSync(path)),
    required: "schemaVersion",
  },
  lock: { file: "oats-lock.json", read: (path) => readLockFile(path), required: "lockfileVersion" },
};

describe("documented formats: JSON Schemas", () => {
  for (const name of SCHEMA_NAMES) {
    test(`docs/design/${schemaFileName(name)} is what \`npm run schema\` generates now (fails when stale)`, () => {
      assert.equal(
        readFileSync(join(DESIGN, schemaFileName(name)), "utf8"),
        formatJsonSchemaText(name),
        `${schemaFileName(name)} is stale: run \`npm run schema\` and commit it`,
      );
    });
  }

  test("`oats schema <name>` prints the committed schema; --json carries it in the result", () => {
    for (const name of SCHEMA_NAMES) {
      const committed = readFileSync(join(DESIGN, schemaFileName(name)), "utf8");
      const human = runOats(["schema", name]);
      assert.equal(human.status, 0, human.stderr);
      assert.equal(human.stdout, committed, name);
      const json = runOats(["--json", "schema", name]);
      assert.equal(json.status, 0, json.stderr);
      const envelope = JSON.parse(json.stdout);
      assert.equal(envelope.command, "schema");
      assert.deepEqual(envelope.result, { name, schema: JSON.parse(committed) });
    }
  });

  test("`oats schema` of an unknown name is a usage error (exit 2) listing the names", () => {
    const run = runOats(["--json", "schema", "plans"]);
    assert.equal(run.status, 2);
    const envelope = JSON.parse(run.stdout);
    assert.equal(envelope.error.code, "usage");
    for (const name of SCHEMA_NAMES) assert.match(envelope.error.message, new RegExp(name));
  });
});

describe("documented formats: the examples in formats.md", () => {
  for (const [name, reader] of Object.entries(READERS) as [
    Exclude<SchemaName, "resolution" | "approval-statement" | "run-statement">,
    (typeof READERS)[keyof typeof READERS],
  ][]) {
    test(
      `the ${name} example is read by its real reader and accepted by its JSON ` +
        `Schema; without ${reader.required} both refuse it`,
      () => {
        const { text, language } = example(name);
        const value = language === "json" ? JSON.parse(text) : parseYaml(text);
        const dir = tempDir("oats-formats-");
        const path = join(dir, reader.file);
        writeFileSync(path, text);
        assert.doesNotThrow(() => reader.read(path), `the ${name} example reads`);
        const schema = schemaOf(name);
        assert.equal(violation(schema, value, schema), null);

        const broken = { ...value };
        delete broken[reader.required];
        writeFileSync(path, language === "json" ? JSON.stringify(broken) : JSON.stringify(broken));
        assert.throws(
          () => reader.read(path),
          (error: unknown) => error instanceof OatsError && error.kind === "invalid",
        );
        assert.equal(violation(schema, broken, schema), `/${reader.required}: required`);
      },
    );
  }

  test(
    "the classification example's principals: the sovereign one may dispatch " +
      "a confidential capture, the non-sovereign and unlisted ones may not",
    () => {
      const config = parseClassificationConfig(Buffer.from(example("classification-config").text));
      assert.deepEqual(classificationGate({ effective: "confidential", principal: "oats-runner@build-01", config }), {
        allowed: true,
      });
      for (const principal of ["alice@laptop-7", "mallory@build-01"]) {
        assert.throws(
          () => classificationGate({ effective: "confidential", principal, config }),
          refusal("classification-refused"),
        );
      }
      assert.deepEqual(classificationGate({ effective: "internal", principal: "mallory@build-01", config }), {
        allowed: true,
      });
    },
  );
});
