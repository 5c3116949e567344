/**
 * docs/design/resolution.schema.json is generated from resolutionRecordSchema
 * (npm run schema). These tests regenerate it in memory and fail when the
 * committed file is stale, and check with a tiny structural validator (no
 * dependency) that the schema accepts a real record and refuses one with a
 * key missing, an extra key or a wrong enum value.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { join } from "node:path";
import { formatJsonSchemaText } from "../src/schemas/json-schema.js";
import { REPO } from "./helpers.js";
import { violation, type Schema } from "./schema-validator.js";
import { resolutionRecordSchema } from "../src/resolution/index.js";

const SCHEMA_FILE = join(REPO, "docs/design/resolution.schema.json");
const resolutionJsonSchemaText = () => formatJsonSchemaText("resolution");

const INTEGRITY = { format: "oats.tree-exec.v1", value: `sha256-${"ab".repeat(32)}` };
const ARTIFACT = { kind: "capability", key: "demo.hello", integrity: INTEGRITY };

function sampleRecord(): Record<string, any> {
  return {
    schemaVersion: 1,
    kind: "instance",
    status: "complete",
    subject: { instance: "alpha" },
    source: null,
    artifacts: {
      "demo.hello": {
        artifact: ARTIFACT,
        package: {
          id: "demo.hello",
          source: "git:https://example.invalid/hello#",
          version: "1.0.0",
          commit: "a".repeat(40),
          integrity: null,
        },
        legacyIntegrity: null,
      },
    },
    config: {
      "/settings/demo.hello/greeting": {
        value: { text: "hi", repeat: [1, 2, null, true] },
        origin: { kind: "operator", ref: "plan.yaml" },
        constraints: [{ kind: "pattern", value: "^h", origin: { kind: "soul-requirement", ref: "soul.yaml" } }],
        considered: [{ value: "hello", origin: { kind: "soul-default", ref: "soul.yaml" } }],
      },
    },
    bindings: {
      chat: {
        capability: "demo.hello",
        payload: { channel: "#general" },
        credentialRefs: [{ kind: "env", name: "CHAT_TOKEN" }],
      },
    },
    messaging: { responsible: { kind: "human", key: "ops" }, teams: ["core"] },
    entrypoints: { hello: { artifact: ARTIFACT, path: "bin/hello", args: ["--greet"], role: "command" } },
    capture: null,
    evidence: [],
    unresolved: [],
  };
}

describe("docs/design/resolution.schema.json", () => {
  test("is what `npm run schema` generates now (fails when stale)", () => {
    const committed = readFileSync(SCHEMA_FILE, "utf8");
    assert.equal(
      committed,
      resolutionJsonSchemaText(),
      "docs/design/resolution.schema.json is stale: run `npm run schema` and commit it",
    );
  });

  test("is stable: generating twice gives the same bytes", () => {
    assert.equal(resolutionJsonSchemaText(), resolutionJsonSchemaText());
  });

  test("accepts a record the zod schema accepts", () => {
    const schema = JSON.parse(readFileSync(SCHEMA_FILE, "utf8")) as Schema;
    const record = sampleRecord();
    assert.equal(resolutionRecordSchema.safeParse(record).success, true, "the sample is a valid record");
    assert.equal(violation(schema, record, schema), null);
  });

  test("requires every top-level key of a record and forbids others", () => {
    const schema = JSON.parse(readFileSync(SCHEMA_FILE, "utf8")) as Schema;
    const keys = Object.keys(sampleRecord());
    assert.deepEqual([...(schema["required"] as string[])].sort(), [...keys].sort());
    assert.equal(schema["additionalProperties"], false);
    for (const key of keys) {
      const record = sampleRecord();
      delete record[key];
      assert.equal(violation(schema, record, schema), `/${key}: required`, `missing ${key}`);
    }
    assert.equal(violation(schema, { ...sampleRecord(), extra: 1 }, schema), "/extra: not allowed");
  });

  test(
    "refuses nested shapes: a wrong status, a legacy integrity on an " +
      "artifact, a credential value, a non-pointer config key",
    () => {
      const schema = JSON.parse(readFileSync(SCHEMA_FILE, "utf8")) as Schema;
      const bad = (change: (record: Record<string, any>) => void) => {
        const record = sampleRecord();
        change(record);
        return violation(schema, record, schema);
      };
      assert.match(bad((r) => (r["status"] = "done")) ?? "", /^\/status/);
      assert.notEqual(
        bad(
          (r) =>
            (r["artifacts"]["demo.hello"].artifact.integrity = {
              format: "oats.tree-legacy.v0",
              value: INTEGRITY.value,
            }),
        ),
        null,
      );
      assert.notEqual(
        bad((r) => (r["bindings"]["chat"].credentialRefs = [{ kind: "env", name: "CHAT_TOKEN", value: "s3cr3t" }])),
        null,
      );
      assert.notEqual(
        bad((r) => (r["config"] = { "settings/x": r["config"]["/settings/demo.hello/greeting"] })),
        null,
      );
    },
  );
});
