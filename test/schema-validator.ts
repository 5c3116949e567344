/** A tiny structural validator for the generated JSON Schemas (no dependency): the subset of JSON Schema 2020-12 they
 * use. */
import assert from "node:assert/strict";

export type Schema = Record<string, any>;

/** The subset of JSON Schema 2020-12 the generated file uses; returns the first violation's pointer, or null. */
export function violation(schema: Schema, value: unknown, root: Schema, at = ""): string | null {
  if (schema["$ref"]) {
    const name = String(schema["$ref"]).replace(/^#\/\$defs\//, "");
    assert.ok(root["$defs"]?.[name], `unresolved $ref ${schema["$ref"]}`);
    return violation(root["$defs"][name], value, root, at);
  }
  if (schema["anyOf"])
    return (schema["anyOf"] as Schema[]).some((each) => violation(each, value, root, at) === null)
      ? null
      : `${at}: no anyOf branch`;
  if ("const" in schema && value !== schema["const"]) return `${at}: not ${JSON.stringify(schema["const"])}`;
  if (schema["enum"] && !(schema["enum"] as unknown[]).includes(value)) return `${at}: not in enum`;
  const type = schema["type"];
  const actual = value === null ? "null" : Array.isArray(value) ? "array" : typeof value;
  if (type && !(type === actual || (type === "integer" && Number.isInteger(value))))
    return `${at}: ${actual} is not ${type}`;
  if (typeof value === "string") {
    if (schema["pattern"] && !new RegExp(schema["pattern"], "u").test(value)) return `${at}: pattern`;
    if (schema["minLength"] !== undefined && value.length < schema["minLength"]) return `${at}: minLength`;
    if (schema["maxLength"] !== undefined && value.length > schema["maxLength"]) return `${at}: maxLength`;
  }
  if (typeof value === "number") {
    if (schema["minimum"] !== undefined && value < schema["minimum"]) return `${at}: minimum`;
    if (schema["maximum"] !== undefined && value > schema["maximum"]) return `${at}: maximum`;
  }
  if (Array.isArray(value)) {
    if (schema["minItems"] !== undefined && value.length < schema["minItems"]) return `${at}: minItems`;
    if (schema["maxItems"] !== undefined && value.length > schema["maxItems"]) return `${at}: maxItems`;
    const prefix = (schema["prefixItems"] ?? []) as Schema[];
    for (const [index, item] of value.entries()) {
      const itemSchema = index < prefix.length ? prefix[index] : schema["items"];
      if (itemSchema === false) return `${at}/${index}: no item allowed here`;
      if (!itemSchema) continue;
      const found = violation(itemSchema, item, root, `${at}/${index}`);
      if (found) return found;
    }
  }
  if (actual === "object") {
    const object = value as Record<string, unknown>;
    for (const key of (schema["required"] ?? []) as string[])
      if (!Object.hasOwn(object, key)) return `${at}/${key}: required`;
    for (const [key, item] of Object.entries(object)) {
      if (schema["propertyNames"]) {
        const found = violation(schema["propertyNames"], key, root, `${at}/${key}(name)`);
        if (found) return found;
      }
      const declared = schema["properties"]?.[key];
      if (declared) {
        const found = violation(declared, item, root, `${at}/${key}`);
        if (found) return found;
      } else if (schema["additionalProperties"] === false) return `${at}/${key}: not allowed`;
      else if (typeof schema["additionalProperties"] === "object") {
        const found = violation(schema["additionalProperties"], item, root, `${at}/${key}`);
        if (found) return found;
      }
    }
  }
  return null;
}
