import { existsSync } from "node:fs";
import { dirTransport } from "../../src/evidence/transport-dir.js";
import { pushEvidence } from "../../src/evidence/push.js";
import type { EvidenceTransport } from "../../src/evidence/transport.js";

/**
 * A pusher that stops dead after the far side took entry `stopAfter` and
 * before the outbox could mark it: it says so on stdout and waits to be
 * killed (SIGKILL, by the test). The transport is the real dir: transport;
 * the wrapper only holds the process at that point.
 */
const [scope, share, stopAfter, goFile, delayMs] = process.argv.slice(2) as [string, string, string, string?, string?];
// Two pushers start together: each waits for the go file, and each put takes a while, so they overlap.
if (goFile) {
  process.stdout.write("READY\n");
  while (!existsSync(goFile)) await new Promise((resolve) => setTimeout(resolve, 5));
}
const real = dirTransport(share, { allowSameFilesystem: true });
const holding: EvidenceTransport = {
  describe: () => real.describe(),
  probe: () => real.probe(),
  async put(bundle) {
    await real.put(bundle);
    if (delayMs) await new Promise((resolve) => setTimeout(resolve, Number(delayMs)));
    if (bundle.seq === Number(stopAfter)) {
      process.stdout.write(`PUT ${bundle.seq}\n`);
      await new Promise(() => setInterval(() => undefined, 1000));
    }
  },
  readBack: (runId) => real.readBack(runId),
};
const result = await pushEvidence(scope, { to: holding });
process.stdout.write(`DONE ${JSON.stringify(result.delivered.map((entry) => entry.seq))}\n`);
