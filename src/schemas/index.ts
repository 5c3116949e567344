export { formatJsonSchema, formatJsonSchemaText, isSchemaName, type SchemaName } from "./json-schema.js";
