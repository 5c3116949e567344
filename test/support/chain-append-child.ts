/**
 * An appender in its own OS process, for the chain-log concurrency test.
 *
 *   node --import tsx test/support/chain-append-child.ts '<json request>'
 *
 * Request: { scope, dir, file, writer, count }. The child loads everything,
 * writes "ready" on stderr and waits for a line on stdin, so a test can release
 * many children at once; then it appends `count` entries {writer, n}. The
 * outcome is one JSON line on stdout: {"ok":true,"seqs":[...]} (exit 0) or
 * {"ok":false,"error":{...}} (exit 1).
 */
import { appendEntry } from "../../src/ledger/chain-log.js";
import { reportFailure } from "./child-outcome.js";

interface Request {
  scope: string;
  dir: string[];
  file: string;
  writer: number;
  count: number;
}

const request = JSON.parse(process.argv[2] ?? "{}") as Request;

await new Promise<void>((resolve) => {
  process.stdin.once("data", () => {
    process.stdin.pause();
    resolve();
  });
  process.stderr.write("ready\n");
});

const seqs: number[] = [];
try {
  for (let n = 0; n < request.count; n++) {
    const entry = await appendEntry(
      request.scope,
      { dir: request.dir, file: request.file },
      { writer: request.writer, n },
      { lockWaitMs: 60_000 },
    );
    seqs.push(entry.seq);
  }
  process.stdout.write(`${JSON.stringify({ ok: true, seqs })}\n`);
} catch (error) {
  reportFailure(error, { seqs });
}
