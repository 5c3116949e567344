import { dirTransport } from "../../src/evidence/transports/dir.js";
import { pushEvidence } from "../../src/evidence/push.js";
import type { EvidenceTransport } from "../../src/evidence/transport.js";

/**
 * A pusher that stops dead after the far side took entry `stopAfter` and
 * before the outbox could mark it: it says so on stdout and waits to be
 * killed (SIGKILL, by the test). The transport is the real dir: transport;
 * the wrapper only holds the process at that point.
 */
const [scope, share, stopAfter] = process.argv.slice(2) as [string, string, string];
const real = dirTransport(share, { allowSameFilesystem: true });
const holding: EvidenceTransport = {
  describe: () => real.describe(),
  probe: () => real.probe(),
  async put(bundle) {
    await real.put(bundle);
    if (bundle.seq === Number(stopAfter)) {
      process.stdout.write(`PUT ${bundle.seq}\n`);
      await new Promise(() => setInterval(() => undefined, 1000));
    }
  },
  readBack: (runId) => real.readBack(runId),
};
await pushEvidence(scope, { to: holding });
process.stdout.write("DONE\n");
