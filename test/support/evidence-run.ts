/** Shared helpers of the run-evidence tests: read a run's files, wait for a condition, inspect /proc. */
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { listRuns } from "../../src/index.js";

export function runDir(scope: string, handle: string): string {
  return join(scope, ".agents/runs", handle);
}

export function logText(scope: string, handle: string): string {
  return readFileSync(join(runDir(scope, handle), "log"), "utf8");
}

export function logSize(scope: string, handle: string): number {
  return statSync(join(runDir(scope, handle), "log")).size;
}

export async function waitFor<T>(
  what: string,
  probe: () => T | null | undefined | false,
  timeoutMs = 20_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value !== null && value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 25));
  }
}

/** The one run of a scope that is still open (running), once it has at least `lines` log lines. */
export async function runningRun(scope: string, lines = 1): Promise<string> {
  return waitFor(`a running run with ${lines} line(s)`, () => {
    const run = listRuns(scope).find((row) => row.state === "running");
    if (!run) return null;
    const text = logText(scope, run.handle);
    return text.split("\n").length - 1 >= lines ? run.handle : null;
  });
}

/** A process that is alive and not a zombie. */
export function alive(pid: number): boolean {
  if (!existsSync(`/proc/${pid}/stat`)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}
