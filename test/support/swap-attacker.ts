/**
 * A local attacker for the dispatch time-of-check/time-of-use tests: it
 * swaps a retained executable in the store after dispatch has checked it.
 *
 *   node --import tsx test/support/swap-attacker.ts '<json request>'
 *
 * Request: { mode, auditLog, target, swapped, holdMs? }.
 * - "on-audit": note the audit log's size, say "ready" on stderr, then poll
 *   the log in a tight loop and swap `target` the moment it grows (the
 *   dispatch entry is written after the check, just before the exec).
 * - "hold-lock": take the audit log's lock (`<log>.lock`, the directory
 *   proper-lockfile uses) so the dispatcher blocks right before its audit
 *   entry, say "ready", wait holdMs, swap `target`, release the lock.
 * The swap writes `swapped` beside the target and renames it over it (mode
 * 0755). Prints "swapped" on stdout when it swapped.
 */
import { chmodSync, mkdirSync, renameSync, rmdirSync, statSync, writeFileSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";

interface Request {
  mode: "on-audit" | "hold-lock";
  auditLog: string;
  target: string;
  swapped: string;
  holdMs?: number;
}

const request = JSON.parse(process.argv[2] ?? "{}") as Request;

function swap(): void {
  const staged = join(dirname(request.target), `.swap-${process.pid}`);
  writeFileSync(staged, request.swapped);
  chmodSync(staged, 0o755);
  renameSync(staged, request.target);
  writeSync(1, "swapped\n");
}

const size = () => {
  try {
    return statSync(request.auditLog).size;
  } catch {
    return -1;
  }
};

if (request.mode === "on-audit") {
  const before = size();
  // A direct write: the loop below never yields, so a queued stream write would wait for the exit.
  writeSync(2, "ready\n");
  const deadline = Date.now() + 60_000;
  while (size() === before) {
    if (Date.now() > deadline) process.exit(2);
  }
  swap();
} else {
  const lock = `${request.auditLog}.lock`;
  mkdirSync(lock);
  process.stderr.write("ready\n");
  await new Promise((resolve) => setTimeout(resolve, request.holdMs ?? 1000));
  swap();
  rmdirSync(lock);
}
