/**
 * `prepareCapture` in its own OS process, released with the others at once
 * (go.ts), for the tests of concurrent publishers.
 *
 *   node --import tsx test/support/capture-prepare-child.ts '<json request>'
 *
 * Request: { scope, spec }. The outcome is one JSON line on stdout:
 * {"ok":true,"id":...} or {"ok":false,"code":...,"reason":...}.
 */
import { OatsError, prepareCapture } from "../../src/index.js";
import { waitForGo } from "./go.js";

const request = JSON.parse(process.argv[2] ?? "{}") as { scope: string; spec: string };

await waitForGo();
try {
  const prepared = await prepareCapture(request.scope, request.spec);
  process.stdout.write(`${JSON.stringify({ ok: true, id: prepared.id })}\n`);
} catch (error) {
  if (!(error instanceof OatsError)) throw error;
  process.stdout.write(`${JSON.stringify({ ok: false, code: error.code, reason: error.details["reason"] ?? null })}\n`);
}
