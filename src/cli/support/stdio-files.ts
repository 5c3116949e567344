import { once } from "node:events";
import { createReadStream, createWriteStream, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import { usageError } from "./envelope.js";

/**
 * `-` for a bundle: `oats export -o -` writes it to stdout and `oats import -`
 * reads it from stdin. The library reads and writes real files (it verifies
 * what it wrote and renames into place), so the bytes pass through a file in
 * a private directory (mkdtemp: mode 0700, a fresh name) that is removed
 * whatever happens.
 */

export const STDIO = "-";

async function withPrivateDir<T>(body: (dir: string) => Promise<T>): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), "oats-stdio-"));
  try {
    return await body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Copy stdin into a private file, then run `body` on it. */
export function withStdinFile<T>(
  body: (path: string) => Promise<T>,
  stdin: NodeJS.ReadableStream = process.stdin,
): Promise<T> {
  return withPrivateDir(async (dir) => {
    const path = join(dir, "stdin.tar");
    await pipeline(stdin, createWriteStream(path, { flags: "wx", mode: 0o600 }));
    return body(path);
  });
}

/**
 * Let `body` write a private file, then copy it to stdout. --json reserves
 * stdout for the envelope, so the two together are a usage error, refused
 * before anything is read.
 */
export function toStdout<T>(
  json: boolean,
  body: (path: string) => Promise<T>,
  stdout: NodeJS.WritableStream = process.stdout,
): Promise<T> {
  if (json)
    throw usageError("`-o -` writes the bundle to stdout, which --json reserves for its envelope; give a file path", {
      reason: "stdout-taken",
    });
  return withPrivateDir(async (dir) => {
    const path = join(dir, "stdout.tar");
    const result = await body(path);
    let failure: unknown = null;
    const onError = (error: unknown) => {
      failure = error;
    };
    stdout.on("error", onError);
    try {
      for await (const chunk of createReadStream(path)) {
        if (failure !== null) break;
        if (!stdout.write(chunk as Buffer)) await Promise.race([once(stdout, "drain"), once(stdout, "error")]);
      }
    } finally {
      stdout.off("error", onError);
    }
    if (failure !== null) throw failure;
    return result;
  });
}
