/**
 * A publisher in its own OS process, for the reliability tests.
 *
 *   node --import tsx test/support/retain-child.ts '<json request>'
 *
 * Request: { scope, source, key, kind?, mode: "capability" | "tree",
 *            lockFile?, waitForGo?, faults?, lockWaitMs? }
 *
 * With waitForGo, the child loads everything, writes "ready" on stderr and
 * waits for a line on stdin before it starts, so a test can release many
 * children at once. `faults` lists publication steps the child makes fail
 * through the fault hook. The outcome is one JSON line on stdout:
 * {"ok":true,"receipt":{...}} (exit 0) or {"ok":false,"error":{...}} (exit 1).
 */
import { readFileSync } from "node:fs";
import { waitForGo } from "./go.js";
import { retainCapabilityArtifact, retainTree, type ArtifactKind } from "../../src/index.js";
import { setFaultHook, type PublishStep } from "../../src/retention/store/faults.js";
import { reportFailure } from "./child-outcome.js";

interface Request {
  scope: string;
  source: string;
  key: string;
  kind?: ArtifactKind;
  mode: "capability" | "tree";
  lockFile?: string;
  waitForGo?: boolean;
  faults?: PublishStep[];
  lockWaitMs?: number;
}

const request = JSON.parse(process.argv[2] ?? "{}") as Request;

async function main(): Promise<void> {
  const lock = request.lockFile ? JSON.parse(readFileSync(request.lockFile, "utf8")) : undefined;
  if (request.faults?.length) {
    const failing = new Set(request.faults);
    setFaultHook((step) => {
      if (failing.has(step)) throw Object.assign(new Error(`injected ${step} fault`), { code: "EIO" });
    });
  }
  const options = request.lockWaitMs === undefined ? {} : { lockWaitMs: request.lockWaitMs };
  if (request.waitForGo) await waitForGo();
  try {
    const receipt =
      request.mode === "capability"
        ? await retainCapabilityArtifact(request.scope, request.source, request.key, lock, options)
        : await retainTree(
            request.scope,
            { kind: request.kind ?? "capture", key: request.key, source: request.source },
            options,
          );
    process.stdout.write(`${JSON.stringify({ ok: true, receipt })}\n`);
  } catch (error) {
    reportFailure(error);
  }
}

await main();
