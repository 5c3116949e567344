/**
 * A preparer in its own OS process, for the reliability tests.
 *
 *   node --import tsx test/support/prepare-child.ts '<json request>'
 *
 * Request: { scope, plan, baseDir?, waitForGo?, blockAt? }
 *
 * With waitForGo, the child loads everything, writes "ready" on stderr and
 * waits for a line on stdin before it starts, so a test can release several
 * children at once. With blockAt (a prepare step), the child writes
 * "blocked <step>" on stderr when prepare reaches that step and then waits
 * forever, so a test can SIGKILL it exactly there. The outcome is one JSON
 * line on stdout: {"ok":true,"id":...,"status":...} (exit 0) or
 * {"ok":false,"error":{...}} (exit 1).
 */
import { prepare } from "../../src/index.js";
import { waitForGo } from "./go.js";
import { setPrepareHook, type PrepareStep } from "../../src/resolution/prepare.js";
import { reportFailure } from "./child-outcome.js";
import type { JsonValue } from "../../src/core/index.js";

interface Request {
  scope: string;
  plan: JsonValue;
  baseDir?: string;
  waitForGo?: boolean;
  blockAt?: PrepareStep;
}

const request = JSON.parse(process.argv[2] ?? "{}") as Request;

async function main(): Promise<void> {
  if (request.blockAt) {
    setPrepareHook((step) => {
      if (step !== request.blockAt) return;
      process.stderr.write(`blocked ${step}\n`);
      setInterval(() => {}, 1 << 30);
      return new Promise<void>(() => {});
    });
  }
  if (request.waitForGo) await waitForGo();
  try {
    const result = await prepare(request.scope, request.plan, request.baseDir ? { baseDir: request.baseDir } : {});
    process.stdout.write(`${JSON.stringify({ ok: true, id: result.id, status: result.status })}\n`);
  } catch (error) {
    reportFailure(error);
  }
}

await main();
