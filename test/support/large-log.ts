import { closeSync, openSync, writeSync } from "node:fs";
import { bytesDigester } from "../../src/core/canonical-json.js";
import { formatStamp } from "../../src/evidence/log-format.js";

/**
 * A valid run log of about `size` bytes written at `path` a piece at a time
 * (never held whole): lines of 200 bytes of text (`tag`, then x) with strictly increasing
 * stamps, then the footer of a run that exited 0. Returns what a record
 * seals of it.
 */
export function writeLargeLog(path: string, size: number, tag = ""): { digest: string; bytes: number; lines: number } {
  const fd = openSync(path, "wx", 0o600);
  const digester = bytesDigester();
  let bytes = 0;
  let lines = 0;
  const start = Date.UTC(2026, 11, 1, 3, 40) * 1000;
  const text = tag.padEnd(200, "x");
  const put = (chunk: Buffer) => {
    digester.update(chunk);
    for (let at = 0; at < chunk.length; ) at += writeSync(fd, chunk, at);
    bytes += chunk.length;
  };
  try {
    while (bytes < size) {
      const batch: string[] = [];
      for (let n = 0; n < 4096; n += 1) {
        batch.push(`${formatStamp(start + lines)} out ${lines} ${text}\n`);
        lines += 1;
      }
      put(Buffer.from(batch.join(""), "utf8"));
    }
    put(Buffer.from("# exit: code 0\n# RESULT: OK\n", "utf8"));
  } finally {
    closeSync(fd);
  }
  return { digest: digester.digest(), bytes, lines };
}
